"""How long the replay model takes (analysis.replay), per committed fixture: building
each rank's graph, one replay of every rank, and the whole what-if table. Prints a
table; a benchmark, not a timed test (target: one rank's step well under a second).

    python benchmarks/bench_replay.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURES = ["h200_llama3_3b_2layers_tp2/domino", "h200_llama3_3b_2layers_tp2/tp",
            "h200_two_stream", "cpu_gloo_tp2/tp", "cpu_gloo_tp2/domino"]  # fmt: skip


def main() -> int:
    import pandas as pd

    from domino_prof.analysis.classify import classify, trace_mode
    from domino_prof.analysis.config import AnalysisConfig
    from domino_prof.analysis.ranks import rank_comm
    from domino_prof.analysis.rankwise import split_ranks
    from domino_prof.analysis.replay import Model, couple, rank_graph, whatif
    from domino_prof.trace import load_trace

    print(f"{'fixture':40} {'nodes':>7} {'build s/rank':>12} {'replay s':>9} {'what-if s':>9}")
    for f in FIXTURES:
        tr = load_trace(ROOT / "tests" / "data" / f)
        mode = trace_mode(tr.events)
        gs, cs, tb = [], [], []
        for r, t in split_ranks(tr):
            cl = classify(t, AnalysisConfig(), mode=mode)
            t0 = time.perf_counter()
            gs.append(rank_graph(t.events, cl.intervals, rank=r, mode=mode,
                                 reference=cl.reference))  # fmt: skip
            tb.append(time.perf_counter() - t0)
            cs.append(rank_comm(t, cl.intervals))
        comm = pd.concat(cs, ignore_index=True)
        m = Model(gs, *couple(gs, comm))
        t0 = time.perf_counter()
        m.replay()
        t_rep = time.perf_counter() - t0
        t0 = time.perf_counter()
        whatif(gs, comm=comm)
        t_wi = time.perf_counter() - t0
        n = sum(len(g.start) for g in gs)
        print(f"{f:40} {n:7d} {max(tb):12.3f} {t_rep:9.3f} {t_wi:9.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
