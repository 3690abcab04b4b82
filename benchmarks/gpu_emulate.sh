#!/usr/bin/env bash
# Issue 20 on ONE H200: `domino-prof run --comm emulate` (rank 0's shard of tp R, every
# collective an emulated kernel timed by a comm profile; docs/EMULATION.md). Parts:
#   heldout  the emulated all-reduce alone at the seq-4096 runs' 25.2M-element bf16 size vs
#            those runs' p10 (benchmarks/bench_emulate.py)                       ~40 s
#   interp   tests/test_emulation.py's Triton tests, where msgspec and pytest exist  ~20 s
#   onestep  emulated tp 2, llama3-3b (28 layers), seq 4096, mbs 2, --mode all: comm per step
#            of tp vs the real 2xH200 run's, nocomm/tp vs the real 1.107         ~60 s
#   overlap  the fixture's own config (tests/data/h200_llama3_3b_2layers_tp2/run.json:
#            llama3-3b, 2 layers, seq 1024, mbs 2, splits 2, bf16) emulated at tp 2, domino,
#            5 profiled steps: compute slowdown under emulated comm             ~30 s
#   table    llama3-3b and llama3-8b (LAYERS, default 8), seq 4096, mbs 2, TP 2/4/8, --mode
#            all, eager and --cuda-graphs, REPEATS (default 3), + llama3-70b --layers 8 at
#            TP 8; repeat-major (every config once, then again ...), stops starting runs
#            when TABLE_BUDGET_S (default 480) is spent                    <= 8.5 min
# Everything runs with --no-analyze (the GPU image has no msgspec / plotly); the traces
# come back in tarballs and are analysed on the CPU machine:
#   python3 benchmarks/emulate_checks.py onestep|overlap|table ...   (torch-free)
#
# Time estimate of the table (H200 bf16 at ~600 TFLOP/s achieved; training FLOPs =
# ModelConfig.flops_per_token(4096) x mbs 2 x seq 4096 / R on rank 0): one step of the
# shard at 8 layers (the 128256-vocab head included): llama3-3b 57 / 29 / 14 ms at
# R 2 / 4 / 8, llama3-8b 104 / 52 / 26 ms, llama3-70b (8 layers) R 8 86 ms (full models:
# 3b 160 / 80 / 40, 8b 351 / 176 / 88 ms). A run of --mode all is ~6 compute-steps per step
# (5 modes; tp and sp add their comm, domino-sp eager ~1.8x) x 7 steps (1 warm-up, 4 timed,
# 2 profiled) = 42 step times: 2.4 / 1.2 / 0.6 s (3b), 4.4 / 2.2 / 1.1 s (8b), 3.6 s (70b),
# ~16 s for the 7 configs, x2 (eager, graphs), x~1.5 (capture passes; small eager shards
# are host-bound): ~45 s of GPU work per repeat. Per-process overhead dominates: torch
# import, CUDA context, 5 model builds, 5 profiler start/exports, Triton's first compile
# (cached on disk after the first run): ~10-15 s a run, 14 runs a repeat -> ~3-4 min per
# repeat: 2-3 repeats fit TABLE_BUDGET_S = 480 s (repeat-major, so a cut-short table still
# has every config). Each run is killed after RUN_S (90 s). table_times.jsonl (in
# table.tar.gz, _times/) says what ran and how long. LAYERS=0 (full models) adds ~35 s of
# GPU work per repeat.
#
# Usage: OUT=/some/dir bash benchmarks/gpu_emulate.sh [heldout interp onestep overlap table]
#        (default: onestep overlap, ~2 min). The device tool runs at most 10 min a command:
#        run `table` (<= TABLE_BUDGET_S + ~20 s) as a command of its own.
#        At most 7 files under $OUT: gpu_emulate.log,
#        emulate_heldout.json, onestep.tar.gz, overlap.tar.gz, table.tar.gz (every run's
#        run.json, config, logs + MANIFEST.json), table-traces-1/2.tar.gz (repeat 1's traces,
#        domino first, <= 15 MiB each; what did not fit is listed in MANIFEST.json).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
LOG="$OUT/gpu_emulate.log"
WORK=${WORK:-/tmp/emu-gpu}
REPEATS=${REPEATS:-3} LAYERS=${LAYERS:-8} TABLE_BUDGET_S=${TABLE_BUDGET_S:-480} RUN_S=${RUN_S:-90}
parts=${*:-onestep overlap}
RUN=${RUN:-python3 -m domino_prof.commands.run}  # (a stand-in for a dry run of the script)
exec > >(tee -a "$LOG") 2>&1
echo "== gpu_emulate.sh $(date -u +%FT%TZ) parts: $parts"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
git log --oneline -1 2>/dev/null
rc=0

part_heldout() {
  timeout 150 python3 benchmarks/bench_emulate.py --out "$OUT/emulate_heldout.json"
}

