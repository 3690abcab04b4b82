# call 4, 2026-12-07 08:50 UTC, one H100 (device tool, kind nvidia-h100-x1), code of 11def42
# (the final code of this stop): the headline with run's defaults, --cuda-graphs and eager,
# and the tp-1 bench
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; mkdir -p /tmp/x/bench
RUNS="final||--cuda-graphs
final-eager||" STOP_S=120 RUN_S=60 SKIP_VERIFY=1 SKIP_BENCH=1 OUT=$OUT bash benchmarks/lanes_session.sh
timeout 100 python3 benchmarks/bench_schedule.py --model llama3-3b --seq 1024 --mbs 2 --variants eager,graphs --graph-scope step --steps 10 --warmup 3 --schedules tp,domino,domino-sp --out /tmp/x/bench/base.json > /tmp/x/bench/base.txt 2>&1
# then, on the 2-core CPU box: domino-prof run --reanalyze DIR (limits*.txt: its "what limits" lines)
