set -u
RUNS="sm-lanes||--cuda-graphs --mb-streams 2
sm-lock-r3|DOMINO_PROF_LANE_LOCK=dgrad|--cuda-graphs --mb-streams 2
sm-lanes-r2||--cuda-graphs --mb-streams 2
sm-lock-r4|DOMINO_PROF_LANE_LOCK=dgrad|--cuda-graphs --mb-streams 2
eager-sm-r2||
eager-sm-lock-r2|DOMINO_PROF_LANE_LOCK=dgrad|--mb-streams 2
eager-sm-lanes||--mb-streams 2" LATE_S=200 STOP_S=330 RUN_S=100 OUT=$OUT SKIP_VERIFY=1 SKIP_BENCH=1 bash benchmarks/lanes_session.sh
rm -f $OUT/verify.tar $OUT/bench.tar
