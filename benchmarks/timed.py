"""One whole-process timing line, for the one-off device scripts under reports/:

    python3 benchmarks/timed.py LABEL CMD [ARG ...]

prints ``LABEL rc N wall S cpu S maxrss_mb M <last line of CMD's stdout>``: wall time,
CPU (user + sys) of the waited-for processes and the largest single process's max RSS.
"""

import resource
import subprocess
import sys
import time

t = time.perf_counter()
r = subprocess.run(sys.argv[2:], capture_output=True, text=True)
w = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
last = r.stdout.strip().splitlines()[-1][:150] if r.stdout.strip() else ""
print(f"{sys.argv[1]:<22} rc {r.returncode} wall {w:.2f} cpu {ru.ru_utime + ru.ru_stime:.2f} "
      f"maxrss_mb {ru.ru_maxrss / 1024:.0f} {last}", flush=True)  # fmt: skip
