#!/usr/bin/env bash
# How Domino's benefit depends on the work per micro-batch (host launch overhead vs
# GPU time): llama3-3b, tp 2, seq 4096, --mode all at mbs 4 and 8 (splits 2).
# Usage: OUT=/some/dir bash benchmarks/gpu_scaling.sh   (on the 2-GPU machine)
set -euo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT}
W=/tmp/dp-scale; rm -rf "$W"; mkdir -p "$W"
for mbs in 4 8; do
  python3 -m domino_prof.commands.run --tp 2 --seq 4096 --model llama3-3b --mbs $mbs --mode all \
     --warmup 2 --steps 5 --profile-steps 1 --out "$W/mbs$mbs" --no-analyze 2>&1 | tee "$W/mbs$mbs.txt" || true
  cp "$W/mbs$mbs/run.json" "$OUT/run_mbs$mbs.json" || true
  cp "$W/mbs$mbs.txt" "$OUT/" || true
  cp "$W/mbs$mbs/domino/rank0.pt.trace.json.gz" "$OUT/mbs${mbs}_domino_rank0.json.gz" || true
done
