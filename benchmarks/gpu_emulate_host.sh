#!/usr/bin/env bash
# Issue 20's last GPU checks, on one GPU (the lent H200), parts chosen by arguments:
#   host    benchmarks/bench_emulate_host.py: host us per emulated collective, fast launch
#           vs plain vs c10d NCCL (one-rank group); the fast path's outputs, durations and
#           graph capture checked against the plain one
#   ab      llama3-8b, 8 layers, emulated tp 8, --mode all: the plain launch
#           (DOMINO_PROF_EMULATE_LAUNCH=jit) and the fast one, alternating (eager: J F J F;
#           graphs: J F); run.json + stdout back (issue_ms and step_ms per mode)
#   shapes  nocomm and domino, llama3-8b, 2 layers, tp 8, eager, profiled with input shapes
#           (a sitecustomize turns record_shapes on: the GEMMs' shapes behind the kernels)
#   compile --compile under --comm emulate (never run before): llama3-8b, 2 layers, tp 8
#   full    `domino-prof run --tp 8 --seq 4096 --comm emulate` as a user types it (default
#           model, depth, steps; analysis and report on the GPU node: carry .whl with
#           msgspec and plotly, installed into /tmp/site by the caller)
#   fullgraphs  the same with --cuda-graphs
# Writes under $OUT; stdlib only for packing (benchmarks/pack_runs.py).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
W=${WORK:-/tmp/emu-host}
rm -rf "$W" && mkdir -p "$W"
exec > >(tee -a "$OUT/gpu_emulate_host.log") 2>&1
parts=${*:-host ab}
RUN="python3 -m domino_prof.commands.run"
echo "== gpu_emulate_host.sh $(date -u +%FT%TZ) parts: $parts"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
git log --oneline -1 2>/dev/null
rc=0

part_host() { timeout 240 python3 benchmarks/bench_emulate_host.py --out "$OUT/emulate_host.json"; }

one() {  # name launch extra-args...
  local name=$1 launch=$2; shift 2
  local s0=$SECONDS
  DOMINO_PROF_EMULATE_LAUNCH=$launch timeout 150 $RUN --comm emulate --tp 8 --device cuda \
    --model llama3-8b --seq 4096 --mbs 2 --mode all --warmup 1 --steps 8 --block-steps 2 \
    --profile-steps 1 --no-analyze --out "$W/ab/$name" "$@" > "$W/ab/$name.txt" 2>&1
  local r=$?
  echo "$name rc=$r $((SECONDS - s0)) s"
  mkdir -p "$W/ab/$name" && mv "$W/ab/$name.txt" "$W/ab/$name/stdout.txt"
  find "$W/ab/$name" -name '*.pt.trace.json.gz' -delete
  python3 - "$W/ab/$name/run.json" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("  no run.json:", e); raise SystemExit
for m, r in d.get("modes", {}).items():
    print(f"  {m:10s} step {r.get('step_ms', float('nan')):7.2f} ms  issue {r.get('issue_ms', float('nan')):7.2f} ms")
EOF
  return $r
}

part_ab() {
  mkdir -p "$W/ab"
  local fails=0
  one eager-jit-1 jit --layers 8 || fails=$((fails + 1))
  one eager-fast-1 compiled --layers 8 || fails=$((fails + 1))
  one eager-jit-2 jit --layers 8 || fails=$((fails + 1))
  one eager-fast-2 compiled --layers 8 || fails=$((fails + 1))
  one graphs-jit-1 jit --layers 8 --cuda-graphs || fails=$((fails + 1))
  one graphs-fast-1 compiled --layers 8 --cuda-graphs || fails=$((fails + 1))
  tar -czf "$OUT/ab.tar.gz" -C "$W/ab" .
  [ $fails -eq 0 ]
}

part_shapes() {
  mkdir -p "$W/shapes/site"
  cat > "$W/shapes/site/sitecustomize.py" <<'EOF'
# record_shapes for every torch.profiler.profile of this process tree (a probe only)
try:
    import torch.profiler as _p
    _orig = _p.profile.__init__
    def _init(self, *a, **k):
        k["record_shapes"] = True
        _orig(self, *a, **k)
    _p.profile.__init__ = _init
except Exception:
    pass
EOF
  local r=0
  for mode in nocomm domino; do
    PYTHONPATH="$W/shapes/site:$PYTHONPATH" timeout 120 $RUN --comm emulate --tp 8 \
      --device cuda --model llama3-8b --layers 2 --seq 4096 --mbs 2 --mode $mode --warmup 1 \
      --steps 2 --block-steps 1 --profile-steps 1 --no-analyze --out "$W/shapes/$mode" \
      > "$W/shapes/$mode.txt" 2>&1 || r=1
    tail -2 "$W/shapes/$mode.txt"
  done
  tar -czf "$OUT/shapes.tar.gz" -C "$W/shapes" nocomm domino nocomm.txt domino.txt
  return $r
}

part_compile() {
  local s0=$SECONDS lim=$(( ${CALL_S:-590} - SECONDS ))  # what the device call has left
  [ $lim -gt 400 ] && lim=400
  [ $lim -lt 60 ] && { echo "compile: skipped, ${lim}s left in the call"; return 1; }
  timeout $lim $RUN --comm emulate --tp 8 --device cuda --model llama3-8b --layers 2 --seq 4096 \
    --mbs 2 --mode all --compile --warmup 2 --steps 8 --block-steps 2 --profile-steps 1 \
    --no-analyze --out "$W/compile/llama3-8b-tp8-2layers-compile" > "$W/compile.txt" 2>&1
  local r=$?
  echo "compile rc=$r $((SECONDS - s0)) s"; tail -25 "$W/compile.txt"
  mv "$W/compile.txt" "$W/compile/llama3-8b-tp8-2layers-compile/stdout.txt" 2>/dev/null
  python3 benchmarks/pack_runs.py --root "$W/compile" --out "$OUT/compile.tar.gz" \
    --traces "$OUT/compile.tar.gz" --cap-mib 15
  return $r
}

full_run() {  # name extra-args...
  local name=$1 s0=$SECONDS; shift
  python3 -c "import msgspec, plotly" || { echo "full: carry msgspec and plotly wheels"; return 1; }
  timeout ${FULL_S:-560} python3 -m domino_prof.cli run --tp 8 --seq 4096 --comm emulate "$@" \
    --out "$W/$name/$name" > "$W/$name.txt" 2>&1
  local r=$?
  echo "$name rc=$r $((SECONDS - s0)) s"; tail -30 "$W/$name.txt"
  mv "$W/$name.txt" "$W/$name/$name/stdout.txt" 2>/dev/null
  python3 benchmarks/pack_runs.py --root "$W/$name" --out "$OUT/$name.tar.gz" \
    --traces "$OUT/$name-traces-{i}.tar.gz" --max-tarballs 2 --cap-mib 15
  cp "$W/$name/$name/report.html" "$OUT/$name-report.html" 2>/dev/null
  return $r
}

part_full() { full_run default-tp8-seq4096-emulated; }

# the same with --cuda-graphs: the host off the step (eager is host-bound at this shard)
part_fullgraphs() { full_run graphs-tp8-seq4096-emulated --cuda-graphs; }

for part in $parts; do
  echo "== part $part $(date -u +%T)"
  s0=$SECONDS
  "part_$part"
  r=$?
  echo "== part $part rc=$r in $((SECONDS - s0)) s"
  [ $r -ne 0 ] && rc=1
done
ls -la "$OUT"
sleep 1
exit $rc
