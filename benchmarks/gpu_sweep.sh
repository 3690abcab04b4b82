#!/usr/bin/env bash
# Timed-only sweep (2×H200): what limits Domino with CUDA graphs at mbs 2 — NCCL
# protocol/channels (SM contention) — plus the graphed gradient check.
# Usage: OUT=/some/dir bash benchmarks/gpu_sweep.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
W=/tmp/dp-sweep; rm -rf "$W"; mkdir -p "$W"
python3 benchmarks/gpu_verify.py --tp 2 --out "$W/verify" > "$W/verify.txt" 2>&1
cp "$W/verify/gpu_verify.json" "$OUT/gpu_verify.json" || tail -40 "$W/verify.txt"
run() {  # name, env..., then run args after --
  local name=$1; shift; local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" python3 -m domino_prof.commands.run --tp 2 --seq 4096 --model llama3-3b --mbs 2 \
    --cuda-graphs --warmup 3 --steps 8 --profile-steps 1 --no-analyze --out "$W/$name" "$@" 2>&1 \
    | grep -E "step .* ms|error" | sed "s/^/$name: /" | tee -a "$OUT/sweep.txt"
}
run base X=1 -- --mode all
run simple NCCL_PROTO=Simple -- --mode all
run ch4 NCCL_MAX_NCHANNELS=4 -- --mode domino
run ch8 NCCL_MAX_NCHANNELS=8 -- --mode domino
