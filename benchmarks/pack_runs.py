"""Pack run directories into tarballs that fit the device tool's return limits (at most 8
files, 16 MiB each): stdlib only (the GPU image has no msgspec / plotly).

Every run directory's small files (run.json, config.json, logs/, analysis.json) go into
``--out`` (one tarball, paths ``<name>/...`` relative to ``--root``). Trace files
(``*.pt.trace.json.gz``) go into ``--traces`` tarballs (``--traces`` may be the same
file as ``--out``) in priority order — the runs as given, and per run the modes in
``--mode-order`` — until a tarball reaches ``--cap-mib``; the next tarball of the
``--traces`` pattern (``{i}``) is opened, up to ``--max-tarballs``. Traces that do not
fit are listed in ``MANIFEST.json`` inside ``--out`` (never silently dropped), as are
the sizes packed. ``--traces-for`` limits which runs' traces are packed at all (a glob
on the run's name, e.g. ``*-r1``: one repeat's traces, the others' run.json only).

    python3 benchmarks/pack_runs.py --root /tmp/emu-table --out $OUT/table.tar.gz \
        --traces '$OUT/table-traces-{i}.tar.gz' --max-tarballs 2 --traces-for '*-r1'
"""

from __future__ import annotations

import argparse
import fnmatch
import io
import json
import tarfile
from pathlib import Path

TRACE_SUFFIX = ".pt.trace.json.gz"
MODE_ORDER = "domino,tp,nocomm,domino-sp,sp"


def _add(tar: tarfile.TarFile, path: Path, arcname: str) -> None:
    tar.add(str(path), arcname=arcname, recursive=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", required=True, help="directory holding the run directories")
    ap.add_argument("--out", required=True, help="tarball of the small files + MANIFEST.json")
    ap.add_argument("--traces", default="", help="trace tarball(s); '{i}' numbers them")
    ap.add_argument("--traces-for", default="*", help="glob on run names whose traces go")
    ap.add_argument("--cap-mib", type=float, default=15.0)
    ap.add_argument("--max-tarballs", type=int, default=1)
    ap.add_argument("--mode-order", default=MODE_ORDER)
    a = ap.parse_args()
    root = Path(a.root)
    runs = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    order = a.mode_order.split(",")
    manifest: dict = {"runs": [r.name for r in runs], "traces": [], "omitted": []}
    traces: list[tuple[Path, str]] = []
    with tarfile.open(a.out, "w:gz") as small:
        for run in runs:
            for f in sorted(run.rglob("*")):
                if f.is_file() and not f.name.endswith(TRACE_SUFFIX) and f.suffix != ".pftrace":
                    _add(small, f, str(f.relative_to(root)))
            if not fnmatch.fnmatch(run.name, a.traces_for):
                continue
            found = sorted(run.rglob("*" + TRACE_SUFFIX))
            rank = {m: i for i, m in enumerate(order)}
            found.sort(key=lambda f: rank.get(f.parent.name, len(order)))
            traces += [(f, str(f.relative_to(root))) for f in found]
        # traces: mode priority across runs (every run's domino first, then tp, ...)
        rank = {m: i for i, m in enumerate(order)}
        traces.sort(key=lambda t: rank.get(t[0].parent.name, len(order)))
        cap = int(a.cap_mib * 2**20)
        shared = a.traces == a.out  # traces inside --out itself, up to the cap
        used, cur, cur_size = 0, None, 0
        for f, arc in traces:
            n = f.stat().st_size
            if shared:
                if cur_size + n > cap:
                    manifest["omitted"].append({"file": arc, "bytes": n})
                    continue
                _add(small, f, arc)
                cur_size += n
                manifest["traces"].append({"file": arc, "bytes": n, "tarball": a.out})
                continue
            if cur is None or cur_size + n > cap:
                if cur is not None:
                    cur.close()
                    cur = None
                if not a.traces or used >= a.max_tarballs or n > cap:
                    manifest["omitted"].append({"file": arc, "bytes": n})
                    continue
                used += 1
                name = a.traces.format(i=used)
                cur, cur_size = tarfile.open(name, "w:gz"), 0
            _add(cur, f, arc)
            cur_size += n
            manifest["traces"].append({"file": arc, "bytes": n, "tarball": Path(name).name})
        if cur is not None:
            cur.close()
        data = json.dumps(manifest, indent=1).encode()
        info = tarfile.TarInfo("MANIFEST.json")
        info.size = len(data)
        small.addfile(info, io.BytesIO(data))
    print(f"packed {len(runs)} runs, {len(manifest['traces'])} traces "
          f"({sum(t['bytes'] for t in manifest['traces']) / 2**20:.1f} MiB), "
          f"{len(manifest['omitted'])} omitted (MANIFEST.json)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
