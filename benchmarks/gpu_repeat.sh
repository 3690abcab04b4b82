#!/usr/bin/env bash
# Run-to-run spread of the headline comparison (2×H200): llama3-3b, tp 2, seq 4096,
# mbs 2, --mode all, three times with --cuda-graphs and twice eager; timed steps only
# matter here (1 profiled step, no analysis).
# Usage: OUT=/some/dir bash benchmarks/gpu_repeat.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
W=/tmp/dp-rep; rm -rf "$W"; mkdir -p "$W"
for i in 1 2 3; do for g in --cuda-graphs --no-cuda-graphs; do
  [ "$i" = 3 ] && [ "$g" = --no-cuda-graphs ] && continue
  n="rep$i${g/--/_}"
  python3 -m domino_prof.commands.run --tp 2 --seq 4096 --model llama3-3b --mbs 2 --mode all $g \
    --warmup 3 --steps 10 --profile-steps 1 --no-analyze --out "$W/$n" > "$W/$n.log" 2>&1
  cp "$W/$n/run.json" "$OUT/$n.json" 2>/dev/null || tail -3 "$W/$n.log"
  grep -E "step .* ms" "$W/$n.log" | sed "s/^/$n: /" | tee -a "$OUT/repeat.txt"
done; done
