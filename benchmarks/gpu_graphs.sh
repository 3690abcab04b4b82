#!/usr/bin/env bash
# CUDA-graph variant of the evidence run (2×H200): gradient check incl. graphed
# schedules, then llama3-3b tp 2 seq 4096 --mode all with --cuda-graphs at mbs 2 and 4.
# Usage: OUT=/some/dir bash benchmarks/gpu_graphs.sh   (on the 2-GPU machine)
set -euo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT}
W=/tmp/dp-graphs; rm -rf "$W"; mkdir -p "$W"
python3 benchmarks/gpu_verify.py --tp 2 --out "$W/verify" 2>&1 | grep -v Warn | tail -80 > "$W/verify.txt" || true
cp "$W/verify/gpu_verify.json" "$OUT/gpu_verify.json" || cp "$W/verify.txt" "$OUT/verify_failed.txt"
for mbs in 2 4; do
  python3 -m domino_prof.commands.run --tp 2 --seq 4096 --model llama3-3b --mbs $mbs --mode all \
     --cuda-graphs --warmup 3 --steps 5 --profile-steps 2 --out "$W/g$mbs" --no-analyze 2>&1 \
     | tee "$W/g$mbs.txt" | grep -E "^\[domino|│|error" || true
  tar -C "$W" -czf "$OUT/g${mbs}_meta.tgz" "g$mbs.txt" "g$mbs/run.json" "g$mbs/logs" || true
done
for m in domino tp; do for r in 0 1; do
  cp "$W/g2/$m/rank$r.pt.trace.json.gz" "$OUT/g2_${m}_rank$r.json.gz" || true
done; done
cp "$W/g2/nocomm/rank0.pt.trace.json.gz" "$OUT/g2_nocomm_rank0.json.gz" || true
ls -la "$OUT"
