#!/usr/bin/env bash
# one-off: the one-big-file set on the lent machine's 16 cores, domino-prof with the
# chunk workers' shared memory slots (this commit) and without them (the commit
# before, carried as .whl/old_pkg), alternating, beside the decode floors
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
{ nproc; python3 -c "import sys,pandas,numpy,msgspec,isal;print(sys.version.split()[0],pandas.__version__,numpy.__version__,msgspec.__version__)"; } > $OUT/env.txt 2>&1
python3 benchmarks/bench_vs_hta.py --generate-only --sets one-big-file --workdir /tmp/sets > $OUT/gen.txt 2>&1
F=/tmp/sets/set-one-big-file/rank0.pt.trace.json.gz
T=$PWD/benchmarks/timed.py  # (the same code was inline when this ran)
timed() { python3 "$T" "$@"; }
for i in 1 2 3; do
  timed "ours one-big (slots)" python3 -m domino_prof.cli analyze $F -o /tmp/o.json
  (cd /tmp && timed "ours one-big (pipes)" env PYTHONPATH=/tmp/site:$OLDPWD/.whl/old_pkg python3 -m domino_prof.cli analyze $F -o /tmp/o_old.json)
  timed "floor 16 procs" python3 benchmarks/decode_floor.py $F --procs 16
  timed "floor 16 procs isal" python3 benchmarks/decode_floor.py $F --procs 16 --inflater isal
  timed "floor 1 proc" python3 benchmarks/decode_floor.py $F
done 2>&1 | tee $OUT/runs.txt
cmp /tmp/o.json /tmp/o_old.json > $OUT/cmp.txt 2>&1 && echo "same JSON" >> $OUT/cmp.txt
