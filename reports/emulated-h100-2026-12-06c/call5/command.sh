RUNS="sm-default||--cuda-graphs
ce-c12-hp-joint-r2||--cuda-graphs --comm-engine ce --sm-carveout 12 --high-priority-comm
sm-c12-hp-joint||--cuda-graphs --sm-carveout 12 --high-priority-comm
ce-c12-hp-joint-r3||--cuda-graphs --comm-engine ce --sm-carveout 12 --high-priority-comm" STOP_S=200 RUN_S=80 OUT=$OUT SKIP_VERIFY=1 SKIP_BENCH=1 bash benchmarks/lanes_session.sh
