RUNS="ce-c16-hp-r2||--cuda-graphs --comm-engine ce --sm-carveout 16 --high-priority-comm
ce-c16f-hp||--cuda-graphs --comm-engine ce --sm-carveout 16 --carveout-scope fwd --high-priority-comm
ce-c16f||--cuda-graphs --comm-engine ce --sm-carveout 16 --carveout-scope fwd
sm-c16f||--cuda-graphs --sm-carveout 16 --carveout-scope fwd
sm-c16f-hp||--cuda-graphs --sm-carveout 16 --carveout-scope fwd --high-priority-comm
8b-ce-c16f-hp||--cuda-graphs --comm-engine ce --sm-carveout 16 --carveout-scope fwd --high-priority-comm --model llama3-8b" LATE_S=300 STOP_S=400 RUN_S=100 OUT=$OUT SKIP_VERIFY=1 SKIP_BENCH=1 bash benchmarks/lanes_session.sh
