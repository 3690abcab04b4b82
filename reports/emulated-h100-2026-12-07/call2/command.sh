# call 2, 2026-12-07 06:39 UTC, one H100 (device tool, kind nvidia-h100-x1), code of 4dbdb95
# (--high-priority-comm on by default on CUDA, --comm-ctas-scope, DOMINO_PROF_SIDE_PRIORITY)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; RUNS="defaults||--cuda-graphs
side-hi|DOMINO_PROF_SIDE_PRIORITY=high|--cuda-graphs
bwd12||--cuda-graphs --comm-ctas 12 --comm-ctas-scope bwd
side-hi-bwd12|DOMINO_PROF_SIDE_PRIORITY=high|--cuda-graphs --comm-ctas 12 --comm-ctas-scope bwd
bwd16||--cuda-graphs --comm-ctas 16 --comm-ctas-scope bwd
side-hi-r2|DOMINO_PROF_SIDE_PRIORITY=high|--cuda-graphs
defaults-r2||--cuda-graphs" STOP_S=160 RUN_S=70 SKIP_VERIFY=1 SKIP_BENCH=1 OUT=$OUT bash benchmarks/lanes_session.sh
# (defaults-r2 was skipped: STOP_S) then, on the 2-core CPU box: domino-prof run --reanalyze DIR
