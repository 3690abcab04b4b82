#!/usr/bin/env bash
# The GPU evidence run (2×H200, NVLink): correctness in bf16, the tp 2 llama3-3b
# comparison, and a small 2-layer run whose traces become tests/data fixtures.
# Usage: OUT=/some/dir bash benchmarks/gpu_session.sh   (on the GPU machine)
set -euo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT}
W=/tmp/dp-gpu; rm -rf "$W"; mkdir -p "$W"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nvidia-smi topo -m || true
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
} 2>&1 | tee "$W/env.txt"
dp() { shift; python3 -m domino_prof.commands.run "$@"; }  # run alone: no other command imported
# 1. small run -> test fixtures (2 layers, 1 profiled step)
dp run --tp 2 --model llama3-3b --layers 2 --seq 1024 --mbs 2 --mode all --warmup 2 --steps 3 \
   --profile-steps 1 --out "$W/small" --no-analyze 2>&1 | tee "$W/small.txt"
# 2. the headline comparison
dp run --tp 2 --seq 4096 --model llama3-3b --mbs 2 --mode all --warmup 2 --steps 5 \
   --profile-steps 2 --out "$W/run3b" --no-analyze 2>&1 | tee "$W/run3b.txt"
# 3. gradients vs the unsharded model, bf16 and fp32, and stream concurrency
python3 benchmarks/gpu_verify.py --tp 2 --out "$W/verify" 2>&1 | tail -60 | tee "$W/verify.txt"
ls -la "$W"/*/* > "$W/sizes.txt"
tar -C "$W" -czf "$OUT/small.tgz" small
tar -C "$W" -czf "$OUT/meta.tgz" env.txt small.txt run3b.txt verify.txt sizes.txt run3b/run.json run3b/config.json run3b/logs verify
for m in domino tp nocomm; do for r in 0 1; do
  f="$W/run3b/$m/rank$r.pt.trace.json.gz"; [ -f "$f" ] && [ "$m$r" != nocomm1 ] && cp "$f" "$OUT/run3b_${m}_rank$r.json.gz"
done; done
ls -la "$OUT"
