set -u
RUNS="8b-ce-mbs4-acc||--cuda-graphs --comm-engine ce --mbs 4 --wgrad-in accumulate --model llama3-8b
8b-ce-lock-mbs4-acc|DOMINO_PROF_LANE_LOCK=dgrad|--cuda-graphs --comm-engine ce --mb-streams 2 --mbs 4 --wgrad-in accumulate --model llama3-8b
ce-lock-mbs4-acc-r2|DOMINO_PROF_LANE_LOCK=dgrad|--cuda-graphs --comm-engine ce --mb-streams 2 --mbs 4 --wgrad-in accumulate
ce-mbs4-acc-r2||--cuda-graphs --comm-engine ce --mbs 4 --wgrad-in accumulate
sm-lock-mbs4-acc|DOMINO_PROF_LANE_LOCK=dgrad|--cuda-graphs --mb-streams 2 --mbs 4 --wgrad-in accumulate
sm-mbs4-acc||--cuda-graphs --mbs 4 --wgrad-in accumulate" LATE_S=200 STOP_S=420 RUN_S=100 OUT=$OUT SKIP_VERIFY=1 SKIP_BENCH=1 bash benchmarks/lanes_session.sh
