"""Print the stream-switch / launch / cross-rank figures of analysis.json files side by
side (markdown), e.g. for reports/<run>/overheads.md:

    python benchmarks/overheads_summary.py reports/h200x2-llama3-3b-tp2-seq4096
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROWS = [
    ("step ms (profiled)", lambda a, o: a["totals"]["step_ms"]),
    ("hidden %", lambda a, o: a["totals"]["hidden_pct"]),
    ("exposed comm ms/step", lambda a, o: a["totals"]["exposed_ms_per_step"]),
    ("stream-switch edges", lambda a, o: o["stream_switches"]["n_edges"]),
    (
        "  of them inferred / unresolved",
        lambda a, o: (
            f"{o['stream_switches']['n_inferred']} / {o['stream_switches']['n_unresolved']}"
        ),
    ),
    (
        "switch idle (switch_gap) ms/step",
        lambda a, o: o["stream_switches"]["switch_gap_ms_per_step"],
    ),
    ("switch_cpu ms/step", lambda a, o: o["stream_switches"]["switch_cpu_ms_per_step"]),
    ("blocking host syncs ms/step", lambda a, o: o["stream_switches"]["blocking_sync_ms_per_step"]),
    ("launch calls", lambda a, o: o["launches"]["n_launched"]),
    ("launch host time ms/step", lambda a, o: o["launches"]["launch_cpu_ms_per_step"]),
    (
        "device idle waiting for the host ms/step",
        lambda a, o: o["launches"]["host_bound_device_idle_ms_per_step"],
    ),
    ("tiny-kernel share", lambda a, o: o["launches"]["tiny_share"]),
    ("CUDA-graph candidate runs", lambda a, o: o["launches"]["n_graph_candidates"]),
    ("cross-rank arrival skew ms/step", lambda a, o: o["across_ranks"]["skew_ms_per_step"]),
    ("late rank", lambda a, o: o["across_ranks"]["late_rank"]),
]


def fmt(v) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def main(run_dir: str) -> None:
    modes = [m for m in ("tp", "domino") if (Path(run_dir) / m / "analysis.json").exists()]
    docs = {m: json.loads((Path(run_dir) / m / "analysis.json").read_text()) for m in modes}
    print(f"| {run_dir} | " + " | ".join(modes) + " |")
    print("|---|" + "---|" * len(modes))
    for name, get in ROWS:
        cells = []
        for m in modes:
            try:
                cells.append(fmt(get(docs[m], docs[m]["overheads"])))
            except (KeyError, TypeError):
                cells.append("n/a")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    for d in sys.argv[1:]:
        main(d)
        print()
