#!/usr/bin/env bash
# The GPU session driver: every measurement this project took on a lent GPU machine, as
# named suites (one function each below), run on the GPU machine from the repository root:
#
#   OUT=/some/dir bash benchmarks/gpu_session.sh SUITE [SUITE ...]
#   bash benchmarks/gpu_session.sh --list           # the suites, one line each
#
# Each suite writes its files under $OUT (the device tool brings back what is there) and
# its scratch under $WORK/<suite> (default /tmp/dp-gpu). The run directories are written
# with --no-analyze (the GPU image has no msgspec / plotly): copy them back and run
# `domino-prof run --reanalyze DIR` here. A suite that fails does not stop the next; the
# exit status is 1 if any failed. Everything is logged to $OUT/gpu_session.log.
#
# Adding a suite: a function suite_NAME (dashes in NAME become underscores), with a
# comment line `## NAME: what it measures, on which machine` right above it. Use $RUN
# (`domino-prof run` alone, no other command imported), keep() for the run.json and
# step lines of a run, and pack() for run directories with traces.
#
# These suites were one script each until issue 35 (the old name is in each comment:
# a report citing `benchmarks/gpu_graphs.sh` now means `gpu_session.sh graphs`).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
RUN=${RUN:-python3 -m domino_prof.commands.run}  # a stand-in command makes a dry run
WORK=${WORK:-/tmp/dp-gpu}

