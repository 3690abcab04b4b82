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
timed() { python3 - "$@" <<'PY'
import resource, subprocess, sys, time
t = time.perf_counter(); r = subprocess.run(sys.argv[2:], capture_output=True, text=True)
w = time.perf_counter() - t; ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{sys.argv[1]:<22} rc {r.returncode} wall {w:.2f} cpu {ru.ru_utime + ru.ru_stime:.2f} maxrss_mb {ru.ru_maxrss / 1024:.0f} {r.stdout.strip().splitlines()[-1][:150] if r.stdout.strip() else ''}", flush=True)
PY
}
for i in 1 2 3; do
  timed "ours one-big (slots)" python3 -m domino_prof.cli analyze $F -o /tmp/o.json
  (cd /tmp && timed "ours one-big (pipes)" env PYTHONPATH=/tmp/site:$OLDPWD/.whl/old_pkg python3 -m domino_prof.cli analyze $F -o /tmp/o_old.json)
  timed "floor 16 procs" python3 benchmarks/decode_floor.py $F --procs 16
  timed "floor 16 procs isal" python3 benchmarks/decode_floor.py $F --procs 16 --inflater isal
  timed "floor 1 proc" python3 benchmarks/decode_floor.py $F
done 2>&1 | tee $OUT/runs.txt
cmp /tmp/o.json /tmp/o_old.json > $OUT/cmp.txt 2>&1 && echo "same JSON" >> $OUT/cmp.txt
