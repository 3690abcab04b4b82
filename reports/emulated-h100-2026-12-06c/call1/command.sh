export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 100 python3 benchmarks/probe_call_graph.py --out $OUT/probe_call_graph.json
RUNS="ce-c16||--cuda-graphs --comm-engine ce --sm-carveout 16
ce-c16-hp||--cuda-graphs --comm-engine ce --sm-carveout 16 --high-priority-comm
sm-c16||--cuda-graphs --sm-carveout 16
sm-c16-hp||--cuda-graphs --sm-carveout 16 --high-priority-comm
ce-c24||--cuda-graphs --comm-engine ce --sm-carveout 24
sm-ctas16-c16||--cuda-graphs --comm-ctas 16 --sm-carveout 16" STOP_S=400 RUN_S=90 OUT=$OUT SKIP_VERIFY=1 SKIP_BENCH=1 bash benchmarks/lanes_session.sh
