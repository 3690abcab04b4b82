# call 1, 2026-12-07 07:35 UTC, one H100 (device tool; asked for nvidia-h200, an H100 came),
# code of ef6f08e (--sp-wgrad-input, default regather then: "defaults" rows regather)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; mkdir -p /tmp/x/v /tmp/x/bench
timeout 170 python3 benchmarks/gpu_verify.py --tp 2 --backend gloo --sp-keep --out /tmp/x/v > /tmp/x/v/log.txt 2>&1
RUNS="defaults||--cuda-graphs
keep||--cuda-graphs --sp-wgrad-input keep
eager||
eager-keep||--sp-wgrad-input keep
defaults-r2||--cuda-graphs
keep-r2||--cuda-graphs --sp-wgrad-input keep
ce-c12-keep||--cuda-graphs --comm-engine ce --sm-carveout 12 --sp-wgrad-input keep
twin-lane|DOMINO_PROF_LANE_COMM=own|--cuda-graphs --mb-streams 2 --mode domino
twin-phase||--cuda-graphs --comm-ctas 12 --comm-ctas-scope bwd --mode domino-sp" STOP_S=300 RUN_S=75 SKIP_VERIFY=1 SKIP_BENCH=1 OUT=$OUT bash benchmarks/lanes_session.sh
timeout 100 python3 benchmarks/bench_schedule.py --model llama3-3b --seq 1024 --mbs 2 --variants eager,graphs --graph-scope step --steps 10 --warmup 3 --schedules tp,domino,domino-sp --out /tmp/x/bench/base.json > /tmp/x/bench/base.txt 2>&1
# then, on the 2-core CPU box: domino-prof run --reanalyze DIR (limits*.txt: its "what limits" lines)
