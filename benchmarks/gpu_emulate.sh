#!/usr/bin/env bash
# Issue 20 on one H200, the parts that need no `run --comm emulate` wiring:
#   heldout: the emulated all-reduce (profile h200-nvlink-tp2, fitted on tests/data's seq-1024
#            traces only) at the seq-4096 runs' 25.2M-element bf16 size vs those runs' p10
#            (reports/h200x2-llama3-3b-tp2-seq4096*/tp/analysis.json): within 5%
#   interp:  tests/test_emulation.py's Triton tests (interpreter, sm_90 compile) where msgspec
#            and pytest are installed
#   (benchmarks/probe_emulate_kernel.py is the self-contained first look at the kernel)
# Usage: OUT=/some/dir bash benchmarks/gpu_emulate.sh [heldout|interp ...]  (default: all)
set -uo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
parts=${*:-heldout interp}
rc=0
for part in $parts; do case $part in
  heldout) python3 benchmarks/bench_emulate.py --out "$OUT/emulate_heldout.json" \
             2>&1 | tee "$OUT/emulate_heldout.txt" || rc=1 ;;
  interp)  if python3 -c "import msgspec, pytest" 2>/dev/null; then
             python3 -m pytest -q -p no:cacheprovider tests/test_emulation.py -k "triton or hopper" \
               > "$OUT/emulate_interp.txt" 2>&1 || rc=1
           else  # test_emulation imports the calibrate fit, which needs msgspec
             echo "skipped: no msgspec/pytest on this image" > "$OUT/emulate_interp.txt"
           fi ;;
esac; done
ls -la "$OUT"
exit $rc
