"""The headline shape's options for benchmarks that build run's own runners in-process
(bench_rope_ab.py, bench_after_profile.py, bench_carveout_eager.py, host_profile.py):
llama3-3b, TP 8 emulated, seq 4096, mbs 2 on CUDA by default, the RunConfig they make
(``run``'s defaults for everything else), the words and JSON that name that shape, and
the ABAB loop of one runner under two settings."""

from __future__ import annotations

# the headline shape on CUDA; --device cpu's dry run (emulated collectives need a GPU)
SHAPE_DEFAULTS = {"cuda": {"model": "llama3-3b", "tp": 8, "seq": 4096, "comm": "emulate"},
                  "cpu": {"model": "tiny", "tp": 1, "seq": 64, "comm": "gloo"}}  # fmt: skip


def add_shape_args(ap) -> None:
    """The shape options; --model, --tp, --seq and --comm default by --device
    (``SHAPE_DEFAULTS``; :func:`run_config` fills them in)."""
    ap.add_argument("--model", default=None, help="default llama3-3b (CPU: tiny)")
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--tp", type=int, default=None, help="default 8 (CPU: 1)")
    ap.add_argument("--seq", type=int, default=None, help="default 4096 (CPU: 64)")
    ap.add_argument("--mbs", type=int, default=2)
    ap.add_argument("--comm", default=None, help="default emulate (CPU: gloo)")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run (tiny model, tp 1, gloo)")


def headline_device(a):
    """The torch device of the parsed ``--device``: CUDA device 0, made current, or CPU."""
    import torch

    if a.device != "cuda":
        return torch.device("cpu")
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    return device


def device_name(device) -> str:
    """The GPU's name, or "CPU"."""
    import torch

    return torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"


def shape_text(cfg) -> str:
    """The shape a benchmark's header names: model, layers, TP and its collectives
    ("emulated collectives" for --comm emulate: every TP >= 2 figure of one GPU is)."""
    comm = "emulated collectives" if cfg.emulated else cfg.comm
    return (f"{cfg.model.name}, {cfg.model.n_layers} layers, TP {cfg.tp} ({comm}), seq "
            f"{cfg.seq}, mbs {cfg.mbs}")  # fmt: skip


def shape_json(cfg) -> dict:
    """The same shape as a benchmark's JSON records it."""
    return {"model": cfg.model.name, "layers": cfg.model.n_layers, "tp": cfg.tp,
            "comm": cfg.comm, "seq": cfg.seq, "mbs": cfg.mbs}  # fmt: skip


def run_config(a, modes: tuple[str, ...], **fields):
    """run's RunConfig for the parsed shape options ``a`` and ``modes``, with its attention
    kernel set process-wide (``units.set_attention``), as run's worker sets it before it
    builds a mode."""
    from domino_prof.reference_model import units
    from domino_prof.reference_model.config import RunConfig

    dflt = SHAPE_DEFAULTS["cuda" if a.device == "cuda" else "cpu"]
    for k, v in dflt.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    cfg = RunConfig.from_options(device=a.device, model=a.model, layers=a.layers, tp=a.tp,
                                 seq=a.seq, mbs=a.mbs, comm=a.comm, modes=modes,
                                 **fields)  # fmt: skip
    units.set_attention(cfg.attention)
    return cfg


def abab(mr, sides: dict, pairs: int, block: int = 1) -> dict:
    """One runner's eager steps under two settings, alternating block by block (A B, then
    B A, ...), so the host's speed, which on the lent GPU hosts changes about 2x within a
    run (reports/emulated-h100-2026-12-07d), is the same for the two halves of a pair.
    ``sides``: {name: a callable that puts the setting in force}, two of them; each
    half is run's own timed block of ``block`` steps (``ModeRun.timed_block``: one step,
    synchronised, a host probe after it, by default). Returns {name: {wall, issue, cpu,
    probe: [ms per pair]}}: of each half, the median of its steps' walls, issues and CPU
    times and the mean of its probes (one step: that step's)."""
    import statistics

    kinds = tuple(sides)
    res = {k: {"wall": [], "issue": [], "cpu": [], "probe": []} for k in kinds}
    for i in range(pairs):
        for kind in kinds if i % 2 == 0 else kinds[::-1]:
            sides[kind]()
            mr.timed_block(block)
            r = res[kind]
            r["wall"].append(statistics.median(mr.blocks[-1]))
            r["issue"].append(statistics.median(mr.issue_blocks[-1]))
            r["cpu"].append(statistics.median(mr.issue_cpu_blocks[-1]))
            r["probe"].append(statistics.fmean(mr.probe_blocks[-1]))
    return res


def ratio_rows(res: dict, a: str, b: str) -> dict:
    """Print and return, per measure, the medians of sides ``a`` and ``b`` and the pair
    ratios b / a (min / median / max), as bench_rope_ab.py's JSON has them."""
    import statistics

    print(f"{'':8s} {a + ' med':>10s} {b + ' med':>10s}   ratio min / median / max")
    row = {}
    for what in ("wall", "issue", "cpu", "probe"):
        ra, rb = res[a][what], res[b][what]
        ratios = [y / x for y, x in zip(rb, ra)]
        row[what] = {f"{a}_ms": statistics.median(ra), f"{b}_ms": statistics.median(rb),
                     "ratio_min": min(ratios), "ratio_median": statistics.median(ratios),
                     "ratio_max": max(ratios), f"{a}_all": ra, f"{b}_all": rb}  # fmt: skip
        print(f"{what:8s} {statistics.median(ra):10.2f} {statistics.median(rb):10.2f}   "
              f"{min(ratios):.3f} / {statistics.median(ratios):.3f} / {max(ratios):.3f}")
    return row
