#!/usr/bin/env bash
# The emulated table's runs that gpu_emulate.sh's budget cut (repeat-major: every config
# ran once; these complete the repeats): RUNS="name ..." with names <model>-tp<R>-<eager|graphs>-r<k>,
# the same command line as gpu_emulate.sh's table part. Packs run.json/logs into
# $OUT/table-more.tar.gz (traces omitted: repeat 1's are the analysed ones).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT}; W=/tmp/emu-more; rm -rf "$W"; mkdir -p "$W" "$OUT"
LAYERS=${LAYERS:-8}
for name in $RUNS; do
  IFS=- read -r m1 m2 tpx variant rep <<< "$name"; model="$m1-$m2"; tp=${tpx#tp}
  lay="--layers $LAYERS"; g=""; [ "$variant" = graphs ] && g="--cuda-graphs"
  s0=$SECONDS
  timeout 90 python3 -m domino_prof.commands.run --comm emulate --tp "$tp" --device cuda \
    --model "$model" $lay --seq 4096 --mbs 2 --mode all $g --warmup 1 --steps 4 --block-steps 2 \
    --profile-steps 1 --no-analyze --out "$W/$name" > "$W/$name.txt" 2>&1
  r=$?; grep -E "^verdict" "$W/$name.txt" | sed "s/^/$name: /"; echo "$name rc=$r $((SECONDS - s0)) s"
  mkdir -p "$W/$name" && mv "$W/$name.txt" "$W/$name/stdout.txt"
  find "$W/$name" -name '*.pt.trace.json*' -delete
done
tar -czf "$OUT/table-more.tar.gz" -C "$W" . && ls -la "$OUT"
