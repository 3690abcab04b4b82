#!/usr/bin/env bash
# llama3-8b at tp 2 (2×H200): --mode all, eager and with --cuda-graphs, timed steps.
# Usage: OUT=/some/dir bash benchmarks/gpu_8b.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
W=/tmp/dp-8b; rm -rf "$W"; mkdir -p "$W"
for g in --no-cuda-graphs --cuda-graphs; do
  n="llama3-8b${g/--/_}"
  python3 -m domino_prof.commands.run --tp 2 --seq 4096 --model llama3-8b --mbs 2 --mode all $g \
    --warmup 3 --steps 8 --profile-steps 1 --no-analyze --out "$W/$n" > "$W/$n.log" 2>&1
  cp "$W/$n/run.json" "$OUT/$n.json" 2>/dev/null || tail -3 "$W/$n.log"
  grep -E "step .* ms|error" "$W/$n.log" | sed "s/^/$n: /" | tee -a "$OUT/8b.txt"
done
