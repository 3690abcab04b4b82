# call 3, 2026-12-07, one H100 (device tool), code of 82260d0 (fold; --carveout-auto on by default)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; mkdir -p /tmp/x/bench
RUNS="defaults||--cuda-graphs
no-auto||--cuda-graphs --no-carveout-auto
defaults-r2||--cuda-graphs
eager||
defaults-r3||--cuda-graphs
ce||--cuda-graphs --comm-engine ce
8b-defaults||--cuda-graphs --model llama3-8b" STOP_S=330 LATE_S=330 RUN_S=90 SKIP_VERIFY=1 SKIP_BENCH=1 OUT=$OUT bash benchmarks/lanes_session.sh
timeout 110 python3 benchmarks/bench_schedule.py --model llama3-3b --seq 1024 --mbs 2 --variants eager,graphs --graph-scope step --steps 10 --warmup 3 --schedules tp,domino,domino-sp --out /tmp/x/bench/base.json > /tmp/x/bench/base.txt 2>&1; tail -12 /tmp/x/bench/base.txt
tar -C /tmp/x -cf $OUT/bench.tar bench
