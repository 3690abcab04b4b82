#!/usr/bin/env bash
# Issue 34 on ONE GPU, one device call: --mb-streams 2 (micro-batch lanes) and --wgrad-in
# accumulate, each against its baseline in the same call.
#   OUT=/some/dir bash benchmarks/lanes_session.sh
# 1. gpu_verify --tp 1 --mb-streams: the lanes' gradients vs the fp32 unsharded model
#    (eager, accumulate, column split, one graph per step), fp32 and bf16;
# 2. the headline command, emulated TP 8 (llama3-3b 28 L, seq 4096, mbs 2, --cuda-graphs,
#    --mode all, STEPS timed steps) per RUNS row "name|env|flags";
#    a row starting with "8b-" runs only while less than LATE_S seconds have passed, any
#    row only while less than STOP_S (default 480: the tarballs are made at the end);
#    (MODES: one --mode value, default all: a list is refused); PROBE=1 first runs
#    benchmarks/probe_lane_link.py and
#    probe_ce_copier.py;
# 3. bench_schedule at tp 1 (llama3-3b seq 1024 mbs 2, eager and a graph per step):
#    the baseline, and domino with --mb-streams 2.
# Comes back in at most 7 files: session.log, verify.tar and bench.tar (each only when its
# step ran), runs0..3.tar (each run-NAME.tar.gz: run.json, config.json, traces;
# `domino-prof run --reanalyze` them on a CPU box). The device tool brings back at most 8
# files from $OUT: a command that adds its own outputs puts them in one tar (a call whose
# $OUT held 11 files lost its session.log and a quarter of its runs,
# reports/emulated-h100-2026-12-06b/call1).
set -uo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/session.log") 2>&1
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
LATE_S=${LATE_S:-330}
echo "== lanes_session.sh $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
W=/tmp/lanes; rm -rf "$W"; mkdir -p "$W/verify" "$W/bench" "$W/runs"
if [ -z "${SKIP_VERIFY:-}" ]; then
  echo "== gpu_verify --tp 1 --mb-streams at $(el) s"
  timeout 150 python3 benchmarks/gpu_verify.py --tp 1 --mb-streams --out "$W/verify" 2>&1 \
    | grep -E "^domino|rror" | cut -c1-220
fi
if [ -n "${PROBE:-}" ]; then  # the two lane comm streams' shared link (DOMINO_PROF_LANE_COMM=own)
  echo "== probe_lane_link at $(el) s"
  timeout 90 python3 benchmarks/probe_lane_link.py --out "$W/verify/lane_link.json" 2>&1 | tail -26
  echo "== probe_ce_copier at $(el) s"
  timeout 60 python3 benchmarks/probe_ce_copier.py --out "$W/verify/ce_copier.json" 2>&1 | tail -5
fi
RUNS=${RUNS:-"ce-joint||--cuda-graphs --comm-engine ce
ce-lanes||--cuda-graphs --comm-engine ce --mb-streams 2
sm-joint||--cuda-graphs
sm-lanes||--cuda-graphs --mb-streams 2"}
while IFS='|' read -r name envs flags; do
  [ -n "$name" ] || continue
  case $name in 8b-*) [ "$(el)" -lt "$LATE_S" ] || { echo "== skip $name at $(el) s"; continue; } ;; esac
  [ "$(el)" -lt "${STOP_S:-480}" ] || { echo "== skip $name at $(el) s (STOP_S)"; continue; }
  echo "== run $name ($envs $flags) at $(el) s"
  env $envs timeout "${RUN_S:-90}" python3 -m domino_prof.commands.run --tp 8 --seq 4096 --comm emulate \
    --mode "${MODES:-all}" --steps "${STEPS:-16}" --block-steps 4 --profile-steps 2 --no-analyze \
    --out "$W/runs/$name" $flags 2>&1 | grep -E "^│ |rror|peak" | head -14
done <<< "$RUNS"
if [ -z "${SKIP_BENCH:-}" ]; then
  B="python3 benchmarks/bench_schedule.py --model llama3-3b --seq 1024 --mbs 2 --variants eager,graphs --graph-scope step --steps ${BENCH_STEPS:-10} --warmup ${BENCH_WARMUP:-3}"
  echo "== bench_schedule at $(el) s"
  timeout 100 $B --schedules tp,domino --out "$W/bench/base.json" > "$W/bench/base.txt" 2>&1
  grep -E "^(plain|tp|domino) |/" "$W/bench/base.txt" | head -16
  echo "== bench_schedule --mb-streams 2 at $(el) s"
  timeout 80 $B --skip-plain --schedules tp,domino --mb-streams 2 --out "$W/bench/lanes.json" \
    > "$W/bench/lanes.txt" 2>&1
  grep -E "^(tp|domino) |graphs/tp" "$W/bench/lanes.txt" | head -8
fi
[ -z "$(ls -A "$W/verify")" ] || tar -C "$W" -cf "$OUT/verify.tar" verify
[ -z "$(ls -A "$W/bench")" ] || tar -C "$W" -cf "$OUT/bench.tar" bench
(cd "$W/runs" && shopt -s nullglob && n=0 && for d in */; do d=${d%/}; n=$((n + 1))
   tar -czf "$d.tar.gz" "$d" && tar -rf "$OUT/runs$(( n % 4 )).tar" "$d.tar.gz"; done)
ls -la "$OUT"
echo "== done at $(el) s"
