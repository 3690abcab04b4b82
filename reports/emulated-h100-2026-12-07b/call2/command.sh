# call 2, 2026-12-07 07:50 UTC, one H100 (device tool, kind nvidia-h100-x1), code of a9d0bac
# (--sp-wgrad-input keep by default: every row keeps)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; mkdir -p /tmp/x/bench
RUNS="defaults||--cuda-graphs
bwd20||--cuda-graphs --comm-ctas 20 --comm-ctas-scope bwd
side-hi|DOMINO_PROF_SIDE_PRIORITY=high|--cuda-graphs
eager||
bwd16||--cuda-graphs --comm-ctas 16 --comm-ctas-scope bwd
defaults-r2||--cuda-graphs
c8||--cuda-graphs --sm-carveout 8
8b-defaults||--cuda-graphs --model llama3-8b" STOP_S=330 LATE_S=330 RUN_S=90 SKIP_VERIFY=1 SKIP_BENCH=1 OUT=$OUT bash benchmarks/lanes_session.sh
timeout 100 python3 benchmarks/bench_schedule.py --model llama3-3b --seq 1024 --mbs 2 --variants eager,graphs --graph-scope step --steps 10 --warmup 3 --schedules tp,domino,domino-sp --out /tmp/x/bench/base.json > /tmp/x/bench/base.txt 2>&1
# then, on the 2-core CPU box: domino-prof run --reanalyze DIR (limits*.txt: its "what limits" lines)
