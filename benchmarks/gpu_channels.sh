#!/usr/bin/env bash
# Does capping NCCL's channels (SMs held by all-reduce kernels) help Domino with CUDA
# graphs? llama3-3b, tp 2, seq 4096, mbs 2, domino only, alternating settings, timed steps.
# Usage: OUT=/some/dir bash benchmarks/gpu_channels.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
W=/tmp/dp-ch; rm -rf "$W"; mkdir -p "$W"
for i in 1 2; do for ch in default 8 4; do
  n="rep${i}_ch$ch"
  envs=(X=1); [ "$ch" != default ] && envs=(NCCL_MAX_NCHANNELS=$ch)
  env "${envs[@]}" python3 -m domino_prof.commands.run --tp 2 --seq 4096 --model llama3-3b --mbs 2 \
    --mode domino --cuda-graphs --warmup 3 --steps 10 --profile-steps 1 --no-analyze \
    --out "$W/$n" > "$W/$n.log" 2>&1
  grep -E "step .* ms|error" "$W/$n.log" | sed "s/^/$n: /" | tee -a "$OUT/channels.txt"
done; done
