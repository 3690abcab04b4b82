#!/usr/bin/env bash
# Issue #15's protocol on 2×H200 (or any 2-GPU node), for the explicit schedules:
#   1. gradients of every schedule vs the unsharded model under NCCL (gpu_verify.py --tp 2)
#   2. llama3-3b, tp 2, seq 4096, mbs 2, --mode all (tp nocomm domino sp domino-sp),
#      eager and --cuda-graphs, 3 runs each, timed steps; run 1 of each keeps its traces
#   3. --high-priority-comm on vs off, and NCCL_MAX_NCHANNELS 4 / 8 / default (domino, graphs)
#   4. llama3-8b, same table (mbs 2), eager and --cuda-graphs, 1 run each
# Every run writes run.json (step_ms, issue_ms, memory per mode); analyse the kept traces
# here with `domino-prof run --reanalyze DIR` (the GPU image lacks plotly/msgspec).
# Usage: OUT=/some/dir bash benchmarks/gpu_tp2.sh [verify|table|stream|8b ...]  (default: all)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT}
W=/tmp/dp-tp2; mkdir -p "$W"
parts=${*:-verify table stream 8b}
run() {  # name, then run flags
  local n=$1; shift
  python3 -m domino_prof.commands.run --tp 2 --device cuda --seq 4096 --mbs 2 --warmup 3 \
    --steps 10 --profile-steps 1 --no-analyze --out "$W/$n" "$@" > "$W/$n.log" 2>&1
  cp "$W/$n/run.json" "$OUT/$n.json" 2>/dev/null || tail -3 "$W/$n.log"
  grep -E "step .* ms|error" "$W/$n.log" | sed "s/^/$n: /" | tee -a "$OUT/summary.txt"
}
for part in $parts; do case $part in
  verify) python3 benchmarks/gpu_verify.py --tp 2 --out "$W/verify" > "$OUT/verify.txt" 2>&1
          cp "$W/verify/gpu_verify.json" "$OUT/gpu_verify_tp2.json" ;;
  table)  for i in 1 2 3; do for g in "" --cuda-graphs; do
            run "3b_all${g:+_graphs}_rep$i" --model llama3-3b --mode all $g
          done; done
          tar -C "$W" -czf "$OUT/3b_traces.tgz" 3b_all_rep1 3b_all_graphs_rep1 ;;
  stream) for i in 1 2; do for hp in "" --high-priority-comm; do for ch in default 8 4; do
            n="3b_domino_graphs${hp:+_hp}_ch${ch}_rep$i"
            if [ "$ch" = default ]; then run "$n" --model llama3-3b --mode domino --cuda-graphs $hp
            else NCCL_MAX_NCHANNELS=$ch run "$n" --model llama3-3b --mode domino --cuda-graphs $hp; fi
          done; done; done ;;
  8b)     for g in "" --cuda-graphs; do run "8b_all${g:+_graphs}" --model llama3-8b --mode all $g; done ;;
esac; done
ls -la "$OUT"
