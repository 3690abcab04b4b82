RUNS="ce-c16-hp-joint-r2||--cuda-graphs --comm-engine ce --sm-carveout 16 --high-priority-comm
ce-c12-hp-joint||--cuda-graphs --comm-engine ce --sm-carveout 12 --high-priority-comm
ce-c16-hp-joint-r3||--cuda-graphs --comm-engine ce --sm-carveout 16 --high-priority-comm
ce-c20-hp-joint||--cuda-graphs --comm-engine ce --sm-carveout 20 --high-priority-comm
ce-c16-hp-joint-r4||--cuda-graphs --comm-engine ce --sm-carveout 16 --high-priority-comm" STOP_S=260 RUN_S=80 OUT=$OUT SKIP_VERIFY=1 SKIP_BENCH=1 bash benchmarks/lanes_session.sh