suites() { sed -n 's/^## \([a-z0-9-]*\): \(.*\)/\1\t\2/p' "${BASH_SOURCE[0]}"; }
if [ "${1:-}" = --list ] || [ $# = 0 ]; then
  [ $# = 0 ] && echo "usage: OUT=DIR bash benchmarks/gpu_session.sh SUITE [SUITE ...]; the suites:" >&2
  suites | awk -F "\t" '{printf "%-20s %s\n", $1, $2}'
  [ $# = 0 ] && exit 2 || exit 0
fi
for s in "$@"; do
  if ! suites | cut -f1 | grep -qx -- "$s"; then
    echo "gpu_session.sh: no suite '$s'; bash benchmarks/gpu_session.sh --list names them" >&2
    exit 2
  fi
done
OUT=${OUT:?set OUT to the directory the results go to}
mkdir -p "$OUT" "$WORK"

# --------------------------------------------------------------------------- helpers
env_txt() {  # the machine and versions, once per session
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  nvidia-smi topo -m 2>/dev/null | head -5
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' 2>&1
  python3 -c 'import triton; print("triton", triton.__version__)' 2>/dev/null
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown); host: $(nproc) cores"
}
keep() {  # keep NAME TXT: the run's run.json as $OUT/NAME.json, its step lines in TXT
  local n=$1 txt=$2
  cp "$W/$n/run.json" "$OUT/$n.json" 2>/dev/null || tail -3 "$W/$n.log"
  grep -E "step .* ms|error" "$W/$n.log" | sed "s/^/$n: /" | tee -a "$OUT/$txt"
}
run_kept() {  # run_kept NAME TXT FLAGS...: one run (timed steps only), kept
  local n=$1 txt=$2; shift 2
  $RUN "$@" --no-analyze --out "$W/$n" > "$W/$n.log" 2>&1
  local r=$?; keep "$n" "$txt"; return $r
}
pack() {  # pack NAME DIR...: run directories (with traces) into $OUT/NAME_runs.tar.gz
  local name=$1; shift
  tar -czf "$OUT/${name}_runs.tar.gz" -C "$W" "$@" && ls -la "$OUT/${name}_runs.tar.gz"
}
A3B=(--tp 2 --seq 4096 --model llama3-3b --mbs 2)  # the 2xH200 headline config

# --------------------------------------------------------------------------- 2 GPUs (NCCL)
## evidence: 2xH200: bf16 gradient check (gpu_verify --tp 2), llama3-3b tp 2 seq 4096 --mode all, and a 2-layer run whose traces became tests/data (was gpu_session.sh)
suite_evidence() {
  $RUN --tp 2 --model llama3-3b --layers 2 --seq 1024 --mbs 2 --mode all --warmup 2 --steps 3 \
    --profile-steps 1 --out "$W/small" --no-analyze 2>&1 | tee "$W/small.txt"
  $RUN "${A3B[@]}" --mode all --warmup 2 --steps 5 --profile-steps 2 --out "$W/run3b" \
    --no-analyze 2>&1 | tee "$W/run3b.txt"
  python3 benchmarks/gpu_verify.py --tp 2 --out "$W/verify" 2>&1 | tail -60 | tee "$W/verify.txt"
  tar -C "$W" -czf "$OUT/small.tgz" small
  tar -C "$W" -czf "$OUT/meta.tgz" small.txt run3b.txt verify.txt run3b/run.json run3b/config.json \
    run3b/logs verify
  for m in domino tp nocomm; do for r in 0 1; do
    f="$W/run3b/$m/rank$r.pt.trace.json.gz"
    [ -f "$f" ] && [ "$m$r" != nocomm1 ] && cp "$f" "$OUT/run3b_${m}_rank$r.json.gz"
  done; done
}

## graphs: 2xH200: the gradient check with graphed schedules, then llama3-3b tp 2 seq 4096 --mode all --cuda-graphs at mbs 2 and 4 (was gpu_graphs.sh)
suite_graphs() {
  python3 benchmarks/gpu_verify.py --tp 2 --out "$W/verify" 2>&1 | grep -v Warn | tail -80 > "$W/verify.txt"
  cp "$W/verify/gpu_verify.json" "$OUT/gpu_verify.json" || cp "$W/verify.txt" "$OUT/verify_failed.txt"
  for mbs in 2 4; do
    $RUN --tp 2 --seq 4096 --model llama3-3b --mbs $mbs --mode all --cuda-graphs --warmup 3 \
      --steps 5 --profile-steps 2 --out "$W/g$mbs" --no-analyze 2>&1 | tee "$W/g$mbs.txt" \
      | grep -E "^\[domino|│|error"
    tar -C "$W" -czf "$OUT/g${mbs}_meta.tgz" "g$mbs.txt" "g$mbs/run.json" "g$mbs/logs"
  done
  for m in domino tp; do for r in 0 1; do
    cp "$W/g2/$m/rank$r.pt.trace.json.gz" "$OUT/g2_${m}_rank$r.json.gz"
  done; done
  cp "$W/g2/nocomm/rank0.pt.trace.json.gz" "$OUT/g2_nocomm_rank0.json.gz"
}

## repeat: 2xH200: run-to-run spread of the headline, --mode all 3x with --cuda-graphs and 2x eager, timed steps (was gpu_repeat.sh)
suite_repeat() {
  for i in 1 2 3; do for g in --cuda-graphs --no-cuda-graphs; do
    [ "$i" = 3 ] && [ "$g" = --no-cuda-graphs ] && continue
    run_kept "rep$i${g/--/_}" repeat.txt "${A3B[@]}" --mode all $g --warmup 3 --steps 10 --profile-steps 1
  done; done
}

## sweep: 2xH200: what limits domino with CUDA graphs at mbs 2 (NCCL_PROTO=Simple, NCCL_MAX_NCHANNELS 4/8), plus the graphed gradient check (was gpu_sweep.sh)
suite_sweep() {
  python3 benchmarks/gpu_verify.py --tp 2 --out "$W/verify" > "$W/verify.txt" 2>&1
  cp "$W/verify/gpu_verify.json" "$OUT/gpu_verify.json" || tail -40 "$W/verify.txt"
  local a=("${A3B[@]}" --cuda-graphs --warmup 3 --steps 8 --profile-steps 1)
  run_kept base sweep.txt "${a[@]}" --mode all
  NCCL_PROTO=Simple run_kept simple sweep.txt "${a[@]}" --mode all
  NCCL_MAX_NCHANNELS=4 run_kept ch4 sweep.txt "${a[@]}" --mode domino
  NCCL_MAX_NCHANNELS=8 run_kept ch8 sweep.txt "${a[@]}" --mode domino
}

## channels: 2xH200: domino alone with CUDA graphs, NCCL_MAX_NCHANNELS default / 8 / 4, alternating, 2 repeats (was gpu_channels.sh)
suite_channels() {
  for i in 1 2; do for ch in default 8 4; do
    local envs=(X=1); [ "$ch" != default ] && envs=(NCCL_MAX_NCHANNELS=$ch)
    env "${envs[@]}" $RUN "${A3B[@]}" --mode domino --cuda-graphs --warmup 3 --steps 10 \
      --profile-steps 1 --no-analyze --out "$W/rep${i}_ch$ch" > "$W/rep${i}_ch$ch.log" 2>&1
    grep -E "step .* ms|error" "$W/rep${i}_ch$ch.log" | sed "s/^/rep${i}_ch$ch: /" | tee -a "$OUT/channels.txt"
  done; done
}

## scaling: 2xH200: domino's gain against the work per micro-batch, llama3-3b tp 2 seq 4096 --mode all at mbs 4 and 8 (was gpu_scaling.sh)
suite_scaling() {
  for mbs in 4 8; do
    $RUN --tp 2 --seq 4096 --model llama3-3b --mbs $mbs --mode all --warmup 2 --steps 5 \
      --profile-steps 1 --out "$W/mbs$mbs" --no-analyze 2>&1 | tee "$W/mbs$mbs.txt"
    cp "$W/mbs$mbs/run.json" "$OUT/run_mbs$mbs.json"; cp "$W/mbs$mbs.txt" "$OUT/"
    cp "$W/mbs$mbs/domino/rank0.pt.trace.json.gz" "$OUT/mbs${mbs}_domino_rank0.json.gz"
  done
}

## 8b: 2xH200: llama3-8b tp 2 seq 4096 --mode all, eager and --cuda-graphs, timed steps (was gpu_8b.sh)
suite_8b() {
  for g in --no-cuda-graphs --cuda-graphs; do
    run_kept "llama3-8b${g/--/_}" 8b.txt --tp 2 --seq 4096 --model llama3-8b --mbs 2 --mode all $g \
      --warmup 3 --steps 8 --profile-steps 1
  done
}

# issue 15's protocol for the explicit schedules, on any 2-GPU node (was gpu_tp2.sh PART)
TP2=(--tp 2 --device cuda --seq 4096 --mbs 2 --warmup 3 --steps 10 --profile-steps 1)
## tp2-verify: 2 GPUs: every schedule's gradients against the unsharded model under NCCL (was gpu_tp2.sh verify)
suite_tp2_verify() {
  python3 benchmarks/gpu_verify.py --tp 2 --out "$W/verify" > "$OUT/verify.txt" 2>&1
  cp "$W/verify/gpu_verify.json" "$OUT/gpu_verify_tp2.json"
}
## tp2-table: 2 GPUs: llama3-3b tp 2 seq 4096 --mode all, eager and --cuda-graphs, 3 runs each; run 1 keeps its traces (was gpu_tp2.sh table)
suite_tp2_table() {
  for i in 1 2 3; do for g in "" --cuda-graphs; do
    run_kept "3b_all${g:+_graphs}_rep$i" summary.txt "${TP2[@]}" --model llama3-3b --mode all $g
  done; done
  tar -C "$W" -czf "$OUT/3b_traces.tgz" 3b_all_rep1 3b_all_graphs_rep1
}
## tp2-stream: 2 GPUs: --high-priority-comm on/off x NCCL_MAX_NCHANNELS default/8/4, domino with CUDA graphs, 2 repeats (was gpu_tp2.sh stream)
suite_tp2_stream() {
  for i in 1 2; do for hp in "" --high-priority-comm; do for ch in default 8 4; do
    local n="3b_domino_graphs${hp:+_hp}_ch${ch}_rep$i" envs=(X=1)
    [ "$ch" != default ] && envs=(NCCL_MAX_NCHANNELS=$ch)
    env "${envs[@]}" $RUN "${TP2[@]}" --model llama3-3b --mode domino --cuda-graphs $hp \
      --no-analyze --out "$W/$n" > "$W/$n.log" 2>&1
    keep "$n" summary.txt
  done; done; done
}
## tp2-8b: 2 GPUs: llama3-8b tp 2 seq 4096 --mode all, eager and --cuda-graphs, 1 run each (was gpu_tp2.sh 8b)
suite_tp2_8b() {
  for g in "" --cuda-graphs; do run_kept "8b_all${g:+_graphs}" summary.txt "${TP2[@]}" --model llama3-8b --mode all $g; done
}

# --------------------------------------------------------------------------- 1 GPU, tp 1
## schedule: 1 GPU: bench_schedule.py (tp 1, every schedule x eager/graphs/compile), gpu_verify --tp 1, one 8-layer `run --mode all`; MODEL SEQ MBS, SKIP_BENCH/SKIP_VERIFY/SKIP_RUN, VARIANTS, PROFILE, RUN_FLAGS (was gpu_schedule.sh)
suite_schedule() {
  local model=${MODEL:-llama3-3b} seq=${SEQ:-1024} mbs=${MBS:-2}
  if [ "${SKIP_BENCH:-0}" != 1 ]; then
    timeout "${BENCH_S:-330}" python3 benchmarks/bench_schedule.py --model "$model" --seq "$seq" \
      --mbs "$mbs" ${VARIANTS:+--variants "$VARIANTS"} --out "$OUT/bench_schedule.json" \
      ${PROFILE:+--profile "$PROFILE" --profile-dir "$W/bench_traces"} \
      2>&1 | grep -v Warning | tee "$OUT/bench_schedule.txt"
    [ -d "$W/bench_traces" ] && tar -C "$W" -czf "$OUT/bench_traces.tgz" bench_traces
  fi
  if [ "${SKIP_VERIFY:-0}" != 1 ]; then
    timeout "${VERIFY_S:-150}" python3 benchmarks/gpu_verify.py --tp 1 --out "$W/verify" > "$OUT/verify.txt" 2>&1
    cp "$W/verify/gpu_verify.json" "$OUT/gpu_verify_tp1.json"
    grep -E "^(tp|domino|sp)" "$OUT/verify.txt" | cut -c1-150
  fi
  if [ "${SKIP_RUN:-0}" != 1 ]; then
    timeout "${RUN_S:-120}" $RUN --tp 1 --device cuda --model "$model" --layers 8 --seq "$seq" \
      --mbs "$mbs" --mode all --steps 5 --profile-steps 1 --no-analyze --out "$W/r8" ${RUN_FLAGS:-} \
      > "$OUT/run8.txt" 2>&1
    tail -15 "$OUT/run8.txt"
    tar -C "$W" -czf "$OUT/run8.tgz" r8
  fi
}

## refactor-check: 1 GPU: bench_schedule 3x alternating the code of commit cd6e349 (BEFORE=DIR) and this tree, then gpu_verify --tp 1 and --tp 2 --backend gloo; REPS, SKIP_VERIFY, BENCH_ARGS (was gpu_refactor_check.sh)
suite_refactor_check() {
  local after=$PWD before=${BEFORE:-$WORK/domino-before}
  if [ ! -f "$before/benchmarks/bench_schedule.py" ]; then
    mkdir -p "$before" && git -C "$after" archive cd6e349 | tar -x -C "$before" || {
      echo "no checkout of cd6e349: set BEFORE=DIR (git archive cd6e349 | tar -x -C DIR)"; return 2; }
  fi
  local args=(--model llama3-3b --seq 1024 --mbs 2 ${BENCH_ARGS:-})
  for i in ${REPS:-1 2 3}; do for side in before after; do
    local dir=$before; [ "$side" = after ] && dir=$after
    ( cd "$dir" && PYTHONPATH="$dir" timeout "${BENCH_S:-420}" python3 benchmarks/bench_schedule.py \
        "${args[@]}" --out "$OUT/bench_${side}_$i.json" ) 2>&1 | grep -v Warning > "$OUT/bench_${side}_$i.txt"
    tail -12 "$OUT/bench_${side}_$i.txt"
  done; done
  if [ "${SKIP_VERIFY:-0}" != 1 ]; then
    timeout "${VERIFY_S:-300}" python3 benchmarks/gpu_verify.py --tp 1 --out "$OUT/verify_tp1" > "$OUT/verify_tp1.txt" 2>&1
    timeout "${VERIFY_S:-300}" python3 benchmarks/gpu_verify.py --tp 2 --backend gloo \
      --out "$OUT/verify_gloo_tp2" > "$OUT/verify_gloo_tp2.txt" 2>&1
  fi
  python3 benchmarks/gpu_summary.py refactor-check "$OUT"
}

## sp-check: 1 GPU: domino-sp eager against plain-mb (bench_schedule, 3 repeats, row order alternating; target <= 1.05, issue below wall), a profiled step of domino-sp and domino; STEPS, PROFILE=0, VERIFY=1, MODEL_ARGS (was gpu_sp_check.sh)
suite_sp_check() {
  local args=(${MODEL_ARGS:---model llama3-3b --seq 1024 --mbs 2} --variants eager --steps "${STEPS:-20}")
  for i in ${REPS:-1 2 3}; do
    local rows=plain,plain-mb,domino,sp,domino-sp
    [ $((i % 2)) = 0 ] && rows=domino-sp,sp,domino,plain-mb,plain
    echo "== repeat $i: $rows ($(date -u +%T))" | tee -a "$OUT/bench.log"
    timeout "${BENCH_S:-150}" python3 benchmarks/bench_schedule.py "${args[@]}" --rows "$rows" \
      --out "$OUT/bench_$i.json" 2>&1 | grep -v Warning | tee -a "$OUT/bench.log" | grep -A5 '^schedule'
  done
  if [ "${PROFILE:-1}" = 1 ]; then
    timeout "${PROFILE_S:-120}" python3 benchmarks/bench_schedule.py "${args[@]}" --rows domino-sp,domino \
      --steps 5 --profile domino-sp:eager,domino:eager --profile-dir "$OUT" >> "$OUT/bench.log" 2>&1
  fi
  if [ "${VERIFY:-0}" = 1 ]; then
    timeout "${VERIFY_S:-200}" python3 benchmarks/gpu_verify.py --tp 1 --out "$OUT/verify" >> "$OUT/bench.log" 2>&1
    rm -f "$OUT"/verify/*.json.gz
  fi
  python3 benchmarks/gpu_summary.py sp-check "$OUT" | tee "$OUT/summary.txt"
}

# --------------------------------------------------------------------------- 1 GPU, emulated comm
EMU_REPEATS=${REPEATS:-3} EMU_LAYERS=${LAYERS:-8}
## emulate-heldout: 1 GPU: the emulated all-reduce alone at the seq-4096 runs' 25.2M-element bf16 size vs those runs' p10 (bench_emulate.py) (was gpu_emulate.sh heldout)
suite_emulate_heldout() { timeout 150 python3 benchmarks/bench_emulate.py --out "$OUT/emulate_heldout.json"; }
## emulate-interp: 1 GPU: tests/test_emulation.py's Triton tests, where msgspec and pytest exist (was gpu_emulate.sh interp)
suite_emulate_interp() {
  python3 -c "import msgspec, pytest" 2>/dev/null || { echo "skipped: no msgspec/pytest on this image"; return 0; }
  timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_emulation.py -k "triton or hopper"
}
## emulate-onestep: 1 GPU: emulated tp 2, llama3-3b (28 layers) seq 4096 --mode all: comm per step against the real 2xH200 run's (was gpu_emulate.sh onestep)
suite_emulate_onestep() {
  timeout 240 $RUN --comm emulate --tp 2 --device cuda --model llama3-3b --seq 4096 --mbs 2 \
    --mode all --warmup 2 --steps 16 --block-steps 4 --profile-steps 1 --no-analyze \
    --out "$W/llama3-3b-tp2-emulated"
  local r=$?
  python3 benchmarks/pack_runs.py --root "$W" --out "$OUT/onestep.tar.gz" --traces "$OUT/onestep.tar.gz" \
    --cap-mib 15 --mode-order tp,nocomm,domino,sp,domino-sp
  return $r
}
## emulate-overlap: 1 GPU: the tp 2 fixture's config (llama3-3b, 2 layers, seq 1024) emulated, domino, 5 profiled steps: compute slowdown under emulated comm (was gpu_emulate.sh overlap)
suite_emulate_overlap() {
  timeout 150 $RUN --comm emulate --tp 2 --device cuda --model llama3-3b --layers 2 --seq 1024 \
    --mbs 2 --splits 2 --dtype bfloat16 --mode domino --warmup 3 --steps 20 --block-steps 4 \
    --profile-steps 5 --no-analyze --out "$W/fixture-config-tp2-emulated"
  local r=$?
  python3 benchmarks/pack_runs.py --root "$W" --out "$OUT/overlap.tar.gz" --traces "$OUT/overlap.tar.gz" --cap-mib 15
  return $r
}
emu_table_run() {  # NAME MODEL TP VARIANT LIMIT_S EXTRA...: one run of the emulated table
  local name=$1 model=$2 tp=$3 variant=$4 lim=$5; shift 5
  local g=""; [ "$variant" = graphs ] && g="--cuda-graphs"
  timeout "$lim" $RUN --comm emulate --tp "$tp" --device cuda --model "$model" "$@" --seq 4096 \
    --mbs 2 --mode all $g --warmup 1 --steps 4 --block-steps 2 --profile-steps 1 --no-analyze \
    --out "$W/$name" > "$W/$name.txt" 2>&1
  local r=$?
  [ $r -ne 0 ] && tail -3 "$W/$name.txt"
  grep -E "^verdict" "$W/$name.txt" | sed "s/^/$name: /"
  mkdir -p "$W/$name" && mv "$W/$name.txt" "$W/$name/stdout.txt"
  return $r
}
## emulate-table: 1 GPU: llama3-3b/8b (LAYERS, default 8) at emulated TP 2/4/8 and llama3-70b (8 layers) at TP 8, seq 4096, --mode all, eager and graphs, REPEATS (3) repeat-major within TABLE_BUDGET_S (480 s); TPS, VARIANTS (was gpu_emulate.sh table)
suite_emulate_table() {
  local t0=$SECONDS fails=0 times="$W/_times/table_times.jsonl" lay=""
  mkdir -p "$W/_times"; : > "$times"
  [ "$EMU_LAYERS" != 0 ] && lay="--layers $EMU_LAYERS"
  local configs=("llama3-8b 8 $lay" "llama3-3b 8 $lay" "llama3-70b 8 --layers 8"
                 "llama3-8b 4 $lay" "llama3-3b 4 $lay" "llama3-8b 2 $lay" "llama3-3b 2 $lay")
  for rep in $(seq 1 "$EMU_REPEATS"); do for c in "${configs[@]}"; do
    set -- $c; local model=$1 tp=$2; shift 2
    case " ${TPS:-2 4 8} " in *" $tp "*) ;; *) continue ;; esac
    for variant in ${VARIANTS:-eager graphs}; do
      local left=$(( ${TABLE_BUDGET_S:-480} - (SECONDS - t0) )) name="$model-tp$tp-$variant-r$rep"
      if [ "$left" -lt 20 ]; then
        echo "{\"run\": \"$name\", \"skipped\": \"table budget spent\"}" >> "$times"; continue
      fi
      local lim=$(( left < ${RUN_S:-90} ? left : ${RUN_S:-90} )) s0=$SECONDS
      emu_table_run "$name" "$model" "$tp" "$variant" "$lim" "$@"
      local r=$?; [ $r -ne 0 ] && fails=$((fails + 1))
      echo "{\"run\": \"$name\", \"rc\": $r, \"wall_s\": $((SECONDS - s0))}" >> "$times"
    done
  done; done
  echo "table: $((SECONDS - t0)) s, $fails failed runs"
  python3 benchmarks/pack_runs.py --root "$W" --out "$OUT/table.tar.gz" \
    --traces "$OUT/table-traces-{i}.tar.gz" --max-tarballs 2 --traces-for '*-r1'
  [ $fails -eq 0 ]
}
## emulate-more: 1 GPU: the emulated table's runs a budget cut, RUNS="<model>-tp<R>-<eager|graphs>-r<k> ...", run.json and logs only (was gpu_emulate_more.sh)
suite_emulate_more() {
  for name in ${RUNS:?set RUNS to the table runs to complete}; do
    IFS=- read -r m1 m2 tpx variant rep <<< "$name"
    emu_table_run "$name" "$m1-$m2" "${tpx#tp}" "$variant" 90 --layers "$EMU_LAYERS"
    echo "$name rc=$?"
    find "$W/$name" -name '*.pt.trace.json*' -delete
  done
  tar -czf "$OUT/table-more.tar.gz" -C "$W" .
}
## emulate-host: 1 GPU: host us per emulated collective, fast launch vs plain vs c10d NCCL in a one-rank group (bench_emulate_host.py) (was gpu_emulate_host.sh host)
suite_emulate_host() { timeout 240 python3 benchmarks/bench_emulate_host.py --out "$OUT/emulate_host.json"; }
emu_ab() {  # NAME LAUNCH EXTRA...: llama3-8b emulated tp 8 --mode all with that launch path
  local name=$1 launch=$2; shift 2
  DOMINO_PROF_EMULATE_LAUNCH=$launch timeout 150 $RUN --comm emulate --tp 8 --device cuda \
    --model llama3-8b --seq 4096 --mbs 2 --mode all --warmup 1 --steps 8 --block-steps 2 \
    --profile-steps 1 --no-analyze --out "$W/$name" "$@" > "$W/$name.txt" 2>&1
  local r=$?; echo "$name rc=$r"
  mkdir -p "$W/$name" && mv "$W/$name.txt" "$W/$name/stdout.txt"
  find "$W/$name" -name '*.pt.trace.json.gz' -delete
  python3 benchmarks/gpu_summary.py modes "$W/$name/run.json"
  return $r
}
## emulate-ab: 1 GPU: llama3-8b, 8 layers, emulated tp 8: the plain launch (jit) and the fast one, alternating, eager J F J F and graphs J F (was gpu_emulate_host.sh ab)
suite_emulate_ab() {
  local fails=0
  for spec in "eager-jit-1 jit" "eager-fast-1 compiled" "eager-jit-2 jit" "eager-fast-2 compiled"; do
    emu_ab $spec --layers 8 || fails=$((fails + 1))
  done
  for spec in "graphs-jit-1 jit" "graphs-fast-1 compiled"; do
    emu_ab $spec --layers 8 --cuda-graphs || fails=$((fails + 1))
  done
  tar -czf "$OUT/ab.tar.gz" -C "$W" .
  [ $fails -eq 0 ]
}
## emulate-shapes: 1 GPU: nocomm and domino, llama3-8b, 2 layers, emulated tp 8, eager, profiled with input shapes (the GEMMs behind the split's cost) (was gpu_emulate_host.sh shapes)
suite_emulate_shapes() {
  mkdir -p "$W/site"
  printf '%s\n' "try:" "    import torch.profiler as _p" "    _orig = _p.profile.__init__" \
    "    def _init(self, *a, **k):" "        k['record_shapes'] = True" "        _orig(self, *a, **k)" \
    "    _p.profile.__init__ = _init" "except Exception:" "    pass" > "$W/site/sitecustomize.py"
  local r=0
  for mode in nocomm domino; do
    PYTHONPATH="$W/site:$PYTHONPATH" timeout 120 $RUN --comm emulate --tp 8 --device cuda \
      --model llama3-8b --layers 2 --seq 4096 --mbs 2 --mode $mode --warmup 1 --steps 2 \
      --block-steps 1 --profile-steps 1 --no-analyze --out "$W/$mode" > "$W/$mode.txt" 2>&1 || r=1
    tail -2 "$W/$mode.txt"
  done
  tar -czf "$OUT/shapes.tar.gz" -C "$W" nocomm domino nocomm.txt domino.txt
  return $r
}
## emulate-compile: 1 GPU: --compile under --comm emulate, llama3-8b, 2 layers, emulated tp 8, --mode all (was gpu_emulate_host.sh compile)
suite_emulate_compile() {
  local n=llama3-8b-tp8-2layers-compile
  timeout "${COMPILE_S:-400}" $RUN --comm emulate --tp 8 --device cuda --model llama3-8b --layers 2 \
    --seq 4096 --mbs 2 --mode all --compile --warmup 2 --steps 8 --block-steps 2 --profile-steps 1 \
    --no-analyze --out "$W/$n" > "$W/compile.txt" 2>&1
  local r=$?; tail -25 "$W/compile.txt"; mv "$W/compile.txt" "$W/$n/stdout.txt"
  python3 benchmarks/pack_runs.py --root "$W" --out "$OUT/compile.tar.gz" --traces "$OUT/compile.tar.gz" --cap-mib 15
  return $r
}
emu_full() {  # NAME EXTRA...: the headline command as a user types it, analysed on the node
  local name=$1; shift
  python3 -c "import msgspec, plotly" || { echo "carry msgspec and plotly wheels (README: GPU node)"; return 1; }
  timeout "${FULL_S:-560}" python3 -m domino_prof.cli run --tp 8 --seq 4096 --comm emulate "$@" \
    --out "$W/$name/$name" > "$W/$name.txt" 2>&1
  local r=$?; tail -30 "$W/$name.txt"; mv "$W/$name.txt" "$W/$name/$name/stdout.txt"
  python3 benchmarks/pack_runs.py --root "$W/$name" --out "$OUT/$name.tar.gz" \
    --traces "$OUT/$name-traces-{i}.tar.gz" --max-tarballs 2 --cap-mib 15
  cp "$W/$name/$name/report.html" "$OUT/$name-report.html"
  return $r
}
## emulate-full: 1 GPU: `domino-prof run --tp 8 --seq 4096 --comm emulate` as a user types it, with its analysis and report (was gpu_emulate_host.sh full)
suite_emulate_full() { emu_full default-tp8-seq4096-emulated; }
## emulate-fullgraphs: 1 GPU: the same with --cuda-graphs (was gpu_emulate_host.sh fullgraphs)
suite_emulate_fullgraphs() { emu_full graphs-tp8-seq4096-emulated --cuda-graphs; }
## emulate-probe: 1 GPU: the emulated all-reduce kernel's aligned path alone (probe_emulate_kernel.py; no domino_prof import)
suite_emulate_probe() { timeout 120 python3 benchmarks/probe_emulate_kernel.py | tee "$OUT/probe_emulate_kernel.txt"; }

# --------------------------------------------------------------------------- what if (issue 21)
WHATIF=(--device cuda --seq 4096 --mbs 2 --steps "${STEPS:-12}" --block-steps 4 --warmup 2 --profile-steps 2 --no-analyze)
## whatif-gap: 1 GPU: GRAPH_KERNEL_GAP_NS, the gap between kernels of a replayed CUDA graph vs eager (graph_kernel_gap.py) (was gpu_whatif.sh gap)
suite_whatif_gap() { timeout 120 python3 benchmarks/graph_kernel_gap.py --out "$W/gap" && cp "$W/gap/graph_kernel_gap.json" "$OUT/"; }
## whatif-tp1: 1 GPU: tp 1 llama3-3b seq 4096: tp eager and --cuda-graphs at 8 and 28 layers, domino eager at 28 (the replay's predictions checked; bench_whatif.py here) (was gpu_whatif.sh tp1)
suite_whatif_tp1() {
  local dirs=()
  for L in 8 28; do
    timeout 150 $RUN "${WHATIF[@]}" --tp 1 --model llama3-3b --layers $L --mode tp --out "$W/e$L" | tail -6 && dirs+=("e$L")
    timeout 150 $RUN "${WHATIF[@]}" --tp 1 --model llama3-3b --layers $L --mode tp --cuda-graphs --out "$W/g$L" | tail -6 && dirs+=("g$L")
  done
  timeout 150 $RUN "${WHATIF[@]}" --tp 1 --model llama3-3b --layers 28 --mode domino --out "$W/d28" | tail -6 && dirs+=("d28")
  pack tp1 "${dirs[@]}"
}
## whatif-emulated: 1 GPU: nocomm predicted from tp at emulated tp 2 and 8 (llama3-8b, 8 layers, --mode all), and emulated tp 8 with --cuda-graphs (was gpu_whatif.sh emulated)
suite_whatif_emulated() {
  local dirs=()
  for T in 2 8; do
    timeout 200 $RUN "${WHATIF[@]}" --tp $T --comm emulate --model llama3-8b --layers 8 --mode all --out "$W/em$T" | tail -6 && dirs+=("em$T")
  done
  timeout 200 $RUN "${WHATIF[@]}" --tp 8 --comm emulate --model llama3-8b --layers 8 --mode tp --cuda-graphs --out "$W/emg8" | tail -6 && dirs+=("emg8")
  pack emulated "${dirs[@]}"
}

## fidelity: 1 GPU: the paced comm stand-in checked, every kernel shape beside the burst and paced stand-ins (bench_tax_ab.py), the headline with domino-nocomm, the emulated table's rows, tune (issue 33/34; FIDELITY_PARTS, default "checks ab runs")
suite_fidelity() { bash benchmarks/fidelity_parts.sh ${FIDELITY_PARTS:-checks ab runs}; }

## headline-next: 1 GPU: the checks issue 34 left for the next GPU session: bench_norm.py, gpu_verify --tp 1 with the CUDA default kernels, the emulated headline --cuda-graphs twice with run's defaults (the first analysed there when msgspec imports: the occupancy decomposition), tp-1 bench_schedule --graph-scope step --abab 8, tune of domino-sp's backward comm CTAs; PARTS (default "norm verify graphs abab ctas": two calls, e.g. "norm verify graphs" then "abab ctas")
# msgspec for the analysis travels as a wheel (docs of the device tool): here, once,
#   mkdir -p .whl && echo /.whl/ >> .git/info/exclude && python3 -m pip download --no-deps \
#     --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_17_x86_64 -d .whl msgspec==0.19.0
# and the call carries .whl and starts with `python3 -m pip install -q --no-index --no-deps
# --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site`. Without it the traces of
# every decomposition mode come back instead (domino-prof run --reanalyze here).
suite_headline_next() {
  # the headline as README's TP-8 section runs it, 16 timed steps in blocks of 4. The
  # device tool brings back 8 files: the results go into $OUT/headline-next.tar.gz, the
  # traces of domino-sp and domino-sp-nocomm (every decomposition mode's without msgspec)
  # into $OUT/headline-next-traces.tar.gz, beside the driver's log and env.txt
  local part rc=0 R="$W/results" head=(--tp 8 --seq 4096 --comm emulate --mode all
                                        --cuda-graphs --steps 16 --block-steps 4
                                        --profile-steps 2)
  local dest="$OUT"  # the session's; keep() writes under $OUT, the local one below
  local OUT="$R" keep_modes="domino-sp domino-sp-nocomm"
  mkdir -p "$R"
  for part in ${PARTS:-norm verify graphs abab ctas}; do
    echo "== part $part $(date -u +%T)"
    case $part in
      norm) timeout 120 python3 benchmarks/bench_norm.py --json "$R/bench_norm.json" \
              2>&1 | tee "$R/bench_norm.txt" || rc=1 ;;
      verify) timeout 200 python3 benchmarks/gpu_verify.py --tp 1 --out "$W/verify" 2>&1 \
                | tail -40 | tee "$R/verify_tp1.txt" || rc=1
              cp "$W"/verify/*.json "$R/" 2>/dev/null ;;
      graphs)
        timeout 240 $RUN "${head[@]}" --no-analyze --out "$W/graphs1" > "$W/graphs1.log" 2>&1 || rc=1
        keep graphs1 headline.txt
        if python3 -c "import msgspec" 2>/dev/null && [ -f "$W/graphs1/run.json" ]; then
          timeout 240 $RUN --reanalyze "$W/graphs1" > "$W/reanalyze.log" 2>&1 || rc=1
          grep -E "what limits" "$W/reanalyze.log" | tee -a "$R/headline.txt"
          cp "$W/graphs1/run.json" "$R/graphs1.json"  # with limits / limits_sp
          mkdir -p "$R/analyses"
          for f in "$W"/graphs1/*/analysis.json; do
            [ -f "$f" ] && cp "$f" "$R/analyses/$(basename "$(dirname "$f")").json"
          done
        else
          keep_modes="domino domino-nocomm nocomm domino-sp domino-sp-nocomm"
        fi
        local dirs=() m
        for m in $keep_modes; do [ -d "$W/graphs1/$m" ] && dirs+=("graphs1/$m"); done
        [ ${#dirs[@]} -gt 0 ] && (cd "$W" && tar -czf - "${dirs[@]}") \
          > "$WORK/headline-next-traces.tar.gz"
        timeout 240 $RUN "${head[@]}" --no-analyze --out "$W/graphs2" > "$W/graphs2.log" 2>&1 || rc=1
        keep graphs2 headline.txt ;;
      abab) timeout 240 python3 benchmarks/bench_schedule.py --model llama3-3b --seq 1024 \
              --mbs 2 --graph-scope step --abab 8 --out "$R/abab.json" > "$R/abab.txt" 2>&1 \
              || rc=1
            tail -20 "$R/abab.txt" ;;
      ctas)  # fewer CTAs for domino-sp's backward collectives, the auto carve-out following
        # them (8 SMs instead of 24 beside a collective; the collectives 1.35x longer at 8):
        # never measured together (2026-12-07's bwd16/bwd20 ran before the carve-out)
        timeout 420 python3 -m domino_prof.cli tune --tp 8 --seq 4096 --comm emulate \
          --grid cuda_graphs=on --schedule domino-sp --grid comm_ctas=default,16,12,8 \
          --comm-ctas-scope bwd --no-analyze --steps 16 --out "$W/tune-ctas" 2>&1 \
          | tee "$R/tune_ctas.txt" | tail -30 || rc=1
        cp "$W/tune-ctas/tune.json" "$R/" 2>/dev/null ;;
      *) echo "headline-next: no part '$part' (norm verify graphs abab ctas)"; rc=1 ;;
    esac
  done
  (cd "$W" && tar -czf - results) > "$dest/headline-next.tar.gz"
  if [ -f "$WORK/headline-next-traces.tar.gz" ]; then
    mv "$WORK/headline-next-traces.tar.gz" "$dest/"
  fi
  return $rc
}

# --------------------------------------------------------------------------- driver
exec > >(tee -a "$OUT/gpu_session.log") 2>&1
echo "== gpu_session.sh $(date -u +%FT%TZ) suites: $*"
env_txt | tee "$OUT/env.txt"
rc=0
for s in "$@"; do
  W="$WORK/$s"; rm -rf "$W"; mkdir -p "$W"
  echo "== suite $s $(date -u +%T)"
  s0=$SECONDS
  "suite_${s//-/_}"
  r=$?
  echo "== suite $s rc=$r in $((SECONDS - s0)) s"
  [ $r -ne 0 ] && rc=1
done
ls -la "$OUT"
sleep 1  # let tee write the log's last lines before the command returns
exit $rc
