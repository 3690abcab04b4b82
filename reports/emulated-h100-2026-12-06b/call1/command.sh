set -u
RUNS="ce-joint||--cuda-graphs --comm-engine ce
ce-lock|DOMINO_PROF_LANE_LOCK=dgrad|--cuda-graphs --comm-engine ce --mb-streams 2
ce-lanes||--cuda-graphs --comm-engine ce --mb-streams 2
ce-lock-acc|DOMINO_PROF_LANE_LOCK=dgrad|--cuda-graphs --comm-engine ce --mb-streams 2 --wgrad-in accumulate
ce-lock-bwd|DOMINO_PROF_LANE_LOCK=dgrad DOMINO_PROF_LANE_PHASES=bwd|--cuda-graphs --comm-engine ce --mb-streams 2
sm-lock|DOMINO_PROF_LANE_LOCK=dgrad|--cuda-graphs --mb-streams 2
ce-mbs4-acc||--cuda-graphs --comm-engine ce --mbs 4 --wgrad-in accumulate
ce-lock-mbs4-acc|DOMINO_PROF_LANE_LOCK=dgrad|--cuda-graphs --comm-engine ce --mb-streams 2 --mbs 4 --wgrad-in accumulate
sm-joint||--cuda-graphs" STOP_S=330 OUT=$OUT SKIP_VERIFY=1 SKIP_BENCH=1 bash benchmarks/lanes_session.sh
B="python3 benchmarks/bench_schedule.py --model llama3-3b --seq 1024 --mbs 2 --variants eager,graphs --graph-scope step --steps 10 --warmup 3 --schedules tp,domino"
for v in joint accumulate; do
  echo "== bench $v"
  timeout 110 $B --wgrad-in $v --out $OUT/bench-$v.json > $OUT/bench-$v.txt 2>&1
  grep -E "^(plain|tp|domino) |/" $OUT/bench-$v.txt | head -16
done
