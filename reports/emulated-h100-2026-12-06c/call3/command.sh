export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
RUNS="ce-c16-hp-joint||--cuda-graphs --comm-engine ce --sm-carveout 16 --high-priority-comm
ce-c16-hp-acc||--cuda-graphs --comm-engine ce --sm-carveout 16 --high-priority-comm --wgrad-in accumulate
sm-c16-joint||--cuda-graphs --sm-carveout 16
sm-c16-acc||--cuda-graphs --sm-carveout 16 --wgrad-in accumulate
8b-ce-c16-hp-joint||--cuda-graphs --comm-engine ce --sm-carveout 16 --high-priority-comm --model llama3-8b" LATE_S=250 STOP_S=300 RUN_S=100 OUT=$OUT SKIP_VERIFY=1 SKIP_BENCH=1 bash benchmarks/lanes_session.sh
mkdir -p /tmp/x/verify /tmp/x/bench
echo "== verify"; timeout 140 python3 benchmarks/gpu_verify.py --tp 1 --out /tmp/x/verify 2>&1 | grep -E "^(domino|sp|tp)|rror" | cut -c1-200
echo "== bench"; B="python3 benchmarks/bench_schedule.py --model llama3-3b --seq 1024 --mbs 2 --variants eager,graphs --graph-scope step --steps 10 --warmup 3"
timeout 110 $B --schedules tp,domino-sp --out /tmp/x/bench/joint.json > /tmp/x/bench/joint.txt 2>&1
timeout 60 $B --skip-plain --schedules tp,domino-sp --wgrad-in accumulate --out /tmp/x/bench/acc.json > /tmp/x/bench/acc.txt 2>&1
tar -C /tmp/x -cf $OUT/vb.tar verify bench
