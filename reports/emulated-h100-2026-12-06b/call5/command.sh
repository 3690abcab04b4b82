# Four device calls on one warm H100 (06:52-06:58 UTC), each a command of the device tool:
# 5: benchmarks/gpu_verify.py without PYTHONPATH (failed at once: "No module named
#    'domino_prof'"), then two rows:
RUNS="sm-lock-acc||--cuda-graphs --mb-streams 2 --wgrad-in accumulate
ce-lock-acc-r2||--cuda-graphs --comm-engine ce --mb-streams 2 --wgrad-in accumulate" LATE_S=0 STOP_S=120 RUN_S=60 OUT=$OUT/s SKIP_VERIFY=1 SKIP_BENCH=1 bash benchmarks/lanes_session.sh
# 6: the lanes' gradients with the lock (the working tree's default, config.LANE_LOCKS, not
#    yet committed then) against the fp32 unsharded model: verify/
export PYTHONPATH=$PWD; timeout 200 python3 benchmarks/gpu_verify.py --tp 1 --mb-streams --out $OUT/verify-lock > $OUT/verify-lock.log 2>&1
# 7: --wgrad-in accumulate with the SM stand-in, one stream and locked lanes
RUNS="sm-acc||--cuda-graphs --wgrad-in accumulate
sm-lock-acc-r2||--cuda-graphs --mb-streams 2 --wgrad-in accumulate
sm-acc-r2||--cuda-graphs --wgrad-in accumulate" LATE_S=0 STOP_S=150 RUN_S=60 OUT=$OUT SKIP_VERIFY=1 SKIP_BENCH=1 bash benchmarks/lanes_session.sh
# 8: bench_schedule at tp 1, joint and accumulate, twice each (bench/)
B="python3 benchmarks/bench_schedule.py --model llama3-3b --seq 1024 --mbs 2 --variants eager,graphs --graph-scope step --steps 10 --warmup 3 --schedules tp,domino"
for r in 1 2; do for v in joint accumulate; do timeout 60 $B --wgrad-in $v --out $OUT/bench-$v-$r.json > $OUT/bench-$v-$r.txt 2>&1; done; done
