# call 2, 2026-12-07, one H100 (device tool), code of 57e30ac (fold the default; --carveout-scope bwd)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; mkdir -p /tmp/x/bench
RUNS="defaults||--cuda-graphs
c24-bwd||--cuda-graphs --sm-carveout 24 --carveout-scope bwd
defaults-r2||--cuda-graphs
c24-bwd-r2||--cuda-graphs --sm-carveout 24 --carveout-scope bwd
c24||--cuda-graphs --sm-carveout 24
chain||--cuda-graphs --sp-residual chain
eager||
8b-defaults||--cuda-graphs --model llama3-8b" STOP_S=330 LATE_S=330 RUN_S=90 SKIP_VERIFY=1 SKIP_BENCH=1 OUT=$OUT bash benchmarks/lanes_session.sh
timeout 110 python3 benchmarks/bench_schedule.py --model llama3-3b --seq 1024 --mbs 2 --variants eager,graphs --graph-scope step --steps 10 --warmup 3 --schedules tp,domino,domino-sp --out /tmp/x/bench/base.json > /tmp/x/bench/base.txt 2>&1; tail -12 /tmp/x/bench/base.txt
tar -C /tmp/x -cf $OUT/bench.tar bench
