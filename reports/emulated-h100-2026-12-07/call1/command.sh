# call 1, 2026-12-07 05:39 UTC, one H100 (device tool, kind nvidia-h100-x1), code of b086fe9
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; RUNS="sm-default||--cuda-graphs
sm-hp||--cuda-graphs --high-priority-comm
ce-c12-hp||--cuda-graphs --comm-engine ce --sm-carveout 12 --high-priority-comm
eager||
eager-rs|DOMINO_PROF_EMULATE_TENSORS=record_stream|
eager-hp||--high-priority-comm
sm-default-r2||--cuda-graphs
sm-hp-r2||--cuda-graphs --high-priority-comm" STOP_S=330 RUN_S=80 SKIP_VERIFY=1 SKIP_BENCH=1 OUT=$OUT bash benchmarks/lanes_session.sh
mkdir -p /tmp/bench; timeout 170 python3 benchmarks/bench_schedule.py --model llama3-3b --seq 1024 --mbs 2 --variants eager,graphs --graph-scope step --steps 10 --warmup 3 --schedules tp,domino,domino-sp --out /tmp/bench/base.json > /tmp/bench/base.txt 2>&1
# then, on the 2-core CPU box: domino-prof run --reanalyze DIR for each run directory
# (the device image has no msgspec: each run ended in ModuleNotFoundError after writing
# run.json, fixed in 2549375)
