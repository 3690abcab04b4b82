# call 1, 2026-12-07, one H100 (device tool), code of a5248c4 (--sp-residual, default chain)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; mkdir -p /tmp/x/v
timeout 170 python3 benchmarks/gpu_verify.py --tp 2 --backend gloo --sp-keep --out /tmp/x/v > /tmp/x/v/log.txt 2>&1; echo "verify rc $?"
RUNS="defaults||--cuda-graphs
fold||--cuda-graphs --sp-residual fold
fold-c24||--cuda-graphs --sp-residual fold --sm-carveout 24
c24||--cuda-graphs --sm-carveout 24
defaults-r2||--cuda-graphs
fold-r2||--cuda-graphs --sp-residual fold
fold-c24-r2||--cuda-graphs --sp-residual fold --sm-carveout 24
fold-c20||--cuda-graphs --sp-residual fold --sm-carveout 20
fold-c28||--cuda-graphs --sp-residual fold --sm-carveout 28
fold-eager||--sp-residual fold
eager||" STOP_S=400 RUN_S=75 SKIP_VERIFY=1 SKIP_BENCH=1 OUT=$OUT bash benchmarks/lanes_session.sh
tar -C /tmp/x -cf $OUT/v.tar v
# then, on the 2-core CPU box: domino-prof run --reanalyze DIR (limits*.txt: its "what limits" lines)
