set -u
RUNS="8b-ce-lock-mbs4-acc-r2|DOMINO_PROF_LANE_LOCK=dgrad|--cuda-graphs --comm-engine ce --mb-streams 2 --mbs 4 --wgrad-in accumulate --model llama3-8b
8b-ce-mbs4-acc-r2||--cuda-graphs --comm-engine ce --mbs 4 --wgrad-in accumulate --model llama3-8b
sm-joint-r2||--cuda-graphs
sm-lock-r2|DOMINO_PROF_LANE_LOCK=dgrad|--cuda-graphs --mb-streams 2
eager-sm-lock|DOMINO_PROF_LANE_LOCK=dgrad|--mb-streams 2
eager-sm||" LATE_S=200 STOP_S=300 RUN_S=100 OUT=$OUT SKIP_VERIFY=1 SKIP_BENCH=1 bash benchmarks/lanes_session.sh
rm -f $OUT/verify.tar $OUT/bench.tar
B="python3 benchmarks/bench_schedule.py --model llama3-3b --seq 1024 --mbs 2 --variants eager,graphs --graph-scope step --steps 10 --warmup 3 --schedules tp,domino"
mkdir -p /tmp/b3
echo "== bench base"
timeout 110 $B --out /tmp/b3/base.json > /tmp/b3/base.txt 2>&1; grep -E "^(plain|tp|domino) |/" /tmp/b3/base.txt | tail -7
echo "== bench lanes+lock"
DOMINO_PROF_LANE_LOCK=dgrad timeout 110 $B --mb-streams 2 --out /tmp/b3/lock.json > /tmp/b3/lock.txt 2>&1; grep -E "^(plain|tp|domino) |/" /tmp/b3/lock.txt | tail -7
tar -C /tmp -cf $OUT/bench3.tar b3; ls $OUT
