"""HTA critical-path analysis (traceinsight) of a trace directory, per rank, for the side by
side with analysis.replay.critical_path (not a test: slow, 2-7 s per rank on the fixtures).

    python benchmarks/hta_critical_path.py tests/data/h200_llama3_3b_2layers_tp2/domino
"""
import sys, time, shutil, tempfile, gzip, os, glob
from hta.trace_analysis import TraceAnalysis
src = sys.argv[1]
d = tempfile.mkdtemp()
for f in glob.glob(src + '/*.json.gz'):
    shutil.copy(f, d)
t0 = time.time()
ta = TraceAnalysis(trace_dir=d)
print('load', round(time.time()-t0, 2))
for r in (0, 1):
    t0 = time.time()
    try:
        cp, ok = ta.critical_path_analysis(rank=r, annotation="ProfilerStep", instance_id=None)
        s = cp.summary()
        print('rank', r, 'ok', ok, round(time.time()-t0, 2)); print(s)
    except Exception as e:
        print('rank', r, 'failed', type(e).__name__, str(e)[:200])
