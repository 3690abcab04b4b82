"""The headline shape's options for benchmarks that build run's own runners in-process
(bench_rope_ab.py, bench_after_profile.py): llama3-3b, TP 8 emulated, seq 4096, mbs 2 on
CUDA by default, and the RunConfig they make (``run``'s defaults for everything else)."""

from __future__ import annotations


def add_shape_args(ap) -> None:
    ap.add_argument("--model", default="llama3-3b")
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--mbs", type=int, default=2)
    ap.add_argument("--comm", default="emulate")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run (tiny model, tp 1, gloo)")


def run_config(a, modes: tuple[str, ...], **fields):
    """run's RunConfig for the parsed shape options ``a`` and ``modes``."""
    from domino_prof.reference_model.config import RunConfig

    return RunConfig.from_options(device=a.device, model=a.model, layers=a.layers, tp=a.tp,
                                  seq=a.seq, mbs=a.mbs, comm=a.comm, modes=modes,
                                  **fields)  # fmt: skip
