# call 4, 2026-12-07, one H100 (device tool), code of 82260d0: llama3-8b with and without --carveout-auto
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
RUNS="8b-auto||--cuda-graphs --model llama3-8b
8b-no-auto||--cuda-graphs --model llama3-8b --no-carveout-auto
8b-auto-r2||--cuda-graphs --model llama3-8b
8b-no-auto-r2||--cuda-graphs --model llama3-8b --no-carveout-auto
defaults-r4||--cuda-graphs" STOP_S=400 LATE_S=400 RUN_S=100 SKIP_VERIFY=1 SKIP_BENCH=1 OUT=$OUT bash benchmarks/lanes_session.sh
