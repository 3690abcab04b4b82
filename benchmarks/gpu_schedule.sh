#!/usr/bin/env bash
# One-GPU evidence for the schedule redesign (tp 1: no collectives): correctness of every
# schedule variant against the unsharded model, the side-by-side schedule benchmark, and
# one profiled `run --mode all` whose traces the analyzer reads back here.
# Usage: OUT=/some/dir bash benchmarks/gpu_schedule.sh   (on the GPU machine)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT}
MODEL=${MODEL:-llama3-3b} SEQ=${SEQ:-1024} MBS=${MBS:-2}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} > "$OUT/env.txt" 2>&1
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  timeout "${BENCH_S:-330}" python3 benchmarks/bench_schedule.py --model "$MODEL" --seq "$SEQ" \
    --mbs "$MBS" ${VARIANTS:+--variants "$VARIANTS"} --out "$OUT/bench_schedule.json" \
    ${PROFILE:+--profile "$PROFILE" --profile-dir /tmp/bench_traces} \
    2>&1 | grep -v Warning | tee "$OUT/bench_schedule.txt"
  [ -d /tmp/bench_traces ] && tar -C /tmp -czf "$OUT/bench_traces.tgz" bench_traces
fi
if [ "${SKIP_VERIFY:-0}" != 1 ]; then
  timeout "${VERIFY_S:-150}" python3 benchmarks/gpu_verify.py --tp 1 --out /tmp/verify \
    > "$OUT/verify.txt" 2>&1
  cp /tmp/verify/gpu_verify.json "$OUT/gpu_verify_tp1.json" 2>/dev/null
  grep -E "^(tp|domino|sp)" "$OUT/verify.txt" | cut -c1-150
fi
if [ "${SKIP_RUN:-0}" != 1 ]; then
  rm -rf /tmp/r8
  timeout "${RUN_S:-120}" python3 -m domino_prof.commands.run --tp 1 --device cuda \
    --model "$MODEL" --layers 8 --seq "$SEQ" --mbs "$MBS" --mode all --steps 5 \
    --profile-steps 1 --no-analyze --out /tmp/r8 ${RUN_FLAGS:-} > "$OUT/run8.txt" 2>&1
  tail -15 "$OUT/run8.txt"
  tar -C /tmp -czf "$OUT/run8.tgz" r8 2>/dev/null
fi
ls -la "$OUT"