part_interp() {
  if python3 -c "import msgspec, pytest" 2>/dev/null; then
    timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_emulation.py -k "triton or hopper"
  else  # test_emulation imports the calibrate fit, which needs msgspec
    echo "interp skipped: no msgspec/pytest on this image"
  fi
}

part_onestep() {
  rm -rf "$WORK/onestep" && mkdir -p "$WORK/onestep"
  timeout 240 $RUN --comm emulate --tp 2 --device cuda --model llama3-3b --seq 4096 --mbs 2 \
    --mode all --warmup 2 --steps 16 --block-steps 4 --profile-steps 1 --no-analyze \
    --out "$WORK/onestep/llama3-3b-tp2-emulated"
  local r=$?
  python3 benchmarks/pack_runs.py --root "$WORK/onestep" --out "$OUT/onestep.tar.gz" \
    --traces "$OUT/onestep.tar.gz" --cap-mib 15 --mode-order tp,nocomm,domino,sp,domino-sp
  return $r
}

part_overlap() {
  rm -rf "$WORK/overlap" && mkdir -p "$WORK/overlap"
  # tests/data/h200_llama3_3b_2layers_tp2/run.json's config; 5 profiled steps for samples
  timeout 150 $RUN --comm emulate --tp 2 --device cuda --model llama3-3b --layers 2 --seq 1024 \
    --mbs 2 --splits 2 --dtype bfloat16 --mode domino --warmup 3 --steps 20 --block-steps 4 \
    --profile-steps 5 --no-analyze --out "$WORK/overlap/fixture-config-tp2-emulated"
  local r=$?
  python3 benchmarks/pack_runs.py --root "$WORK/overlap" --out "$OUT/overlap.tar.gz" \
    --traces "$OUT/overlap.tar.gz" --cap-mib 15
  return $r
}

part_table() {
  rm -rf "$WORK/table" && mkdir -p "$WORK/table"
  local t0=$SECONDS fails=0 times="$WORK/table_times.jsonl"
  : > "$times"
  local lay=""; [ "$LAYERS" != 0 ] && lay="--layers $LAYERS"
  # config: model tp extra-flags
  local configs=(
    "llama3-8b 8 $lay" "llama3-3b 8 $lay" "llama3-70b 8 --layers 8"
    "llama3-8b 4 $lay" "llama3-3b 4 $lay" "llama3-8b 2 $lay" "llama3-3b 2 $lay"
  )
  for rep in $(seq 1 "$REPEATS"); do
    for c in "${configs[@]}"; do
      set -- $c; local model=$1 tp=$2; shift 2
      case " ${TPS:-2 4 8} " in *" $tp "*) ;; *) continue ;; esac  # TPS="4 8": those only
      for variant in ${VARIANTS:-eager graphs}; do
        local left=$(( TABLE_BUDGET_S - (SECONDS - t0) ))
        local name="$model-tp$tp-$variant-r$rep"
        if [ "$left" -lt 20 ]; then
          echo "{\"run\": \"$name\", \"skipped\": \"table budget ${TABLE_BUDGET_S}s spent\"}" >> "$times"
          continue
        fi
        local g=""; [ "$variant" = graphs ] && g="--cuda-graphs"
        local lim=$(( left < RUN_S ? left : RUN_S )) s0=$SECONDS
        timeout "$lim" $RUN --comm emulate --tp "$tp" --device cuda --model "$model" "$@" \
          --seq 4096 --mbs 2 --mode all $g --warmup 1 --steps 4 --block-steps 2 \
          --profile-steps 1 --no-analyze --out "$WORK/table/$name" > "$WORK/table/$name.txt" 2>&1
        local r=$?
        [ $r -ne 0 ] && fails=$((fails + 1)) && tail -3 "$WORK/table/$name.txt"
        grep -E "^verdict" "$WORK/table/$name.txt" | sed "s/^/$name: /"
        echo "{\"run\": \"$name\", \"rc\": $r, \"wall_s\": $((SECONDS - s0))}" >> "$times"
        mkdir -p "$WORK/table/$name" && mv "$WORK/table/$name.txt" "$WORK/table/$name/stdout.txt"
      done
    done
  done
  echo "table: $((SECONDS - t0)) s, $fails failed runs"
  mkdir -p "$WORK/table/_times" && cp "$times" "$WORK/table/_times/table_times.jsonl"
  python3 benchmarks/pack_runs.py --root "$WORK/table" --out "$OUT/table.tar.gz" \
    --traces "$OUT/table-traces-{i}.tar.gz" --max-tarballs 2 --traces-for '*-r1'
  [ $fails -eq 0 ]
}

for part in $parts; do
  echo "== part $part $(date -u +%T)"
  s0=$SECONDS
  set +e
  "part_$part"
  r=$?
  echo "== part $part rc=$r in $((SECONDS - s0)) s"
  [ $r -ne 0 ] && rc=1
done
ls -la "$OUT"
sleep 1  # let tee write the log's last lines before the command returns
exit $rc
