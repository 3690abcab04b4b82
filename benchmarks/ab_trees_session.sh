#!/usr/bin/env bash
# The headline command (emulated TP 8, llama3-3b 28 L, seq 4096, mbs 2, --mode all, 16
# timed steps) from two source trees in ONE device call, rows in the order given (ABAB):
#   git archive REV domino_prof | tar -x -C _ab/base     # the baseline tree, untracked
#   ROWS="name|tree|cpus|flags|env ..." OUT=/some/dir bash benchmarks/ab_trees_session.sh
# tree: "base" (runs from _ab/base: `python -m` puts the cwd first on sys.path) or "new"
# (this checkout); cpus: a taskset list (empty: unpinned); env (optional): VAR=value
# words set for the row's run only (e.g. DOMINO_PROF_ROPE=aten). VERIFY=1 first runs
# gpu_verify --tp 2 --backend gloo --sp-keep (this checkout); the tp-1 bench_schedule runs
# last unless SKIP_BENCH=1. Traces are dropped (eager traces are ~5 MB a run): what comes
# back is session.log, bench.tar (bench, verify, /proc/stat samples) and runs.tar.gz (run.json, config.json).
# _ab/ must travel: untracked, not ignored; delete it before committing. RUN_S: a row's limit
# (150 s: since run profiles after timing every mode, each mode but the last is built twice).
set -uo pipefail
export PYTHONUNBUFFERED=1
ROOT=$PWD
OUT=${OUT:?}
exec > >(tee -a "$OUT/session.log") 2>&1
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
echo "== ab_trees_session.sh $(date -u +%FT%TZ)"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nproc; cat /proc/loadavg; lscpu | grep -iE "model name|MHz|per core|NUMA node" | head -8
if [ -n "${VERIFY:-}" ]; then
  mkdir -p /tmp/ab/v; echo "== gpu_verify at $(el) s"
  PYTHONPATH=$ROOT timeout 170 python3 benchmarks/gpu_verify.py --tp 2 --backend gloo --sp-keep --out /tmp/ab/v > /tmp/ab/v/log.txt 2>&1; echo "verify rc $?"
  grep -E "^domino|^sp|^tp|rror" /tmp/ab/v/log.txt | cut -c1-200 | head -30
fi
W=/tmp/ab; mkdir -p "$W/runs" "$W/bench"
# the host's CPU accounting every 2 s (/proc/stat's cpu line: user nice system idle iowait
# irq softirq steal ...), to set against the eager steps' times: bench/proc_stat.log
(while :; do echo "$(el) $(head -1 /proc/stat)"; sleep 2; done) > "$W/bench/proc_stat.log" &
STAT_PID=$!
ROWS=${ROWS:?}
while IFS='|' read -r name tree pin flags envs; do
  [ -n "$name" ] || continue
  [ "$(el)" -lt "${STOP_S:-400}" ] || { echo "== skip $name at $(el) s"; continue; }
  dir=$ROOT; [ "$tree" = base ] && dir=$ROOT/_ab/base
  [ -d "$dir/domino_prof" ] || { echo "== skip $name: no $dir/domino_prof (see this script's header)"; continue; }
  echo "== run $name ($tree pin=$pin $flags${envs:+ env $envs}) at $(el) s"
  (cd "$dir" && env PYTHONPATH=$dir $envs ${pin:+taskset -c $pin} timeout "${RUN_S:-150}" python3 -m domino_prof.commands.run --tp 8 --seq 4096 \
    --comm emulate --mode all --steps 16 --block-steps 4 --profile-steps 2 --no-analyze \
    --out "$W/runs/$name" $flags 2>&1 | grep -E "^│ |rror|peak" | head -14)
done <<< "$ROWS"
if [ -z "${SKIP_BENCH:-}" ]; then
  echo "== bench_schedule at $(el) s"
  timeout 150 python3 benchmarks/bench_schedule.py --model llama3-3b --seq 1024 --mbs 2 \
    --variants eager,graphs --graph-scope step --steps 10 --warmup 3 --schedules tp,domino,domino-sp \
    --out "$W/bench/new.json" > "$W/bench/new.txt" 2>&1
  grep -E "^(plain|tp|domino|domino-sp) |/" "$W/bench/new.txt" | head -20
fi
kill $STAT_PID 2>/dev/null
tar -C "$W" -cf "$OUT/bench.tar" bench $( [ -d "$W/v" ] && echo v)
(cd "$W/runs" && for d in */; do d=${d%/}; rm -f "$d"/*/*.trace.json.gz; done; tar -czf "$OUT/runs.tar.gz" .)
ls -la "$OUT"; echo "== done at $(el) s"
