#!/usr/bin/env bash
# Issue 21 validations on ONE H200 (nvidia-h200): the replay's predictions against the
# runs that apply the fix, and the in-graph kernel cost the CUDA-graph scenario uses.
# Usage: OUT=/some/dir bash benchmarks/gpu_whatif.sh
#  1. GRAPH_KERNEL_GAP_NS: graph replay vs eager queued gap between kernels
#  2. --cuda-graphs step predicted from an eager trace: tp 1, llama3-3b, 8 and 28 layers
#  3. the tp-1 28-layer domino eager run's blocking-sync gain (issue: <= 2 ms/step)
#  4. nocomm predicted from tp at emulated tp 2 and 8 (needs issue 20's emulator: the
#     `--emulate-tp` flag name below is a placeholder until it lands)
# Every comparison writes bench_whatif JSON (target: within 5%, sign right).
set -euo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT}
W=/tmp/dp-whatif; rm -rf "$W"; mkdir -p "$W" "$OUT"
python3 benchmarks/graph_kernel_gap.py --out "$W/gap" && cp "$W/gap/graph_kernel_gap.json" "$OUT/"
RUN="python3 -m domino_prof.cli run --device cuda --tp 1 --model llama3-3b --seq 4096 --mbs 2"
for L in 8 28; do
  $RUN --layers $L --mode tp --out "$W/e$L" --no-analyze | tail -12
  $RUN --layers $L --mode tp --cuda-graphs --out "$W/g$L" --no-analyze | tail -12
  python3 benchmarks/bench_whatif.py --trace "$W/e$L/tp" --scenario cuda_graphs \
    --measured "$W/g$L/tp" --run-json "$W/g$L/run.json" --measured-mode tp \
    -o "$OUT/graphs_tp1_${L}layers.json"
  cp "$W/e$L/run.json" "$OUT/eager_${L}layers_run.json"; cp "$W/g$L/run.json" "$OUT/graphs_${L}layers_run.json"
done
$RUN --layers 28 --mode domino --out "$W/d28" --no-analyze | tail -12
python3 -m domino_prof.cli analyze "$W/d28/domino" --json "$OUT/domino_tp1_28layers_analysis.json"
python3 - "$OUT/domino_tp1_28layers_analysis.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
f = [x for x in d["overheads"]["findings"] if x["id"] == "blocking_sync"]
print("blocking-sync gain ms/step:", f[0]["est_gain_ms_per_step"] if f else "no finding",
      "(issue 21: <= 2)")
PY
for T in 2 8; do  # placeholder flag: replace with issue 20's emulated-tp option
  $RUN --layers 8 --mode all --emulate-tp $T --out "$W/em$T" --no-analyze | tail -12 || continue
  python3 benchmarks/bench_whatif.py --trace "$W/em$T/tp" --scenario no_comm \
    --measured "$W/em$T/nocomm" --run-json "$W/em$T/run.json" --measured-mode nocomm \
    -o "$OUT/nocomm_emulated_tp${T}.json" || true
done
ls -la "$OUT"
