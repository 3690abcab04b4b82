#!/usr/bin/env bash
# Issue 19's GPU check of the step-as-data refactor, on one H200 (default attention: cuDNN
# on Hopper): bench_schedule 3x, alternating the code before the refactor (commit
# cd6e349) and this tree, then the gradient checks gpu_verify --tp 1 and
# --tp 2 --backend gloo on this tree. JSON under $OUT; a before/after table at the end
# (no row's median slower than before by more than max(2 %, its before-spread)).
# Usage: OUT=/some/dir bash benchmarks/gpu_refactor_check.sh
#   REPS="1 2 3" (the repeats to run), SKIP_VERIFY=1 (bench only), BENCH_ARGS (e.g.
#   "--variants eager,graphs")
#   BEFORE=DIR: a checkout of cd6e349 (default: made from this repository's git, if any)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT}
AFTER=$PWD
BEFORE=${BEFORE:-/tmp/domino-before}
if [ ! -f "$BEFORE/benchmarks/bench_schedule.py" ]; then
  mkdir -p "$BEFORE" && git -C "$AFTER" archive cd6e349 | tar -x -C "$BEFORE" || {
    echo "no checkout of cd6e349: set BEFORE=DIR (git archive cd6e349 | tar -x -C DIR)" >&2
    exit 2; }
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  echo "after: $(git -C "$AFTER" rev-parse HEAD 2>/dev/null || echo unknown)"
} > "$OUT/env.txt" 2>&1
ARGS=(--model llama3-3b --seq 1024 --mbs 2 ${BENCH_ARGS:-})
for i in ${REPS:-1 2 3}; do
  for side in before after; do
    dir=$BEFORE; [ "$side" = after ] && dir=$AFTER
    ( cd "$dir" && PYTHONPATH="$dir" timeout "${BENCH_S:-420}" python3 \
        benchmarks/bench_schedule.py "${ARGS[@]}" --out "$OUT/bench_${side}_$i.json" ) \
      2>&1 | grep -v Warning > "$OUT/bench_${side}_$i.txt"
    tail -12 "$OUT/bench_${side}_$i.txt"
  done
done
export PYTHONPATH="$AFTER"
[ "${SKIP_VERIFY:-0}" = 1 ] || {
timeout "${VERIFY_S:-300}" python3 benchmarks/gpu_verify.py --tp 1 --out "$OUT/verify_tp1" \
  > "$OUT/verify_tp1.txt" 2>&1
timeout "${VERIFY_S:-300}" python3 benchmarks/gpu_verify.py --tp 2 --backend gloo \
  --out "$OUT/verify_gloo_tp2" > "$OUT/verify_gloo_tp2.txt" 2>&1
}
python3 - "$OUT" <<'EOF'
import json, statistics, sys
from pathlib import Path

out = Path(sys.argv[1])
rows = {}
for side in ("before", "after"):
    for p in sorted(out.glob(f"bench_{side}_*.json")):
        for r in json.loads(p.read_text())["rows"]:
            if "wall_ms" in r:
                key = (r["schedule"], r["graphs"], r["compile"])
                rows.setdefault(key, {}).setdefault(side, []).append(r["wall_ms"])
print(f"{'row':34s} {'before ms':>10s} {'spread':>7s} {'after ms':>10s} {'ratio':>6s}  ok")
for key, v in rows.items():
    b, a = v.get("before", []), v.get("after", [])
    if not b or not a:
        continue
    mb, ma = statistics.median(b), statistics.median(a)
    spread = max(b) - min(b)
    ok = ma - mb <= max(0.02 * mb, spread)
    print(f"{str(key):34s} {mb:10.2f} {spread:7.2f} {ma:10.2f} {ma / mb:6.3f}  {ok}")
for name in ("verify_tp1", "verify_gloo_tp2"):
    p = out / name / "gpu_verify.json"
    if p.exists():
        res = json.loads(p.read_text())
        errs = {k: v.get("max_rel_err") for k, v in res.items() if isinstance(v, dict)}
        f32 = max((e for k, e in errs.items() if "float32" in k and e is not None), default=None)
        b16 = max((e for k, e in errs.items() if "bfloat16" in k and e is not None), default=None)
        bad = [k for k, v in res.items() if isinstance(v, dict) and "error" in v]
        print(f"{name}: fp32 max {f32} (<= 1.1e-5), bf16 max {b16} (<= 0.03), errors {bad}")
EOF
