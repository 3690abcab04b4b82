#!/usr/bin/env bash
# Issue 21 validations on ONE H200 (nvidia-h200): the replay's predictions against the
# runs that apply the fix, and the in-graph kernel cost the CUDA-graph scenario uses.
#
# The device image has torch but not msgspec/plotly, so this script only RUNS (`run
# --no-analyze`) and packs the run directories into $OUT/<part>_runs.tar.gz; the
# predictions are computed here, torch-free, by benchmarks/whatif_summary.py:
#
#   OUT=/some/dir bash benchmarks/gpu_whatif.sh gap tp1        # on the H200
#   python benchmarks/whatif_summary.py /some/dir -o reports/whatif/h200   # here
#
# Parts (each bounded by `timeout`; one failing does not stop the others):
#   gap       GRAPH_KERNEL_GAP_NS: graph replay vs eager queued gap between kernels
#   tp1       tp 1, llama3-3b, seq 4096, mbs 2: `tp` eager and --cuda-graphs at 8 and 28
#             layers (the --cuda-graphs step predicted from the eager trace), and `domino`
#             eager at 28 layers (the blocking-sync case: gain <= 2 ms/step)
#   emulated  nocomm predicted from tp at emulated tp 2 and 8 (issue 20's --comm emulate),
#             llama3-8b 8 layers, --mode all; and emulated tp 8 eager vs graphs (measured
#             instead from gpu_emulate.sh table's repeat-1 runs: reports/whatif/h200)
# Device time (one H200, measured 2026-12-02): see reports/whatif/h200/README.md.
set -uo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT}
W=/tmp/dp-whatif; rm -rf "$W"; mkdir -p "$W" "$OUT"
STEPS=${STEPS:-12}
RUN="python3 -m domino_prof.cli run --device cuda --seq 4096 --mbs 2 --steps $STEPS --block-steps 4 --warmup 2 --profile-steps 2 --no-analyze"
parts=${*:-gap tp1}
log() { echo "[gpu_whatif $(date +%T)] $*"; }
pack() {  # pack run dirs (run.json + traces) into one tarball under $OUT
  local name=$1; shift
  tar -czf "$OUT/${name}_runs.tar.gz" -C "$W" "$@" && ls -la "$OUT/${name}_runs.tar.gz"
}
for part in $parts; do case $part in
  gap)
    log gap
    timeout 120 python3 benchmarks/graph_kernel_gap.py --out "$W/gap" \
      && cp "$W/gap/graph_kernel_gap.json" "$OUT/" ;;
  tp1)
    dirs=()
    for L in 8 28; do
      log "tp1 $L layers eager"; timeout 150 $RUN --tp 1 --model llama3-3b --layers $L --mode tp --out "$W/e$L" | tail -6 && dirs+=("e$L")
      log "tp1 $L layers graphs"; timeout 150 $RUN --tp 1 --model llama3-3b --layers $L --mode tp --cuda-graphs --out "$W/g$L" | tail -6 && dirs+=("g$L")
    done
    log "tp1 28 layers domino eager"
    timeout 150 $RUN --tp 1 --model llama3-3b --layers 28 --mode domino --out "$W/d28" | tail -6 && dirs+=("d28")
    pack tp1 "${dirs[@]}" ;;
  emulated)
    dirs=()
    for T in 2 8; do
      log "emulated tp $T, --mode all"
      timeout 200 $RUN --tp $T --comm emulate --model llama3-8b --layers 8 --mode all \
        --out "$W/em$T" | tail -6 && dirs+=("em$T")
    done
    log "emulated tp 8 graphs"
    timeout 200 $RUN --tp 8 --comm emulate --model llama3-8b --layers 8 --mode tp --cuda-graphs \
      --out "$W/emg8" | tail -6 && dirs+=("emg8")
    pack emulated "${dirs[@]}" ;;
  *) echo "unknown part $part (gap tp1 emulated)" >&2 ;;
esac; done
ls -la "$OUT"
