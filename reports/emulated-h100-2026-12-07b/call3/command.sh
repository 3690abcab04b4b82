# call 3, 2026-12-07 08:21 UTC, one H100 (device tool, kind nvidia-h100-x1), code of 2c797d1
# (keep by default): the SM carve-out beside keep, each row against the defaults of the call
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
RUNS="defaults||--cuda-graphs
c12||--cuda-graphs --sm-carveout 12
c16||--cuda-graphs --sm-carveout 16
c24||--cuda-graphs --sm-carveout 24
c16-fwd||--cuda-graphs --sm-carveout 16 --carveout-scope fwd
c12-r2||--cuda-graphs --sm-carveout 12
c16-r2||--cuda-graphs --sm-carveout 16
defaults-r2||--cuda-graphs" STOP_S=280 RUN_S=60 SKIP_VERIFY=1 SKIP_BENCH=1 OUT=$OUT bash benchmarks/lanes_session.sh
# then, on the 2-core CPU box: domino-prof run --reanalyze DIR (limits*.txt: its "what limits" lines)
