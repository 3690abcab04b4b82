#!/usr/bin/env bash
# Issue 33 on ONE H200: the paced comm stand-in checked, the A/B of every kernel shape
# beside the burst and paced stand-ins (benchmarks/bench_tax_ab.py), and the headline
# command with each stand-in (RUNS). Everything emulated says so in its run.json / traces.
#   OUT=/some/dir bash benchmarks/fidelity_parts.sh [checks] [ab] [runs] [table] [tune] [carveout] [boundary]
#   (default: ab runs)
# Comes back: fidelity.log, tax_ab_raw.json.gz, run-<name>.tar.gz (run.json, logs,
# traces; analysed on the CPU box with `domino-prof run --reanalyze DIR`).
set -uo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/fidelity.log") 2>&1
parts=${*:-ab runs}
# scratch: kept across invocations (a second call of this script in one session used to
# wipe the first one's run directories before they were copied out); each run clears its own
W=/tmp/fidelity; mkdir -p "$W"
STEPS=${STEPS:-24} RUN_S=${RUN_S:-170} REPS=${REPS:-10}
TUNE_GRID=${TUNE_GRID:-"--grid cuda_graphs=on --grid col_splits=1,2 --grid sm_carveout=default,24"}
# name | env | flags: the headline command (llama3-3b, 28 layers, seq 4096, mbs 2, TP 8)
RUNS=${RUNS:-"graphs-paced|DOMINO_PROF_EMULATE_KERNEL=paced|--cuda-graphs
eager-paced|DOMINO_PROF_EMULATE_KERNEL=paced|"}
echo "== fidelity_parts.sh $(date -u +%FT%TZ) parts: $parts"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv
python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
t0=$(date +%s)
# smoke: the paced kernel compiles and runs (else stop here, in seconds)
python3 - <<'PY' || { echo "paced smoke FAILED"; exit 3; }
import torch
from domino_prof.reference_model.emulate import EmulatedComm
from domino_prof.reference_model import _paced_kernel as pk
c = EmulatedComm("h200-nvlink-tp8", size=8, device="cuda", kernel="paced")
t = torch.randn(4096, 3072, device="cuda", dtype=torch.bfloat16)
c.all_reduce(t, async_op=False); torch.cuda.synchronize()
print("paced smoke ok", c.kernel_facts(), "fallbacks", c.fallbacks, "nvrtc_error", pk._LIBS.get("nvrtc_error"))
PY
for part in $parts; do
  case $part in
    ab)
      timeout 330 python3 benchmarks/bench_tax_ab.py --out "$OUT" --reps "$REPS" \
        --carveouts "${CARVEOUTS:-0:24,24:24,0:8,8:8,16:16}" || echo "ab rc=$?" ;;
    checks)  # the paced kernel's checks alone (outputs, durations against the model)
      timeout 120 python3 benchmarks/bench_tax_ab.py --out "$OUT" --configs "" || echo "checks rc=$?" ;;
    table)  # the emulated table's rows with the paced stand-in: TABLE rows "model|tp|layers|flags"
      while IFS='|' read -r model tp layers flags; do
        [ -n "$model" ] || continue
        name="table-$model-tp$tp-l$layers${flags:+-graphs}"
        rm -rf "$W/table/$name"
        echo "== $name at $(( $(date +%s) - t0 )) s"
        timeout "$RUN_S" python3 -m domino_prof.commands.run --tp "$tp" --seq 4096 --model "$model" \
          --layers "$layers" --comm emulate --mode all --steps "${TABLE_STEPS:-16}" --block-steps 4 \
          --profile-steps 1 --no-analyze --out "$W/table/$name" $flags 2>&1 | grep -E "verdict|^│ (tp|nocomm|domino) " | head -8
      done <<< "${TABLE:-"llama3-3b|2|8|--cuda-graphs
llama3-3b|4|8|--cuda-graphs
llama3-3b|8|8|--cuda-graphs
llama3-8b|8|8|--cuda-graphs
llama3-70b|8|8|--cuda-graphs"}"
      tar -C "$W" -czf "$OUT/table.tar.gz" table && ls -la "$OUT/table.tar.gz" ;;
    tune)  # issue 34's knobs on the headline shape, emulated (domino-prof tune); TUNES rows
      # "name|tune flags" (default: one row, tune|$TUNE_GRID), each its own OUT/<name>.tar.gz
      while IFS='|' read -r name tflags; do
        [ -n "$name" ] || continue
        rm -rf "$W/$name"
        echo "== tune $name ($tflags) at $(( $(date +%s) - t0 )) s"
        timeout "${TUNE_S:-300}" python3 -m domino_prof.cli tune --tp 8 --seq 4096 --comm emulate \
          --no-analyze --steps "${TUNE_STEPS:-16}" --out "$W/$name" $tflags 2>&1 | tail -30
        tar -C "$W" -czf "$OUT/$name.tar.gz" "$name" && ls -la "$OUT/$name.tar.gz"
      done <<< "${TUNES:-"tune|$TUNE_GRID"}" ;;
    boundary)  # the gap between two replayed CUDA graphs by the number of graphs (graph_boundary.py)
      timeout 90 python3 benchmarks/graph_boundary.py --out "$OUT" || echo "boundary rc=$?" ;;
    carveout)  # --sm-carveout on the headline GEMMs, alone and beside the emulated all-reduce
      timeout "${CARVEOUT_S:-150}" python3 benchmarks/bench_carveout.py --out "$OUT" \
        --reps "${CARVEOUT_REPS:-30}" || echo "carveout rc=$?" ;;
    runs)
      while IFS='|' read -r name envs flags; do
        [ -n "$name" ] || continue
        rm -rf "$W/$name"
        echo "== run $name ($envs $flags) at $(( $(date +%s) - t0 )) s"
        env $envs timeout "$RUN_S" python3 -m domino_prof.commands.run --tp 8 --seq 4096 \
          --comm emulate --mode all --steps "$STEPS" --block-steps 4 --profile-steps 2 \
          --no-analyze --out "$W/$name" $flags 2>&1 | tail -25
        tar -C "$W" -czf "$OUT/run-$name.tar.gz" "$name" && ls -la "$OUT/run-$name.tar.gz"
      done <<< "$RUNS" ;;
  esac
done
echo "== done at $(( $(date +%s) - t0 )) s"
