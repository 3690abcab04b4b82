"""Write docs/RESULTS.md from the committed JSON under reports/ (run.json files, benchmark
summaries): every number in it is read from its source file, so none can drift from it.

    python3 scripts/gen_results.py            # rewrite docs/RESULTS.md
    python3 scripts/gen_results.py --check    # exit 1 if the committed file differs

tests/test_results_doc.py runs the check. Adding a section is one entry of SECTIONS: a
title, the machine and date, a renderer (a function of this file) with its arguments
(files or globs under reports/), and a short text (no numbers: those belong in a table).
A section of emulated collectives says "emulated" in its title and on every row (every
TP >= 2 figure from one GPU is). Torch-free: only the standard library and
``domino_prof.rundata`` (the same ratios and verdicts `run` prints).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without an install

from domino_prof.rundata import comm_label, mode_ratio, verdict_text  # noqa: E402
from domino_prof.reference_model import modes as _modes  # noqa: E402

OUT = ROOT / "docs" / "RESULTS.md"


# --------------------------------------------------------------------------- helpers
def _files(spec: str | list[str]) -> list[Path]:
    """The files of a glob (or list of globs) under the repository, sorted; one that
    matches nothing is an error (a renamed report must not empty a table silently)."""
    out: list[Path] = []
    for g in [spec] if isinstance(spec, str) else spec:
        got = sorted(ROOT.glob(g))
        if not got:
            raise SystemExit(f"gen_results: {g} matches no file under {ROOT}; fix SECTIONS")
        out += got
    return out


def _load(p: Path) -> dict:
    return json.loads(p.read_text(encoding="utf-8"))


def _rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def _link(p: Path) -> str:
    return f"[`{_rel(p)}`](../{_rel(p)})"


def _f(x: float | None, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def _range(values: list[float], spec: str) -> str:
    """median [min–max] of the values ('n/a' for none; the value alone for one)."""
    v = [x for x in values if x is not None]
    if not v:
        return "n/a"
    if len(v) == 1:
        return format(v[0], spec)
    return f"{format(statistics.median(v), spec)} [{format(min(v), spec)}–{format(max(v), spec)}]"


def _stat(d: dict | None, spec: str) -> str:
    """A benchmark's {median, min, max, n} as 'median [min–max]'."""
    if not isinstance(d, dict) or d.get("median") is None:
        return "n/a"
    return f"{format(d['median'], spec)} [{format(d['min'], spec)}–{format(d['max'], spec)}]"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers),
            *("| " + " | ".join(r) + " |" for r in rows)]  # fmt: skip


def _ratio(run: dict, mode: str, base: str, *, interval: bool = False) -> str:
    r = mode_ratio(run.get("modes") or {}, mode, base)
    if r is None:
        return "n/a"
    if interval and r.low is not None:
        return f"{r.value:.3f} [{r.low:.3f}, {r.high:.3f}]"
    return f"{r.value:.3f}"


def _hidden(run: dict, mode: str) -> float | None:
    return ((run.get("modes") or {}).get(mode) or {}).get("hidden_pct")


def _lanes_env(lanes: dict | None) -> list[str]:
    """A run.json's ``lanes`` (--mb-streams 2) as the environment settings that differ
    from the defaults (config.lane_phases / lane_priorities / lane_comm / lane_lock)."""
    env = []
    if lanes and lanes.get("phases", ["fwd", "bwd"]) != ["fwd", "bwd"]:
        env.append(f"DOMINO_PROF_LANE_PHASES={','.join(lanes['phases'])}")
    if lanes and lanes.get("priority", [-100, 0]) != [-100, 0]:
        env.append(f"DOMINO_PROF_LANE_PRIORITY={','.join(map(str, lanes['priority']))}")
    if lanes and lanes.get("comm", "shared") != "shared":
        env.append(f"DOMINO_PROF_LANE_COMM={lanes['comm']}")
    # run.json has no "lock" before the knob existed: those lanes ran unlocked ("off");
    # "dgrad" is the default since reports/emulated-h100-2026-12-06b
    if lanes and lanes.get("lock", "off") != "dgrad":
        env.append(f"DOMINO_PROF_LANE_LOCK={lanes.get('lock', 'off')}")
    return env


def _side_env(doc: dict) -> list[str]:
    """A run.json's ``side_stream`` (DOMINO_PROF_SIDE_PRIORITY, recorded when not the
    default) as its environment setting."""
    prio = (doc.get("side_stream") or {}).get("priority")
    return [f"DOMINO_PROF_SIDE_PRIORITY={prio}"] if prio else []


def _auto_carveout_applies(cfg: dict) -> bool:
    """Whether --carveout-auto (carveout.auto_carveout) acts on a run.json's config: a
    micro-batched SP mode over emulated SM collectives on CUDA, no --sm-carveout. Eager
    runs too, although auto_carveout gives them none since 2026-12-07 (f): the rows before
    then rendered `--no-carveout-auto` where it was off, and that command still runs as
    they did (eager: no carveout either way)."""
    specs = [_modes.get(m).spec for m in cfg.get("modes", ())
             if m in _modes.names() and _modes.get(m).comm != "skip"]  # fmt: skip
    return (cfg.get("device") == "cuda" and cfg.get("comm") == "emulate"
            and cfg.get("comm_engine", "sm") == "sm" and cfg.get("sm_carveout") is None
            and any(s.micro_batched and s.sequence_parallel for s in specs))  # fmt: skip


def _knob_flags(cfg: dict) -> list[str]:
    """The flags of issue 34's knobs a run.json's config set (absent before them)."""
    parts = []
    sizes = cfg.get("split_sizes")
    if sizes and len(set(sizes)) > 1:  # uneven (TokenWeave-style); even sizes are --splits
        parts.append(f"--split-sizes {','.join(str(n) for n in sizes)}")
    elif cfg.get("splits", 2) != 2:
        parts.append(f"--splits {cfg['splits']}")
    if cfg.get("wgrad_in", "joint") != "joint":
        parts.append(f"--wgrad-in {cfg['wgrad_in']}")
    sp = any(_modes.get(m).sequence_parallel for m in cfg.get("modes", ()) if m in _modes.names())
    # run.json has no sp_wgrad_input before the knob: those SP modes gathered again
    # ("regather"); keep is the default since reports/emulated-h100-2026-12-07b
    how = cfg.get("sp_wgrad_input", "regather")
    if sp and how != "keep":
        parts.append(f"--sp-wgrad-input {how}")
    # nor sp_residual before its knob: those added the residual in the chain; fold is the
    # default since reports/emulated-h100-2026-12-07c
    res = cfg.get("sp_residual", "chain")
    if sp and res != "fold":
        parts.append(f"--sp-residual {res}")
    if cfg.get("mb_streams", 1) != 1:
        parts.append(f"--mb-streams {cfg['mb_streams']}")
    if cfg.get("attention", "auto") != "auto":
        parts.append(f"--attention {cfg['attention']}")
    if cfg.get("col_splits", 1) != 1:
        parts.append(f"--col-splits {cfg['col_splits']}")
    if cfg.get("comm_ctas") is not None:
        parts.append(f"--comm-ctas {cfg['comm_ctas']}")
        if cfg.get("comm_ctas_scope", "all") != "all":
            parts.append(f"--comm-ctas-scope {cfg['comm_ctas_scope']}")
    if cfg.get("sm_carveout") is not None:
        parts.append(f"--sm-carveout {cfg['sm_carveout']}")
        if cfg.get("carveout_scope", "overlap") != "overlap":
            parts.append(f"--carveout-scope {cfg['carveout_scope']}")
    elif not cfg.get("carveout_auto", False) and _auto_carveout_applies(cfg):
        # run.json has no carveout_auto before the knob (on since emulated-h100-2026-12-07c)
        parts.append("--no-carveout-auto")
    if cfg.get("overlap_gemm", "cublas") != "cublas":
        parts.append(f"--overlap-gemm {cfg['overlap_gemm']}")
    if cfg.get("high_priority_comm"):
        parts.append("--high-priority-comm")
    elif cfg.get("device") == "cuda":  # on by default on CUDA since 2026-12-07: say it was off
        parts.append("--no-high-priority-comm")
    # run.json has no timing before the knob: each step was timed alone (step); on CUDA
    # the default is stream since 2026-12-07 (i) (config._resolve_timing), so a step-timed
    # CUDA row says so; on CPU both read the host's clock around a synchronous step: not
    # named there
    timing = cfg.get("timing", "step")
    if cfg.get("device") == "cuda" and timing != "stream":
        parts.append(f"--timing {timing}")
    return parts


def _command(cfg: dict, comm: dict | None = None, lanes: dict | None = None) -> str:
    """The `domino-prof run` flags of a run.json's config that differ from the tiny CPU
    default (enough to re-run it); with the run's ``comm`` block, the copy-engine model's
    environment overrides where they differ from today's defaults (emulation/ce.py), and
    with its ``lanes`` block, the micro-batch lanes' (--mb-streams 2)."""
    model = cfg.get("model") or {}
    name = model.get("name") if isinstance(model, dict) else model
    env = _lanes_env(lanes)
    ce_used = (comm or {}).get("ce") or {}
    if ce_used:
        from domino_prof.emulation.ce import CeParams

        now = CeParams()
        if ce_used.get("pace", now.pace) != now.pace:
            env.append(f"DOMINO_PROF_CE_PACE={ce_used['pace']}")
        if ce_used.get("bw_gbps", now.bw_gbps) != now.bw_gbps:
            env.append(f"DOMINO_PROF_CE_GBPS={ce_used['bw_gbps']:g}")
    parts = [*env, "domino-prof run"]
    if cfg.get("tp", 2) != 2:
        parts.append(f"--tp {cfg['tp']}")
    if cfg.get("seq", 128) != 128:
        parts.append(f"--seq {cfg['seq']}")
    if name and name != "tiny":
        parts.append(f"--model {name}")
    if cfg.get("mbs", 2) != 2:
        parts.append(f"--mbs {cfg['mbs']}")
    if cfg.get("comm") == "emulate":
        parts.append("--comm emulate")
    if cfg.get("comm_engine", "sm") != "sm":
        parts.append(f"--comm-engine {cfg['comm_engine']}")
    parts += _knob_flags(cfg)
    if cfg.get("cuda_graphs"):
        parts.append("--cuda-graphs")
        if cfg.get("graph_scope") == "segment":  # the default is step since 2026-12-03c
            parts.append("--graph-scope segment")
    if cfg.get("compile"):
        parts.append("--compile")
    return " ".join(parts)


# --------------------------------------------------------------------------- renderers
def run_comparison(*, run: str) -> list[str]:
    """One run.json's side-by-side table of modes, its verdict and how it was run."""
    (p,) = _files(run)
    doc = _load(p)
    label = comm_label(doc)
    cfg = doc.get("config") or {}
    rows = []
    for r in doc.get("comparison") or []:
        rows.append([r["mode"], _f(r["step_ms"], ".2f"), _f(r.get("hidden_pct"), ".1f"),
                     _f(r.get("speedup_vs_tp"), ".3f"), _f(r.get("frac_of_nocomm"), ".3f")])  # fmt: skip
    steps = cfg.get("timed_steps")
    out = [f"`{_command(cfg, doc.get('comm'), doc.get('lanes'))}` ({steps} timed steps per mode in blocks of "
           f"{cfg.get('block_steps')}, modes interleaved), {_link(p)}"
           f"{'; ' + label if label else ''}:", ""]  # fmt: skip
    out += _table(["mode", "timed step ms", "hidden %", "speedup vs tp", "of nocomm"], rows)
    out += ["", f"Verdict: {verdict_text(doc.get('verdict') or [])}."]
    return out


def run_verdicts(*, runs: str | list[str]) -> list[str]:
    """One row per run directory: the command, domino / tp with its interval and word,
    domino / nocomm, domino's hidden %, domino-sp / sp."""
    rows = []
    for p in _files(runs):
        doc = _load(p)
        v = {x["mode"]: x for x in doc.get("verdict") or []}
        dom = v.get("domino")
        word = f" ({dom['word']})" if dom else ""
        label = comm_label(doc) or "real comm"
        rows.append([f"`{_command(doc.get('config') or {}, doc.get('comm'), doc.get('lanes'))}`", label,
                     _ratio(doc, "domino", "tp", interval=True) + word,
                     _ratio(doc, "domino", "nocomm"), _f(_hidden(doc, "domino"), ".1f"),
                     _ratio(doc, "domino-sp", "sp", interval=True), _link(p.parent)])  # fmt: skip
    return _table(["command", "comm", "domino / tp [95% interval]", "domino / nocomm",
                   "hidden %", "domino-sp / sp", "run directory"], rows)  # fmt: skip


def run_limits(*, runs: str | list[str]) -> list[str]:
    """One row per run directory with a measured ``limits`` (domino-nocomm in the run):
    the gap to nocomm per profiled step and its parts (docs/METRICS.md, "what limits
    domino"; the exposed part is exposed comm's step cost where measured, "n/a" in that
    column when not), the residual, the step identity's cross-check and whether the parts
    add up."""
    rows = []
    for p in _files(runs):
        doc = _load(p)
        lim = doc.get("limits") or {}
        if lim.get("method") != "measured":
            continue
        label = comm_label(doc) or "real comm"
        rows.append([f"`{_command(doc.get('config') or {}, doc.get('comm'), doc.get('lanes'))}`", label,
                     _f(lim.get("timed_of_bound"), ".3f"), _f(lim.get("gap_ms"), ".2f"),
                     _f(lim.get("split_ms"), ".2f"), _f(lim.get("exposed_comm_ms"), ".2f"),
                     _f(lim.get("exposed_cost_ms"), ".2f"),
                     _f(lim.get("overlap_tax_ms"), ".2f"), _f(lim.get("host_ms"), ".2f"),
                     _f(lim.get("residual_ms"), ".2f"),
                     _f(lim.get("exposed_in_split_gaps_ms"), ".2f"),
                     {True: "yes", False: "no", None: "n/a"}[lim.get("adds_up")],
                     _link(p.parent)])  # fmt: skip
    return _table(["command", "comm", "domino / nocomm (timed)", "gap ms", "split ms",
                   "exposed ms", "exposed cost ms", "tax ms", "host ms", "residual ms",
                   "exposed in the split's gaps ms", "adds up (5 %)", "run directory"], rows)  # fmt: skip


def run_occupancy(*, runs: str | list[str], key: str = "limits_sp") -> list[str]:
    """One row per run directory with a measured ``key`` (``limits_sp``: domino-sp's; or
    ``limits``): the gap to nocomm per profiled step counted by occupancy
    (docs/METRICS.md, what limits domino, 2026-12-08: split + compute held longer + time
    without compute = gap), read from the stored figures by ``limits.occupancy`` (a
    run.json from before the keys gets the same numbers), beside the exposed comm's step
    cost and the host."""
    from domino_prof.analysis.limits import occupancy

    rows = []
    for p in _files(runs):
        doc = _load(p)
        lim = doc.get(key) or {}
        if lim.get("method") != "measured":
            continue
        occ = occupancy(lim)
        rows.append([f"`{_command(doc.get('config') or {}, doc.get('comm'), doc.get('lanes'))}`",
                     _f(lim.get("timed_of_bound"), ".3f"), _f(lim.get("gap_ms"), ".2f"),
                     _f(lim.get("split_ms"), ".2f"), _f(occ["occupancy_added_ms"], ".2f"),
                     _f(occ["kernel_time_added_ms"], ".2f"), _f(occ["concurrency_lost_ms"], ".2f"),
                     _f(occ["no_compute_added_ms"], ".2f"), _f(lim.get("exposed_cost_ms"), ".2f"),
                     _f(lim.get("host_ms"), ".2f"), _link(p.parent)])  # fmt: skip
    mode = "domino-sp" if key == "limits_sp" else "domino"
    return _table(["command", f"{mode} / nocomm (timed)", "gap ms", "split ms",
                   "compute held longer ms", "of it: kernel time ms",
                   "of it: beside compute, lost ms", "time without compute added ms",
                   "exposed cost ms", "host ms", "run directory"], rows)  # fmt: skip


_RUN_NAME = re.compile(r"(?P<model>.+)-tp(?P<tp>\d+)-(?P<variant>eager|graphs)-r(?P<rep>\d+)$")


def _stand_in(doc: dict) -> str:
    """The emulated kernel of a run (run.json's comm.kernel; runs from before the field
    had only the first one, the burst kernel)."""
    c = doc.get("comm") or {}
    return c.get("kernel") or "burst (before the field)"


def run_repeats(*, runs: str | list[str], kernel: bool = False) -> list[str]:
    """Run directories named <model>-tp<R>-<eager|graphs>-r<k>: per (model, R, variant) the
    median [range] over the repeats of domino's timed step and its ratios; hidden %: the
    repeats that were analysed (n_h). ``kernel``: the emulated stand-in is a column and a
    part of the group (old and new side by side)."""
    groups: dict[tuple, list[dict]] = {}
    for p in _files(runs):
        m = _RUN_NAME.match(p.parent.name)
        if m is None:
            raise SystemExit(f"gen_results: {p.parent.name} is not <model>-tp<R>-<variant>-r<k>")
        doc = _load(p)
        key = (m["model"], (doc["config"].get("model") or {}).get("n_layers"), int(m["tp"]),
               m["variant"], _stand_in(doc) if kernel else "")  # fmt: skip
        groups.setdefault(key, []).append(doc)
    order = {"llama3-3b": 0, "llama3-8b": 1, "llama3-70b": 2}
    rows = []
    for (model, layers, tp, variant, stand_in), docs in sorted(
        groups.items(),
        key=lambda kv: (order.get(kv[0][0], 9), kv[0][0], kv[0][2], kv[0][3], kv[0][4]),
    ):
        modes = [d["modes"] for d in docs]

        def ratio(mode: str, base: str, modes: list = modes) -> str:
            vals = [r.value for m in modes if (r := mode_ratio(m, mode, base)) is not None]
            return _range(vals, ".3f")

        hid = [h for d in docs if (h := _hidden(d, "domino")) is not None]
        labels = {comm_label(d) or "real comm" for d in docs}
        rows.append([f"{model} ({layers})", str(tp), variant, " / ".join(sorted(labels)),
                     *([stand_in] if kernel else []),
                     str(len(docs)), _range([m["domino"]["step_ms"] for m in modes], ".1f"),
                     ratio("domino", "tp"), ratio("domino", "nocomm"), ratio("nocomm", "tp"),
                     f"{_range(hid, '.1f')} ({len(hid)})"])  # fmt: skip
    return _table(["model (layers)", "TP", "variant", "comm", *(["stand-in"] if kernel else []),
                   "n", "domino ms", "domino / tp", "domino / nocomm", "nocomm / tp",
                   "hidden % (n_h)"], rows)  # fmt: skip


# the sweep-wide flags (tune.json's base_flags) a row names: (flag, takes a value)
_TUNE_EXTRAS = (("--high-priority-comm", False), ("--carveout-scope", True), ("--compile", False),
                ("--comm-ctas-scope", True))


def tune_rows(*, runs: str | list[str]) -> list[str]:
    """`domino-prof tune`'s tune.json files: one row per candidate, its model, layers and
    mbs, the settings (prefixed by the schedule tuned where it is not domino: its figures
    stand in the domino columns), domino's timed step, domino / nocomm, domino / domino-nocomm and
    domino / best tp (tp at its own best settings in that sweep, at the candidate's mbs:
    ``best_tp_ms``; a sweep from before that field has one mbs, its ``best_tp``)."""
    rows = []
    for p in _files(runs):
        doc = _load(p)
        cfg = doc.get("config") or {}
        model = cfg.get("model") or {}
        label = (doc.get("comm") or {}).get("label") or "real comm"
        best = (doc.get("best_tp") or {}).get("step_ms")
        base = doc.get("base_flags") or []
        extra = "".join(f", {flag.removeprefix('--').replace('-', ' ')}"
                        + (f" {base[i + 1]}" if arg else "")
                        for i, flag in enumerate(base)
                        for name, arg in _TUNE_EXTRAS if flag == name)  # fmt: skip
        # `tune --schedule domino-sp`: the "domino" figures are that schedule's
        sched = doc.get("schedule", "domino")
        pre = "" if sched == "domino" else f"**{sched}**: "
        for c in sorted(doc.get("candidates") or [], key=lambda c: c.get("rank") or 99):
            if c.get("status") != "ok":
                continue
            rows.append([f"{model.get('name')} ({model.get('n_layers')})", str(cfg.get("mbs")),
                         pre + c["settings_text"] + extra, label,
                         _f(c.get("domino_step_ms"), ".1f"),
                         _f(c.get("frac_of_nocomm"), ".3f"), _f(c.get("of_domino_nocomm"), ".3f"),
                         _f(c.get("vs_best_tp"), ".3f"), _f(c.get("best_tp_ms", best), ".1f"),
                         _link(p.parent)])  # fmt: skip
    return _table(["model (layers)", "mbs", "settings", "comm", "domino ms", "domino / nocomm",
                   "domino / domino-nocomm", "domino / best tp", "best tp ms", "sweep"], rows)  # fmt: skip


def mode_repeats(*, runs: str | list[str], modes: list[str]) -> list[str]:
    """Runs of one config repeated: per (variant, mode) the timed step's median [range] over
    the runs and the speedup over tp / fraction of nocomm of those medians."""
    by: dict[str, list[dict]] = {}
    for p in _files(runs):
        doc = _load(p)
        by.setdefault("CUDA graphs" if doc["config"].get("cuda_graphs") else "eager", []).append(doc)
    rows = []
    for variant in sorted(by, key=lambda v: v != "eager"):
        docs = by[variant]
        med = {m: statistics.median([d["modes"][m]["step_ms"] for d in docs if m in d["modes"]])
               for m in modes if any(m in d["modes"] for d in docs)}  # fmt: skip
        for m in med:
            steps = [d["modes"][m]["step_ms"] for d in docs if m in d["modes"]]
            rows.append([f"{m} ({variant})", str(len(steps)), _range(steps, ".1f"),
                         _f(med["tp"] / med[m] if "tp" in med else None, ".3f"),
                         _f(med["nocomm"] / med[m] if "nocomm" in med else None, ".3f")])  # fmt: skip
    return _table(["mode", "runs", "timed step ms, median [range]", "speedup vs tp",
                   "of nocomm"], rows)  # fmt: skip


def run_rows(*, runs: list[str], modes: list[str],
             ratios: tuple[str, ...] = ("domino/tp", "domino/nocomm")) -> list[str]:
    """One row per run.json: its config, each mode's timed step, and each of ``ratios``
    ("mode/base": mode's speed over base's, from the timed steps of the same run)."""
    pairs = [r.split("/") for r in ratios]
    rows = []
    for p in _files(runs):
        doc = _load(p)
        cfg = doc.get("config") or {}
        model = (cfg.get("model") or {}).get("name")
        ce_used = (doc.get("comm") or {}).get("ce")
        copier = (ce_used or {}).get("copier", "torch")  # DOMINO_PROF_CE_COPY
        engine = (f", copy engines (pace {ce_used.get('pace')}"
                  f"{'' if copier == 'torch' else ', copier ' + copier})" if ce_used
                  else ", copy engines" if cfg.get("comm_engine") == "ce" else "")  # fmt: skip
        rope = ["DOMINO_PROF_ROPE=aten"] if doc.get("rope") == "aten" else []  # on CUDA
        # as rope's: named where run.json says aten (runs since the knob, 2026-12-08); the
        # runs before it ran aten's add and norm too, as RESULTS' sections of that date say
        norm = ["DOMINO_PROF_NORM=aten"] if doc.get("norm") == "aten" and cfg.get(
            "device") == "cuda" else []  # fmt: skip
        knobs = [f"`{k}`" for k in (*_lanes_env(doc.get("lanes")), *_side_env(doc),
                                        *rope, *norm, *_knob_flags(cfg))]  # fmt: skip
        what = (f"{model}, mbs {cfg.get('mbs')}, {'CUDA graphs' if cfg.get('cuda_graphs') else 'eager'}"
                f"{', ' + comm_label(doc) if comm_label(doc) else ''}{engine}"
                f"{', ' + ' '.join(knobs) if knobs else ''}")  # fmt: skip
        rows.append([what, *(_f(((doc["modes"].get(m) or {}).get("step_ms")), ".1f") for m in modes),
                     *(_ratio(doc, a, b) for a, b in pairs), _link(p)])  # fmt: skip
    return _table(["run", *(f"{m} ms" for m in modes), *(f"{a} / {b}" for a, b in pairs), "file"],
                  rows)  # fmt: skip


def bench_schedule(*, file: str) -> list[str]:
    """benchmarks/bench_schedule.py's JSON: wall and issue ms per schedule and variant."""
    (p,) = _files(file)
    rows = []
    for r in _load(p)["rows"]:
        if "wall_ms" not in r:
            continue
        variant = "+".join(x for x, on in (("graphs", r.get("graphs")), ("compile", r.get("compile")))
                           if on) or "eager"  # fmt: skip
        rows.append([r["schedule"], variant, _f(r["wall_ms"], ".1f"), _f(r.get("issue_ms"), ".1f"),
                     _f(r.get("peak_mem_gb"), ".1f")])  # fmt: skip
    return [f"From {_link(p)}:", "", *_table(["schedule", "variant", "wall ms", "issue ms",
                                              "peak GB"], rows)]  # fmt: skip


def whatif(*, files: list[str]) -> list[str]:
    """benchmarks/bench_whatif.py's JSON: the replay's prediction against the run that
    applies the change."""
    rows = []
    for p in _files(files):
        d = _load(p)
        emulated = "emulated" in p.name or "emulated" in str(d.get("trace", ""))
        where = "CPU, gloo" if "cpu" in p.name else "one H200" + (", emulated comm" if emulated else "")
        judged = d.get("sign_judged", True)
        sign = ("right" if d.get("sign_right") else "wrong") if judged else "not judged (noise)"
        rows.append([f"{d['scenario']} ({p.stem})", where, _f(d.get("predicted_step_ms"), ".2f"),
                     _f(d.get("measured_profiled_step_ms"), ".2f"),
                     _f(d.get("measured_timed_step_ms"), ".2f"), _f(d.get("error_pct"), "+.1f"),
                     sign])  # fmt: skip
    return _table(["prediction (file)", "machine", "predicted ms", "measured profiled ms",
                   "measured timed ms", "error %", "sign"], rows)  # fmt: skip


def bench_sets(*, file: str, columns: list[list[str]], skip: tuple = ()) -> list[str]:
    """benchmarks/bench_vs_hta.py's JSON: one row per set, the given (header, key, format)
    statistics as median [min–max] over the repeats."""
    (p,) = _files(file)
    doc = _load(p)
    head = doc.get("head") or {}
    def cell(st: dict, keys: str, spec: str) -> str:  # "a|b": the first key the set has
        return next((_stat(st[k], spec) for k in keys.split("|") if k in st), "n/a")

    rows = [[name, *(cell(st, keys, spec) for _, keys, spec in columns)]
            for name, st in doc["sets"].items() if name not in skip]  # fmt: skip
    return [f"`{head.get('command', '')}`, {head.get('date_utc', '')} UTC, "
            f"{head.get('cores', '?')} cores, {_link(p)}:", "",
            *_table(["set", *(h for h, _, _ in columns)], rows)]  # fmt: skip


def _runs(base: str, dirs: tuple[str, ...]) -> list[str]:
    """The run.json paths of run directories ``dirs`` under ``base``."""
    return [f"{base}/{d}/run.json" for d in dirs]


# --------------------------------------------------------------------------- the manifest
# the full-depth runs of 2026-12-03 14:20-14:50 UTC (two sections read them)
RUNS_03B = _runs("reports/emulated-h200-2026-12-03b", (
    "graphs-paced", "eager-paced", "graphs-8b", "eager-8b", "graphs-mbs4", "graphs-8b-mbs4"))

# the runs of 2026-12-03 17:19-17:37 UTC: a CUDA graph per step against one per segment
RUNS_03C = _runs("reports/emulated-h200-2026-12-03c", (
    "step-1", "seg-1", "step-2", "seg-2", "step-3", "seg-3", "step-compile", "step-8b-2"))

# the runs of 2026-12-04 21:07-21:10 UTC (second call): the SM stand-in, the copy-engine
# one with a wait per copy and per phase, llama3-3b and llama3-8b
RUNS_04D = _runs("reports/emulated-h200-2026-12-04d/call2", (
    "graphs-sm", "graphs-ce", "graphs-ce-phase", "graphs-8b-ce", "graphs-8b-ce-phase"))

# calls 3 and 4 of that day (one lease): the knobs beside the copy engines
RUNS_04D_KNOBS = _runs("reports/emulated-h200-2026-12-04d", (
    "call3/graphs-ce-phase", "call3/ce-carve8", "call3/ce-carve16", "call3/ce-hp",
    "call4/ce-hp-carve16", "call3/8b-ce-hp", "call4/8b-ce-hp-carve16"))

# 2026-12-06, call 1 (one H200): --mb-streams 2 and --wgrad-in accumulate, each beside its
# baseline; call 2 (one H100: no H200 came): the lanes in backward only, and the priorities
RUNS_06 = _runs("reports/emulated-h200-2026-12-06/call1", (
    "ce-joint", "ce-lanes", "ce-acc", "ce-lanes-acc", "sm-joint", "sm-lanes", "8b-ce-joint",
    "8b-ce-lanes"))
RUNS_06_H100 = _runs("reports/emulated-h200-2026-12-06/call2", (
    "ce-joint", "ce-lanes-bwd", "ce-lanes-bwd-eq-hpc", "ce-lanes-eq-hpc", "sm-lanes-bwd"))

# 2026-12-06, a later lease on one H100 (no H200 came), five calls: a comm stream per lane
# (DOMINO_PROF_LANE_COMM=own), the carve-out beside it, the micro-batch size with and without
# --wgrad-in accumulate, llama3-8b, and eager (call2's "ce-joint-b" and "ce-c16-b" were filed
# as 8b rows by mistake and ran llama3-3b: their config.json says so)
_H100_06 = "reports/emulated-h100-2026-12-06"
RUNS_06B_LANES = _runs(_H100_06, (
    "call1/ce-joint", "call1/ce-own", "call1/sm-joint", "call1/sm-own", "call2/ce-joint-b",
    "call2/ce-own-acc", "call4/ce-mbs2-acc", "call2/ce-own-c8", "call2/ce-own-c16",
    "call2/ce-c16", "call2/ce-c16-b", "call2/sm-own-c16"))
RUNS_06B_MBS = _runs(_H100_06, (
    "call2/ce-mbs4", "call3/ce-mbs4-acc", "call5/ce-mbs4-acc-r2", "call5/ce-mbs4-acc-r3",
    "call2/ce-own-mbs4", "call3/ce-own-mbs4-acc", "call3/ce-mbs4-s4", "call2/ce-own-s13",
    "call3/sm-mbs4", "call4/sm-mbs4-acc", "call3/ce-mbs8", "call4/ce-mbs8-acc"))
RUNS_06B_8B = _runs(_H100_06, (
    "call3/8b-ce-mbs2", "call5/8b-ce-mbs2-acc", "call1/8b-ce-own", "call3/8b-ce-mbs4",
    "call4/8b-ce-mbs4-acc"))
RUNS_06B_EAGER = _runs(_H100_06, (
    "call2/eager-sm", "call2/eager-ce-drv", "call2/eager-ce-own-drv"))
# 2026-12-06, a third lease (one H100), four calls: DOMINO_PROF_LANE_LOCK=dgrad beside one
# stream and the unlocked lanes, at mbs 2 and 4, llama3-8b, eager; bench_schedule at tp 1
# (call1's ce-lock and ce-mbs4-acc did not come back: call1/console.txt has their tables);
# "call5" is four short calls on the warm machine (call5/command.sh)
_H100_06B = "reports/emulated-h100-2026-12-06b"
RUNS_06C_LOCK = _runs(_H100_06B, (
    "call1/sm-joint", "call3/sm-joint-r2", "call4/sm-lanes", "call4/sm-lanes-r2",
    "call1/sm-lock", "call3/sm-lock-r2", "call4/sm-lock-r3", "call4/sm-lock-r4",
    "call5/sm-acc", "call5/sm-acc-r2", "call5/sm-lock-acc", "call5/sm-lock-acc-r2",
    "call1/ce-joint", "call1/ce-lanes", "call1/ce-lock-acc", "call5/ce-lock-acc-r2",
    "call1/ce-lock-bwd"))
RUNS_06C_MBS4 = _runs(_H100_06B, (
    "call2/ce-mbs4-acc-r2", "call1/ce-lock-mbs4-acc", "call2/ce-lock-mbs4-acc-r2",
    "call2/sm-mbs4-acc", "call2/sm-lock-mbs4-acc", "call2/8b-ce-mbs4-acc",
    "call3/8b-ce-mbs4-acc-r2", "call2/8b-ce-lock-mbs4-acc", "call3/8b-ce-lock-mbs4-acc-r2"))
RUNS_06C_EAGER = _runs(_H100_06B, (
    "call3/eager-sm", "call4/eager-sm-r2", "call4/eager-sm-lanes", "call3/eager-sm-lock",
    "call4/eager-sm-lock-r2"))
# 2026-12-06, a fourth lease (one H100), five calls: domino-sp with the carve-out, the comm
# stream's priority and its weight gradients joint (sp_step.py; calls 1-2, not listed here,
# ran domino-sp with one weight gradient per micro-batch before that change: the directory's
# README has them); tp at its own best is call5/sm-default's
_H100_06C = "reports/emulated-h100-2026-12-06c"
RUNS_06D_SP = _runs(_H100_06C, (
    "call5/sm-default", "call5/ce-c12-hp-joint-r2", "call5/ce-c12-hp-joint-r3",
    "call5/sm-c12-hp-joint", "call4/ce-c12-hp-joint", "call4/ce-c16-hp-joint-r2",
    "call4/ce-c16-hp-joint-r3", "call4/ce-c16-hp-joint-r4", "call4/ce-c20-hp-joint",
    "call3/ce-c16-hp-joint", "call3/ce-c16-hp-acc", "call3/sm-c16-joint", "call3/sm-c16-acc"))
RUNS_06D_8B = [f"{_H100_06C}/call3/8b-ce-c16-hp-joint/run.json"]
_SP_RATIOS = ("domino/tp", "domino/nocomm", "domino-sp/tp", "domino-sp/sp", "domino-sp/nocomm")
_ALL_MODES = ["tp", "nocomm", "domino", "domino-nocomm", "sp", "domino-sp"]
# 2026-12-07 (one H100, two calls): domino-sp with its own no-comm mode, the comm stream's
# priority (on by default on CUDA since call 2), a backward-only comm CTA budget
_H100_07 = "reports/emulated-h100-2026-12-07"
RUNS_07 = _runs(_H100_07, (
    "call1/sm-default", "call1/sm-default-r2", "call1/sm-hp", "call1/sm-hp-r2",
    "call1/ce-c12-hp", "call2/defaults", "call2/side-hi", "call2/side-hi-r2", "call2/bwd16",
    "call2/bwd12", "call2/side-hi-bwd12"))  # fmt: skip
_SP_MODES = [*_ALL_MODES, "domino-sp-nocomm"]
_H100_07B = "reports/emulated-h100-2026-12-07b"
RUNS_07B = _runs(_H100_07B, (
    "call1/defaults", "call1/defaults-r2", "call1/keep", "call1/keep-r2", "call2/defaults",
    "call2/defaults-r2", "call2/bwd20", "call2/bwd16", "call2/side-hi", "call2/c8",
    "call1/ce-c12-keep", "call2/8b-defaults", "call1/eager", "call1/eager-keep",
    "call2/eager", "call3/defaults", "call3/defaults-r2", "call3/c12", "call3/c12-r2",
    "call3/c16", "call3/c16-r2", "call3/c24", "call3/c16-fwd", "call4/final",
    "call4/final-eager"))  # fmt: skip
# 2026-12-07 (c, one H100, four calls): the residual folded into the reduce-scatter, the
# carve-out in the backward only, and by default for domino-sp (--carveout-auto)
_H100_07C = "reports/emulated-h100-2026-12-07c"
RUNS_07C = _runs(_H100_07C, (
    "call1/defaults", "call1/defaults-r2", "call1/fold", "call1/fold-r2", "call2/chain",
    "call2/defaults", "call2/defaults-r2", "call1/fold-c24", "call1/fold-c24-r2", "call2/c24",
    "call2/c24-bwd", "call2/c24-bwd-r2", "call3/defaults", "call3/defaults-r2",
    "call3/defaults-r3", "call4/defaults-r4", "call3/no-auto", "call3/ce", "call3/eager",
    "call2/8b-defaults", "call4/8b-no-auto", "call4/8b-no-auto-r2", "call3/8b-defaults",
    "call4/8b-auto", "call4/8b-auto-r2"))  # fmt: skip
# 2026-12-07 (d, one H100, three calls): the step under inference mode (base: no_grad at
# 7c0ba19, ABAB in each call), eager steps on a host of two speeds
_H100_07D = "reports/emulated-h100-2026-12-07d"
RUNS_07D = _runs(_H100_07D, (
    "call1/base", "call1/new", "call1/base-r2", "call1/new-r2", "call2/base-pin",
    "call2/new-pin", "call2/base-pin-r2", "call2/new-pin-r2", "call2/new-r3", "call3/cpu-a",
    "call3/cpu-b", "call3/cpu-c", "call3/cpu-d", "call1/new-flash", "call1/new-graphs",
    "call3/cpu-graphs"))  # fmt: skip
# 2026-12-07 (e, one H100, one call): the rotary embedding as one Triton launch (rows
# with DOMINO_PROF_ROPE=aten: aten's rotation, the reference)
_H100_07E = "reports/emulated-h100-2026-12-07e"
RUNS_07E = _runs(_H100_07E, (
    "call1/graphs", "call1/graphs-aten", "call1/graphs-r2", "call1/eager", "call1/eager-aten",
    "call1/eager-r2"))  # fmt: skip
# 2026-12-07 (f, one H100, four calls): run times every mode before profiling any; eager
# steps without the carve-out (--carveout-auto acts with CUDA graphs only since call4)
_H100_07F = "reports/emulated-h100-2026-12-07f"
RUNS_07F = _runs(_H100_07F, (
    "call1/graphs", "call2/graphs", "call4/graphs", "call2/eager", "call3/eager",
    "call3/eager-noauto", "call4/eager"))  # fmt: skip

# the eager rows of 2026-12-07 (g), 16:30-16:33 UTC: 8de298e and 5674d27 (the current-stream
# lookups kept) alternating
RUNS_07G = _runs("reports/emulated-h100-2026-12-07g", (
    "call1/eager-base", "call1/eager-new", "call1/eager-base2", "call1/eager-new2"))  # fmt: skip
# the graph rows of 2026-12-07 (h), 19:05-19:07 UTC, a second H100 host (8a8cd57): each step
# alone and back to back (before 2d0d8f3 each step's token copy synchronized the host, so
# the stream row's host still waited at each step's start; a replayed step barely shows it)
RUNS_07H = _runs("reports/emulated-h100-2026-12-07h", ("call1/graphs-step", "call1/graphs-stream"))
# the graph row of 2026-12-07 (i), 21:40-21:43 UTC, a third H100 host (c4466c4: the token copy
# pinned and non-blocking), back to back (--timing stream, the CUDA default since then)
RUNS_07I = _runs("reports/emulated-h100-2026-12-07i", ("call1/graphs-stream",))
RUNS_08 = _runs("reports/emulated-h100-2026-12-08", ("call2/graphs", "call2/graphs-norm"))

SECTIONS: list[dict] = [
    {
        "title": "The default run on CPU (gloo, tiny, tp 2, every mode)",
        "where": "the project's shared 2-core CPU machine, 2026-12-03",
        "render": run_comparison,
        "args": {"run": "reports/cpu-default-2026-12-03/run.json"},
        "text": "What a new user sees first. On CPU the collectives take the cores the model "
                "runs on, so domino cannot win here (the run says so); the run checks the "
                "schedules and the analysis. Wall time and memory: that directory's README.",
    },
    {
        "title": "Emulated TP 8 on one H200, full depth (emulated comm)",
        "where": "one H200, 2026-12-02; rank 0's shard of llama3-3b (28 layers), seq 4096",
        "render": run_verdicts,
        "args": {"runs": "reports/emulated-h200-full-2026-12-02/*/run.json"},
        "text": "The headline command as a user types it, eager and with CUDA graphs. Every "
                "collective is an emulated kernel (docs/EMULATION.md): not a multi-GPU "
                "measurement. Eager is host-bound at this shard size; graphs take the host "
                "off the step.",
    },
    {
        "title": "Emulated TP 8 on one H200, the paced stand-in, with domino-nocomm (emulated comm)",
        "where": "one H200, 2026-12-03; rank 0's shard of llama3-3b (28 layers), seq 4096, "
                 "24 timed steps per mode",
        "render": run_verdicts,
        "args": {"runs": "reports/emulated-h200-fidelity-2026-12-03/*/run.json"},
        "text": "The headline command with the paced comm stand-in (docs/EMULATION.md §3b) "
                "and the domino-nocomm mode. Every collective is an emulated kernel: not a "
                "multi-GPU measurement.",
    },
    {
        "title": "What limits domino, measured part by part (emulated comm)",
        "where": "one H200, 2026-12-03; the runs above",
        "render": run_limits,
        "args": {"runs": "reports/emulated-h200-fidelity-2026-12-03/*/run.json"},
        "text": "Per profiled step: the gap to nocomm and its parts, each measured "
                "(docs/METRICS.md). The exposed part is exposed comm's step cost: the "
                "exposed comm beyond the kernel-to-kernel bubbles, host waits and memory "
                "ops (copies, sets on the compute stream) of the device gaps it lies in; n/a where the run's analyses lack it (the eager "
                "run's traces are not committed: its exposed comm is the part). The "
                "next-to-last column, from the step identity, is the exposed comm that lies "
                "where domino-nocomm's device idles too; were the step cost exact it would "
                "be exposed − exposed cost, and what it exceeds that by is counted in two "
                "parts: the residual.",
    },
    {
        "title": "Emulated TP 2 / 4 / 8 on one H200, 8 layers (emulated comm)",
        "where": "one H200, 2026-12-02; seq 4096, mbs 2, --mode all, 4 timed steps per run",
        "render": run_repeats,
        "args": {"runs": "reports/emulated-h200-table-2026-12-02/*-r*/run.json"},
        "text": "Median [range] over the repeats; each ratio is the run's median of paired "
                "block ratios. Suite `gpu_session.sh emulate-table`; how the eager rows of "
                "TP 4 and 8 were re-run: reports/emulated-h200-table-2026-12-02/.",
    },
    {
        "title": "Emulated TP 2 / 4 / 8 on one H200, 8 layers, the paced stand-in (emulated comm)",
        "where": "one H200, 2026-12-03; seq 4096, mbs 2, --mode all, 16 timed steps per run",
        "render": run_repeats,
        "args": {"runs": "reports/emulated-h200-2026-12-03b/table/*-r*/run.json",
                 "kernel": True},
        "text": "The table above re-measured with the paced comm stand-in (docs/EMULATION.md "
                "§3b), one run per row (four blocks: no interval). Every collective is an "
                "emulated kernel: not a multi-GPU measurement. How: "
                "reports/emulated-h200-2026-12-03b/README.md.",
    },
    {
        "title": "One row, the emulated stand-in before and after (emulated comm)",
        "where": "one H200; llama3-3b (8 layers), TP 8, seq 4096, mbs 2",
        "render": run_repeats,
        "args": {"runs": ["reports/emulated-h200-table-2026-12-02/llama3-3b-tp8-*-r*/run.json",
                          "reports/emulated-h200-2026-12-03b/table/llama3-3b-tp8-*-r*/run.json"],
                 "kernel": True},
        "text": "The burst kernel (2026-12-02, three repeats) and the paced one (2026-12-03, "
                "one run) on the same row of the two tables above: what the new stand-in "
                "changed. Both emulated.",
    },
    {
        "title": "The headline re-run, and llama3-8b at full depth (emulated comm)",
        "where": "one H200, 2026-12-03 (14:20-14:36 UTC; the mbs 4 rows 14:45 UTC); seq "
                 "4096, mbs 2 (the last two rows mbs 4), TP 8, 16-24 timed steps per mode",
        "render": run_verdicts,
        "args": {"runs": RUNS_03B},
        "text": "The paced stand-in after its last fixes. The eager rows are host-bound, and "
                "this lent host was slow and uneven during eager-paced (its intervals say so). "
                "The last two rows are llama3-3b and llama3-8b at mbs 4 with CUDA graphs "
                "(twice the tokens per step of the rows above). Every collective is an "
                "emulated kernel.",
    },
    {
        "title": "What limits domino in those runs (emulated comm)",
        "where": "one H200, 2026-12-03; the runs above",
        "render": run_limits,
        "args": {"runs": RUNS_03B},
        "text": "Per profiled step, as in the section on the first paced runs; the last "
                "two rows are the mbs 4 runs (CUDA graphs).",
    },
    {
        "title": "One CUDA graph per step against one per segment (emulated comm)",
        "where": "one H200, 2026-12-03 (17:19-17:37 UTC); llama3-3b (28 layers; the last "
                 "row llama3-8b, 32 layers), TP 8, seq 4096, mbs 2, 24 timed steps per mode",
        "render": run_verdicts,
        "args": {"runs": RUNS_03C},
        "text": "`--graph-scope step` (the default of `--cuda-graphs` where the collectives "
                "can be captured) replays the whole step, collectives included, as one graph; "
                "`--graph-scope segment` is a graph per schedule segment, the only scope "
                "before these runs (every earlier `--cuda-graphs` row). Runs alternate step "
                "and segment. Every collective is an emulated kernel. How: "
                "reports/emulated-h200-2026-12-03c/README.md.",
    },
    {
        "title": "What limits domino with one graph per step (emulated comm)",
        "where": "one H200, 2026-12-03; the runs above whose traces were analysed",
        "render": run_limits,
        "args": {"runs": RUNS_03C},
        "text": "Per profiled step, as above. One graph per step takes the boundaries between "
                "segment graphs out of the split's own cost and some exposed comm's step cost; "
                "the overlap tax does not move.",
    },
    {
        "title": "Collectives by copy engines, `--comm-engine ce` (emulated comm)",
        "where": "one H200, 2026-12-04, one session; llama3-3b (28 layers) and llama3-8b "
                 "(32 layers), seq 4096, mbs 2, TP 8, `--cuda-graphs`, 16 timed steps",
        "render": run_rows,
        "args": {"runs": RUNS_04D,
                 "modes": ["tp", "nocomm", "domino", "domino-nocomm", "domino-sp"]},
        "text": "The collectives' data moved by copies paced to a copy-engine time model "
                "(emulation/ce.py; modelled, not measured: no machine with 2+ GPUs was "
                "lent), against the SM stand-in (the first row). The copy engines hold no "
                "SM while data moves; only the reduction is an SM kernel. Pace `phase` (the "
                "default) waits at a phase's end, `copy` after every copy. The domino / tp "
                "column is against the same row's tp, which the copy engines slow: judge a "
                "row by domino / nocomm, and against tp at its own best (the SM row). How, "
                "with those ratios, and the stand-in's own time against its model: "
                "reports/emulated-h200-2026-12-04d/README.md.",
    },
    {
        "title": "What limits domino with copy-engine collectives (emulated comm)",
        "where": "one H200, 2026-12-04; the runs above",
        "render": run_limits,
        "args": {"runs": RUNS_04D},
        "text": "Per profiled step, as above. The copy engines take most of the overlap tax "
                "away; the split's own cost and the exposed comm remain.",
    },
    {
        "title": "Knobs beside the copy-engine collectives (emulated comm)",
        "where": "one H200, 2026-12-04, one lease; the shapes above, `--comm-engine ce "
                 "--cuda-graphs`, with `--sm-carveout` and `--high-priority-comm`",
        "render": run_limits,
        "args": {"runs": RUNS_04D_KNOBS},
        "text": "The carveout narrows domino-nocomm's GEMMs too, so it costs domino more "
                "than it gives, and helps domino-sp, whose small chain segments run on a "
                "side stream beside the GEMMs. Every knob was off by default then "
                "(high-priority comm is on by default on CUDA since 2026-12-07). The table "
                "of domino-sp's figures: reports/emulated-h200-2026-12-04d/README.md.",
    },
    {
        "title": "Each micro-batch on a stream of its own, `--mb-streams 2` (emulated comm)",
        "where": "one H200, 2026-12-06, one call; llama3-3b (28 layers) and llama3-8b (32 "
                 "layers), seq 4096, mbs 2, TP 8, `--cuda-graphs` (one graph per step), 16 "
                 "timed steps",
        "render": run_rows,
        "args": {"runs": RUNS_06,
                 "modes": ["tp", "nocomm", "domino", "domino-nocomm", "domino-sp"]},
        "text": "Rows in pairs, each beside its baseline: `--mb-streams 2` (the micro-batches "
                "on a high- and a low-priority stream) takes domino-nocomm from 0.897 to "
                "0.977 of nocomm (the split's own cost 7.47 -> 1.68 ms), but domino from "
                "0.801 to 0.781: the comm is exposed more, in the backward "
                "(benchmarks/exposed_by_part.py). `--wgrad-in accumulate` takes the "
                "copies out (split 7.47 -> 6.37 ms) and domino does not move (0.796). Both "
                "stay off by default. reports/emulated-h200-2026-12-06/README.md.",
    },
    {
        "title": "What limits domino with a stream per micro-batch (emulated comm)",
        "where": "one H200, 2026-12-06; the runs above",
        "render": run_limits,
        "args": {"runs": RUNS_06},
        "text": "Per profiled step. With two compute streams the parts do not add up (the "
                "overlap tax compares kernel times class by class, and concurrent kernels "
                "slow each other in domino-nocomm too): only the split's own cost and the "
                "gap are measured figures in those rows.",
    },
    {
        "title": "A stream per micro-batch in backward only, and the streams' priorities "
                 "(emulated comm, H100)",
        "where": "one H100 (no H200 was lent for the call), 2026-12-06; llama3-3b, the "
                 "shape above, `--comm-engine ce` unless the row says sm",
        "render": run_rows,
        "args": {"runs": RUNS_06_H100,
                 "modes": ["tp", "nocomm", "domino", "domino-nocomm", "domino-sp"]},
        "text": "The first row is the baseline of this call (an H100: compare within the "
                "table). `DOMINO_PROF_LANE_PHASES=bwd` keeps the forward on one stream; `DOMINO_PROF_LANE_PRIORITY=0,0` with `--high-priority-comm` puts the "
                "comm above both lanes. Every `--comm-engine ce` variant is 0.005 to 0.007 under "
                "the baseline; the sm row has no baseline of its own in this call.",
    },
    {
        "title": "A comm stream per micro-batch lane, and the carve-out beside it (emulated "
                 "comm, H100)",
        "where": "one H100 (the lent nvidia-h200 came as an H100), 2026-12-06 05:07-05:25 UTC, "
                 "one lease; llama3-3b (28 layers), seq 4096, mbs 2, TP 8, `--cuda-graphs`, "
                 "16 timed steps, each row run once",
        "render": run_rows,
        "args": {"runs": RUNS_06B_LANES, "modes": _ALL_MODES, "ratios": _SP_RATIOS},
        "text": "`DOMINO_PROF_LANE_COMM=own` (each lane's collectives on a comm stream of "
                "its own) does not win back what the lanes lose: copy engines 0.790 of nocomm "
                "against 0.792 for one stream beside it, SM stand-in 0.756 against 0.743; the "
                "exposed comm stays 11.7 ms a profiled step against one stream's 4.9 "
                "(limits.txt), so the in-order comm stream was not the cause. It stays off "
                "(`shared`). `--wgrad-in accumulate` with the lanes is the best mbs-2 domino "
                "here, 0.807 (80.6 ms: 1.262x tp at its own best, the sm rows' 101.7 ms). "
                "`--sm-carveout 16` costs domino (0.761) and gives domino-sp 0.853-0.856 of "
                "nocomm (76.0 ms: 1.338x tp at its best, 1.29x sp at its best, 98.3 ms). "
                "reports/emulated-h100-2026-12-06/README.md.",
    },
    {
        "title": "The micro-batch size, and `--wgrad-in accumulate` (emulated comm, H100)",
        "where": "one H100, 2026-12-06, the lease above; llama3-3b (28 layers), seq 4096, "
                 "TP 8, `--cuda-graphs`, `--comm-engine ce` unless the row says sm",
        "render": run_rows,
        "args": {"runs": RUNS_06B_MBS, "modes": _ALL_MODES, "ratios": _SP_RATIOS},
        "text": "At mbs 4 (two sequences a micro-batch) domino with the copy engines and "
                "`--wgrad-in accumulate` runs at 0.853, 0.852 and 0.857 of nocomm in three "
                "runs (142.8-143.0 ms: 1.303-1.305x tp at its own best, sm 186.3-186.5 ms); "
                "accumulate gains in every pair of this lease (mbs 4: 0.843 -> 0.852-0.857; "
                "mbs 8: 0.848 -> 0.863; sm mbs 4: 0.804 -> 0.823). domino-sp with the SM "
                "stand-in at mbs 4: 0.918 and 0.915 of nocomm, 1.396x and 1.392x tp, but "
                "1.315x and 1.314x sp, the faster synchronous baseline. Four even "
                "micro-batches or an uneven 1,3 split lose (0.775, 0.765).",
    },
    {
        "title": "What limits domino at mbs 2 and 4 (emulated comm, H100)",
        "where": "one H100, 2026-12-06, the rows above",
        "render": run_limits,
        "args": {"runs": [RUNS_06B_LANES[0], RUNS_06B_MBS[0], RUNS_06B_MBS[1], RUNS_06B_MBS[8]]},
        "text": "Per profiled step. At mbs 4 the split's own cost falls to 3.4 ms with "
                "accumulate (7.8 without); the overlap tax (10.1 ms) and the exposed comm "
                "(9.3 ms) are what is left.",
    },
    {
        "title": "llama3-8b at TP 8 (emulated comm, H100)",
        "where": "one H100, 2026-12-06, the lease above; llama3-8b (32 layers), seq 4096, "
                 "TP 8, `--cuda-graphs`, `--comm-engine ce`",
        "render": run_rows,
        "args": {"runs": RUNS_06B_8B, "modes": _ALL_MODES, "ratios": _SP_RATIOS},
        "text": "domino 0.866-0.872 of nocomm at mbs 2 and 0.886-0.894 at mbs 4 (accumulate "
                "the higher); domino-sp 0.934-0.940 at either size. No sm row for llama3-8b "
                "in this lease, so tp at its own best is not known here.",
    },
    {
        "title": "Eager at TP 8 on an H100 host (emulated comm)",
        "where": "one H100, 2026-12-06, the lease above; llama3-3b, seq 4096, mbs 2, eager",
        "render": run_rows,
        "args": {"runs": RUNS_06B_EAGER, "modes": _ALL_MODES, "ratios": _SP_RATIOS},
        "text": "Eager domino is host-bound at a TP-8 shard: the launches of two micro-batches "
                "take about 85 ms a step with the SM stand-in (`issue ms` in run.json) and the "
                "split's own cost is 32.8 ms. `DOMINO_PROF_CE_COPY=driver` cuts the "
                "copy-engine stand-in's host time per call from 252 to 150 us "
                "(benchmarks/probe_ce_copier.py, same lease: probes.log) and eager ce domino "
                "still runs at 0.52 of nocomm. CUDA graphs are the way at this shard size.",
    },
    {
        "title": "Domino over sequence parallelism at 0.88 of nocomm, 1.38x tp (emulated comm, "
                 "H100)",
        "where": "one H100 (nvidia-h100-x1), 2026-12-06 08:22-08:50 UTC, one session's five "
                 "calls (calls 3-5 here); llama3-3b (28 layers), seq 4096, mbs 2, TP 8, "
                 "`--cuda-graphs`, 16 timed steps, each row run once",
        "render": run_rows,
        "args": {"runs": RUNS_06D_SP, "modes": _ALL_MODES, "ratios": _SP_RATIOS},
        "text": "domino-sp with the copy-engine stand-in, `--sm-carveout 12` and "
                "`--high-priority-comm`: 74.09 and 74.05 ms, 0.879 of nocomm, **1.376x tp at "
                "its own best** (the SM stand-in's tp, 101.96 ms, the first row: same call) "
                "and 1.33x sp at its best (98.6 ms); 74.11 in the call before. With "
                "`--sm-carveout 16`: 74.77-75.70 ms in four runs (0.868-0.873). The weight "
                "gradients of domino-sp are one GEMM over both micro-batches since this "
                "lease (sp_step.py): 75.70 against 75.90 ms with one per micro-batch "
                "(`--wgrad-in accumulate`, same call; SM stand-in 81.56 against 82.19); "
                "domino-sp rows of the sections below ran one per micro-batch. With run's "
                "default engine (the SM stand-in, NCCL's kernels) domino-sp reaches 0.814 "
                "(c12, high-priority comm): the stand-in's 24 CTAs slow the compute beside "
                "it. The carve-out costs domino (all-reduce) and helps domino-sp, whose "
                "backward chain (reduce-scatter, norm backward, all-gathers) needs free SMs "
                "(`--carveout-scope fwd`, new: domino-sp 78.8-79.2 against 76.1; "
                "reports/emulated-h100-2026-12-06c/README.md). Every knob stays off by "
                "default.",
    },
    {
        "title": "domino-sp against its own no-comm mode; high-priority comm by default "
                 "(emulated comm, H100)",
        "where": "one H100 (nvidia-h100-x1), 2026-12-07, two calls (05:39 and 06:39 UTC); "
                 "llama3-3b (28 layers), seq 4096, mbs 2, TP 8, `--cuda-graphs`, 16 timed "
                 "steps, each row run once",
        "render": run_rows,
        "args": {"runs": RUNS_07, "modes": _SP_MODES, "ratios": _SP_RATIOS},
        "text": "domino-sp-nocomm (domino-sp's split with the collectives skipped) runs "
                "faster than nocomm: the split costs domino-sp nothing, its comm and the "
                "compute slowed beside it do. `--high-priority-comm` takes domino-sp from "
                "0.79 to 0.82-0.83 of nocomm and moves tp and domino by 0.3 % or less, so it "
                "is on by default on CUDA since the second call (its rows). Fewer CTAs for "
                "the backward's collectives (`--comm-ctas-scope bwd`) and a high-priority "
                "side stream (`DOMINO_PROF_SIDE_PRIORITY=high`) do not pay: the backward's "
                "comm is on its critical path. The copy-engine what-if still reaches the "
                "target. reports/emulated-h100-2026-12-07/README.md.",
    },
    {
        "title": "domino-sp keeps the forward's gathered inputs: 0.85 of nocomm with run's "
                 "defaults (emulated comm, H100)",
        "where": "one H100 (nvidia-h100-x1), 2026-12-07, four calls (07:35, 07:50, 08:21 "
                 "and 08:50 UTC); "
                 "llama3-3b (28 layers; one row llama3-8b, 32 layers), seq 4096, mbs 2, TP "
                 "8, 16 timed steps, each row run once",
        "render": run_rows,
        "args": {"runs": RUNS_07B, "modes": _SP_MODES, "ratios": _SP_RATIOS},
        "text": "`--sp-wgrad-input keep` feeds the weight gradients the forward's gathered "
                "norm outputs instead of all-gathering them again in the backward "
                "(Megatron's `regather`): a third of the backward's collectives fewer, the "
                "same gradients bit for bit. domino-sp 79.4 -> 76.9 ms (0.83 -> 0.86 of "
                "nocomm), sp 98.9 -> 90.0 ms, so keep is run's default since the second "
                "call (its rows). With keep and `--cuda-graphs` domino-sp is at "
                "0.849-0.862 of nocomm and 1.32-1.33x tp in seven runs: the 0.85 target is "
                "met, 1.35x is not. llama3-8b reaches 0.949 with run's defaults. The copy "
                "engines with keep: 0.902, 1.39x tp at its best in that call (102.06 ms). "
                "Fewer backward CTAs, a high-priority side stream and a carve-out of 8-24 "
                "SMs (the third call) move domino-sp by 0.8 ms or less, and the carve-out "
                "costs domino up to 3.9 ms (bwd20 and bwd16 slow their own tp: their domino-sp / "
                "tp is against it). Eager stays host-bound. "
                "reports/emulated-h100-2026-12-07b/README.md.",
    },
    {
        "title": "domino-sp with the residual folded and a backward carve-out: 1.35x tp "
                 "with run's defaults (emulated comm, H100)",
        "where": "one H100 (nvidia-h100-x1), 2026-12-07, four calls (09:13-09:39 UTC); "
                 "llama3-3b (28 layers; the 8b rows llama3-8b, 32 layers), seq 4096, mbs 2, "
                 "TP 8, 16 timed steps, each row run once",
        "render": run_rows,
        "args": {"runs": RUNS_07C, "modes": _SP_MODES, "ratios": _SP_RATIOS},
        "text": "`--sp-residual fold` (the default since the second call) adds the residual "
                "into the core's partial sums before the reduce-scatter, so the chain "
                "between the forward's collectives is the norm alone: its gap 13.3 -> 8.8 "
                "us, domino-sp 0.2 ms faster on the means (inside the spread). "
                "`--carveout-auto` (on since the third call) carves the stand-in's 24 SMs "
                "out of domino-sp's backward GEMMs beside a collective (`--sm-carveout 24 "
                "--carveout-scope bwd`): with run's defaults domino-sp runs 75.64-75.89 ms, "
                "0.866-0.868 of nocomm and 1.350-1.353x its run's tp (1.349-1.353x the "
                "call's fastest tp): issue 34's 1.35x at its edge. The carve-out costs domino "
                "2.6 ms, so only domino-sp takes it, and it costs llama3-8b 2.3 ms "
                "(0.926-0.932 of nocomm against 0.945-0.951 with `--no-carveout-auto`). "
                "Eager stays host-bound. reports/emulated-h100-2026-12-07c/README.md.",
    },
    {
        "title": "What limits domino-sp in those runs, by occupancy (emulated comm, H100)",
        "where": "the runs above (one H100, 2026-12-07 (c)); per profiled step, read from "
                 "each run.json's limits_sp",
        "render": run_occupancy,
        "args": {"runs": RUNS_07C},
        "text": "domino-sp's gap to nocomm counted on the union of compute kernels "
                "(docs/METRICS.md, what limits domino, 2026-12-08), where the class-by-class "
                "tax is withheld (the chains run beside the GEMMs): split + compute held "
                "longer + time without compute = gap; compute held longer = its kernels' "
                "time added + the compute that ran beside other compute in domino-sp-nocomm "
                "and alone here. llama3-3b with the SM stand-in: compute held longer "
                "13.4-14.2 ms without a carve-out, 12.3-12.8 with run's defaults (the "
                "backward's GEMMs carved out beside a collective: kernel time 7.3-7.9, "
                "beside compute lost 4.9-5.0), 9.3-9.4 with `--sm-carveout 24 "
                "--carveout-scope bwd` and 6.5-6.9 with `--sm-carveout 24` (every GEMM beside "
                "a collective), whose cost moves into the split (domino-sp-nocomm is carved "
                "out too: -1.0 to +1.8 ms) and whose lost concurrency falls to 0.2-1.4; "
                "exposed comm and idle add 1.7-3.4. With the copy engines compute is held 1.2 "
                "ms longer (kernel time -1.4, beside compute lost 2.5) and the time without "
                "compute grows 11.5 (exposed comm's step cost 13.0): no SMs taken, slower "
                "collectives. llama3-8b: 18.8-19.8 held longer without the carve-out, "
                "20.6-21.5 with it (kernel time 18.1-19.4 in both). The eager row is "
                "host-bound (its split holds the host). Every figure is of emulated "
                "collectives.",
    },
    {
        "title": "The step under inference mode; eager steps on a host of two speeds "
                 "(emulated comm, H100)",
        "where": "one H100, 2026-12-07, three calls (10:41-11:09 UTC); llama3-3b (28 layers), "
                 "seq 4096, mbs 2, TP 8, 16 timed steps; rows `base` (7c0ba19, the step "
                 "under no_grad) and `new` (inference mode) alternate in each call",
        "render": run_rows,
        "args": {"runs": RUNS_07D, "modes": _SP_MODES, "ratios": _SP_RATIOS},
        "text": "`StepRunner.step` runs under `torch.inference_mode`: no autograd or "
                "view-tracking dispatch per op. On the 2-core CPU box the host's time per "
                "step fell to about 0.8x (bench_sp_host.py, 28 layers: domino 34.68 -> "
                "27.58 ms, domino-sp 38.14 -> 30.98). On the H100 host it is not resolved: "
                "the same code's eager domino ran 92 to 201 ms a step, switching between "
                "two levels about 2x apart within a run, while the issuing thread's CPU "
                "time equalled its issue time (the core ran slower; the thread never left "
                "it) and pinning did not help. At the host's fast level domino eager "
                "reached 92-95 ms (0.70-0.73 of nocomm; 88.8 with graphs) and domino-sp "
                "98-108 (0.62-0.68; 75.7 with graphs, 0.875 of nocomm, 1.354x tp). run "
                "now probes the host's speed after each timed step and says when it moved "
                "(its `host:` line). reports/emulated-h100-2026-12-07d/README.md.",
    },
    {
        "title": "The rotary embedding as one Triton launch (emulated comm, H100)",
        "where": "one H100, 2026-12-07, one call (12:47-12:51 UTC); llama3-3b (28 layers), "
                 "seq 4096, mbs 2, TP 8, 16 timed steps; rows with `DOMINO_PROF_ROPE=aten` "
                 "run aten's rotation (the reference), the others the kernel",
        "render": run_rows,
        "args": {"runs": RUNS_07E, "modes": _SP_MODES, "ratios": _SP_RATIOS},
        "text": "On CUDA the rotation is one Triton launch (forward; the backward writes dq "
                "and dk rotated straight into their slot) instead of aten's 10 ops and 3 "
                "kernels with fp32 copies: 18 % fewer aten ops a step (domino-sp 5716 -> "
                "4708), the same bf16 values (every element equal on the headline's "
                "shapes). With graphs every mode's device time fell about 2 ms: domino-sp "
                "75.49 -> 73.44 / 73.37 ms, 1.351 -> 1.360 / 1.362x tp (tp 102.0 -> 99.9). "
                "Eager, ABAB in one process (bench_rope_ab.py, 12 pairs): domino 92.5 -> "
                "89.2 ms, domino-sp 81.2 -> 77.6 (pair ratios 0.964 and 0.957). run's eager "
                "domino-sp issued 84 ms a step where that benchmark issued 67 at the same "
                "host speed: run profiled five modes before it, and a profile leaves CUPTI "
                "attached; run now times every mode before it profiles any (not yet "
                "measured on a GPU). reports/emulated-h100-2026-12-07e/README.md.",
    },
    {
        "title": "Modes timed before any profile; eager without the carve-out (emulated "
                 "comm, H100)",
        "where": "one H100, 2026-12-07, four calls (15:17-15:50 UTC); llama3-3b (28 layers), "
                 "seq 4096, mbs 2, TP 8, 16 timed steps; call4 is the final code (eager "
                 "domino-sp without the carve-out), call3's rows ran before that change",
        "render": run_rows,
        "args": {"runs": RUNS_07F, "modes": _SP_MODES, "ratios": _SP_RATIOS},
        "text": "run now times every mode before it profiles any. With CUDA graphs "
                "domino-sp holds issue 34's 0.85 of nocomm and 1.35x tp in all three "
                "calls. Eager it is host-bound: call2's row ran while the host was at its "
                "slow level (its probe doubled), and the same runner with and without its "
                "carve-out, alternating in one process, ran faster without it (wall and "
                "host issue), so --carveout-auto now acts with --cuda-graphs only. At the "
                "host's fast level the final eager domino-sp is short of the 0.85 target. "
                "tp 1's ratios, timed ABAB (bench_schedule --abab), and the host profile: "
                "reports/emulated-h100-2026-12-07f/README.md.",
    },
    {
        "title": "Where eager domino-sp waits for the host (emulated comm, H100)",
        "where": "one H100, 2026-12-07 (g), 16:30-16:33 UTC; llama3-3b (28 layers), seq 4096, "
                 "mbs 2, TP 8, 16 timed steps, eager; rows 1 and 3 the code before the "
                 "current-stream lookups were kept (8de298e), rows 2 and 4 after (5674d27)",
        "render": run_rows,
        "args": {"runs": RUNS_07G, "modes": _SP_MODES, "ratios": _SP_RATIOS},
        "text": "Keeping the current stream's Stream object took the emulated collectives' "
                "host share of an eager domino-sp step (its issue less domino-sp-nocomm's) "
                "from 9.2-9.7 to 8.4-8.6 ms; the wall moved less than the rows' spread. "
                "benchmarks/host_lead.py says why: the forward waits for the host at nearly "
                "every core, the backward runs 3-5 ms behind it at the host's fast level, so "
                "only the forward's share of a host saving comes off the step. Eager "
                "domino-sp stays at 0.83 of nocomm (issue 34: 0.85). The same README has "
                "tp 1's domino graphs / tp graphs at 1.050 (ABAB) on this H100 and its "
                "kernels by name: reports/emulated-h100-2026-12-07g/README.md.",
    },
    {
        "title": "domino-sp with CUDA graphs on a second H100 host (emulated comm)",
        "where": "one H100, 2026-12-07 (h), 19:05-19:07 UTC, 8a8cd57; llama3-3b (28 layers), "
                 "seq 4096, mbs 2, TP 8, 16 timed steps, `--cuda-graphs`",
        "render": run_rows,
        "args": {"runs": RUNS_07H, "modes": _SP_MODES, "ratios": _SP_RATIOS},
        "text": "Issue 34's graph targets (0.85 of nocomm, 1.35x tp) hold on another host: "
                "0.859 and 1.354-1.356x. The eager rows of the same call are not shown: the "
                "host ran at its slow level most of the call (probe 1.0-1.3 ms against 0.56 "
                "at 07g's fast level) and eager domino-sp, whose forward waits for the host, "
                "ranged 81-161 ms a step within one run. --timing stream against step, timed "
                "in one process (bench_timing_ab.py), came within 1 %: every step's token "
                "copy made the host wait for the device (fixed in 2d0d8f3, not yet measured): "
                "reports/emulated-h100-2026-12-07h/README.md.",
    },
    {
        "title": "domino-sp with CUDA graphs, streamed, on a third H100 host (emulated comm)",
        "where": "one H100, 2026-12-07 (i), 21:40-21:43 UTC, c4466c4; llama3-3b (28 layers), "
                 "seq 4096, mbs 2, TP 8, 16 timed steps, `--cuda-graphs`, `--timing stream`",
        "render": run_rows,
        "args": {"runs": RUNS_07I, "modes": _SP_MODES, "ratios": _SP_RATIOS},
        "text": "The graph targets hold on a third host: 0.857 of nocomm, 1.361x tp. Since "
                "the token copy is pinned and non-blocking (2d0d8f3), --timing stream is "
                "faster than step in one process, blocks alternating: 0.976 nocomm, 0.983 tp "
                "(every pair), 0.963 domino-sp and 0.945 domino-sp-nocomm with the host at its "
                "slow level; so stream is the CUDA default now. The eager row of the same call "
                "ran at the slow host level and is not shown: "
                "reports/emulated-h100-2026-12-07i/README.md.",
    },
    {
        "title": "The residual add and norm as one Triton launch (emulated comm, H100)",
        "where": "one H100, 2026-12-08, 00:51-00:53 UTC, e05a1be; llama3-3b (28 layers), seq "
                 "4096, mbs 2, TP 8, 16 timed steps, `--cuda-graphs`, one row after the other",
        "render": run_rows,
        "args": {"runs": RUNS_08, "modes": _SP_MODES, "ratios": _SP_RATIOS},
        "text": "norm_kernel.py writes the norm straight into the rows a micro-batch keeps for "
                "the joint weight gradient (aten's fused norm takes no out=, so each was "
                "copied) and adds the residual in the same launch: 1.7-2.7x faster than aten's "
                "add, norm and copy in a graph. Every mode's step fell: tp 1.2 ms, nocomm 1.2, "
                "domino 2.7 (its copies), the SP modes 0.1-0.3 (their norms run on the "
                "sequence shard, beside the GEMMs). It is the CUDA default now "
                "(DOMINO_PROF_NORM=auto; rows before this one ran aten's). Since nocomm gained "
                "more than domino-sp, domino-sp's fraction of nocomm fell from 0.861 to 0.846 "
                "in this pair (1.356x -> 1.344x tp), with its own step the fastest measured on "
                "these hosts (72.87 ms): the bound moved, not the schedule. "
                "reports/emulated-h100-2026-12-08/README.md.",
    },
    {
        "title": "llama3-8b: domino-sp at 0.99 of nocomm (emulated comm, H100)",
        "where": "one H100, 2026-12-06, the lease above (call 3); llama3-8b (32 layers), seq "
                 "4096, mbs 2, TP 8, `--cuda-graphs`",
        "render": run_rows,
        "args": {"runs": RUNS_06D_8B, "modes": _ALL_MODES, "ratios": _SP_RATIOS},
        "text": "Sequence parallelism does less compute than nocomm (tp without comm: the "
                "norms and residuals run on the full sequence there), so domino-sp can near "
                "or pass nocomm: 127.5 ms against 125.8, 1.384x this run's tp (copy "
                "engines). No SM-stand-in tp ran for llama3-8b in this lease.",
    },
    {
        "title": "domino-sp's weight gradients, joint or one per micro-batch: one H100, tp 1, "
                 "2026-12-06",
        "where": "one H100, torch 2.11, bf16, llama3-3b (28 layers), seq 1024, mbs 2; eager "
                 "and one graph per step; the lease above, call 3",
        "render": bench_schedule,
        "args": {"file": f"{_H100_06C}/call3/bench/joint.json"},
        "text": "domino-sp graphs 87.20 ms against tp graphs 84.10 (1.037) with the joint "
                "weight gradients; with one per micro-batch (call3/bench/acc.json, same "
                "call) 90.26 against 83.76 (1.078). tp eager / plain 0.987.",
    },
    {
        "title": "`domino-prof tune --schedule domino-sp` (emulated comm, H100)",
        "where": "one H100, 2026-12-06, the lease above (call 6); llama3-3b (28 layers), seq "
                 "4096, mbs 2, TP 8, `--high-priority-comm` for every run, 40 timed steps a "
                 "mode",
        "render": tune_rows,
        "args": {"runs": [f"{_H100_06C}/call6/tune/tune.json"]},
        "text": "The sweep picks the setting the lease found by hand: domino-sp with the copy "
                "engines and 12 SMs carved out, 73.6 ms, 0.876 of nocomm [0.874, 0.877], "
                "1.374x tp at its best in the sweep (the SM stand-in's, 101.2 ms). With run's "
                "default engine the best is 0.820 (no carve-out). The winner's `run` line is "
                "in tune.json (`winner`).",
    },
    {
        "title": "The lanes' lock, `DOMINO_PROF_LANE_LOCK=dgrad` (emulated comm, H100)",
        "where": "one H100 (nvidia-h100-x1), 2026-12-06 06:21-06:58 UTC, one lease of eight "
                 "calls; llama3-3b (28 layers), seq 4096, mbs 2, TP 8, `--cuda-graphs`, 16 "
                 "timed steps, each row run once",
        "render": run_rows,
        "args": {"runs": RUNS_06C_LOCK, "modes": _ALL_MODES, "ratios": _SP_RATIOS},
        "text": "With the SM stand-in (run's default engine) the locked lanes run at 0.761, "
                "0.763, 0.763 and 0.768 of nocomm, the unlocked ones at 0.736 and 0.736, one "
                "stream at 0.743 and 0.744: the lock takes the exposed comm from 12.6 ms a "
                "profiled step (unlocked) to 4.9 (one stream 4.1; the backward's part 8.7 -> "
                "0.9, benchmarks/exposed_by_part.py --phases) and keeps part of the lanes' "
                "gain on the split (7.0 ms against 8.7). It is the lanes' default since this "
                "lease (`DOMINO_PROF_LANE_LOCK=off` restores the unlocked lanes); "
                "`--mb-streams 2` stays off by default for its memory (peak 24.9 GB against "
                "15.8). `--wgrad-in accumulate` adds to it: 0.776 and 0.776 locked, 0.755 and "
                "0.753 on one stream (1.21x tp at its best). With the copy engines at mbs 2 "
                "the lock does not move domino (0.787 locked, call1/console.txt; 0.785 "
                "unlocked; 0.791 one stream); with accumulate 0.801 and 0.804. "
                "reports/emulated-h100-2026-12-06b/README.md.",
    },
    {
        "title": "The lanes' lock at mbs 4, and llama3-8b (emulated comm, H100)",
        "where": "one H100, 2026-12-06, the lease above; seq 4096, mbs 4, TP 8, "
                 "`--cuda-graphs`, `--wgrad-in accumulate`",
        "render": run_rows,
        "args": {"runs": RUNS_06C_MBS4, "modes": _ALL_MODES, "ratios": _SP_RATIOS},
        "text": "llama3-8b with the copy engines: 0.908 and 0.907 of nocomm locked, 0.900 and "
                "0.898 on one stream (peak 67.4 GB against 38.8). llama3-3b: copy engines "
                "0.863 (call1/console.txt) and 0.853 locked against 0.852 (console) and 0.848; "
                "SM stand-in 0.835 against 0.818. With the lanes the analysis withholds the "
                "overlap tax (their compute runs beside other compute, 21-61 ms a step: "
                "docs/METRICS.md, what limits domino); the split and the gap are in the "
                "README's table.",
    },
    {
        "title": "Eager with the lanes' lock (emulated comm, H100)",
        "where": "one H100, 2026-12-06, the lease above; llama3-3b, seq 4096, mbs 2, eager",
        "render": run_rows,
        "args": {"runs": RUNS_06C_EAGER, "modes": _ALL_MODES, "ratios": _SP_RATIOS},
        "text": "Still host-bound (domino's issue 94-97 ms of a 98-104 ms step): one stream "
                "0.645 and 0.664 of nocomm, unlocked lanes 0.617, locked 0.684 and 0.670.",
    },
    {
        "title": "The schedules' own cost with the locked lanes: one H100, tp 1, 2026-12-06",
        "where": "one H100, torch 2.11, bf16, llama3-3b (28 layers), seq 1024, mbs 2; eager "
                 "and one graph per step; the lease above, call 3",
        "render": bench_schedule,
        "args": {"file": f"{_H100_06B}/call3/bench/base.json"},
        "text": "domino graphs / tp graphs 1.006, tp eager / plain 1.004. With "
                "`--mb-streams 2` and the lock (call3/bench/lock.json, same call) 1.017 and "
                "1.005, domino eager 0.898 of plain-mb; peak reserved 29.0 GB against 22.4 "
                "eager. `--wgrad-in accumulate` costs domino's graphs at tp 1: 1.042, 1.040 "
                "and 1.041 against `joint`'s 1.023, 1.024 and 1.024 (call1/bench/, "
                "call5/bench/: three pairs), over the issue's 1.03, so accumulate stays off "
                "by default.",
    },
    {
        "title": "The schedules' own cost, and with a stream per micro-batch: one H200, tp 1, "
                 "2026-12-06",
        "where": "one H200, torch 2.11, bf16, llama3-3b (28 layers), seq 1024, mbs 2; eager "
                 "and one graph per step",
        "render": bench_schedule,
        "args": {"file": "reports/emulated-h200-2026-12-06/call1/bench_schedule_base.json"},
        "text": "domino graphs / tp graphs 1.028, tp eager / plain 0.990 (the host ran slow "
                "in the eager domino rows: probe 12 ms). With `--mb-streams 2` "
                "(bench_schedule_lanes.json, same call): domino graphs 79.99 ms against tp "
                "graphs 80.98, 0.988; peak reserved 27.5 GB against 22.9.",
    },
    {
        "title": "The schedules' own cost with one graph per step: one H200, tp 1, 2026-12-03",
        "where": "one H200, torch 2.11, bf16, llama3-3b (28 layers), seq 1024, mbs 2; eager "
                 "and CUDA graphs (`--graph-scope step`)",
        "render": bench_schedule,
        "args": {"file": "reports/emulated-h200-2026-12-03c/bench_schedule_step_1.json"},
        "text": "One of seven runs; domino graphs / tp graphs 1.035 here, median 1.035 "
                "[1.022, 1.036] over eight, 1.043 with a graph per segment in the same call; "
                "tp eager / plain median 1.005 [0.994, 1.011] "
                "(reports/emulated-h200-2026-12-03c/README.md).",
    },
    {
        "title": "Domino's knobs, swept by `domino-prof tune` (emulated comm)",
        "where": "one H200, 2026-12-03; TP 8, seq 4096, CUDA graphs",
        "render": tune_rows,
        "args": {"runs": ["reports/emulated-h200-fidelity-2026-12-03/tune/tune.json",
                          "reports/emulated-h200-2026-12-03b/tune-*/tune.json",
                          "reports/emulated-h200-2026-12-03c/tune-*/tune.json"]},
        "text": "Each row one candidate; tp is timed at its own settings in each sweep and its "
                "best is the reference. The first sweep's carveout rows are of the carveout "
                "before it took effect (cuBLAS ignored it); the later ones take the cuBLASLt "
                "path (reference_model/carveout.py). The last sweep (comm CTAs) ran with one "
                "CUDA graph per step, the others with a graph per segment. Every collective "
                "is an emulated kernel.",
    },
    {
        "title": "The schedules' own cost re-run: one H200, tp 1 (no collectives), 2026-12-03",
        "where": "one H200, torch 2.11, bf16, llama3-3b (28 layers), seq 1024, mbs 2; eager "
                 "and CUDA graphs",
        "render": bench_schedule,
        "args": {"file": "reports/emulated-h200-2026-12-03b/bench_schedule.json"},
        "text": "bench_schedule.py after issue 34's schedule options (each off by default), "
                "one run; bench_schedule.txt beside it has the ratios.",
    },
    {
        "title": "The schedules' own cost: one H200, tp 1 (no collectives)",
        "where": "one H200, torch 2.11, bf16, llama3-3b (28 layers), seq 1024, mbs 2",
        "render": bench_schedule,
        "args": {"file": "reports/schedule-h200/bench_schedule.json"},
        "text": "`plain` is autograd on the unsharded model, `plain-mb` the same with 2 "
                "micro-batches. The later runs and what the profiles say: "
                "reports/schedule-h200/README.md.",
    },
    {
        "title": "tp 2 on 2xH200 (NCCL), with the previous autograd-based schedule",
        "where": "2xH200 NVLink, torch 2.11, NCCL 2.28; llama3-3b, seq 4096, mbs 2",
        "render": mode_repeats,
        "args": {"runs": ["reports/h200x2-llama3-3b-tp2-seq4096-repeats/*.json",
                          "reports/h200x2-llama3-3b-tp2-seq4096/run.json",
                          "reports/h200x2-llama3-3b-tp2-seq4096-cudagraphs/run.json"],
                 "modes": ["tp", "nocomm", "domino"]},
        "text": "Real collectives, but the code before the current schedule (no 2-GPU machine "
                "was lent since; issue 15): the runs whose run.json is committed. What the "
                "traces say: reports/overheads_h200x2.md.",
    },
    {
        "title": "tp 2 on 2xH200 (NCCL): larger micro-batches and llama3-8b, one run each",
        "where": "2xH200 NVLink, the previous autograd-based schedule, seq 4096",
        "render": run_rows,
        "args": {"runs": ["reports/h200x2-llama3-3b-tp2-seq4096-mbs-scaling/run_mbs*.json",
                          "reports/h200x2-llama3-8b-tp2-seq4096/*.json"],
                 "modes": ["tp", "nocomm", "domino"]},
        "text": "More work per micro-batch takes eager domino off the host's limit.",
    },
    {
        "title": "What if: the replay's predictions against the run that applies the change",
        "where": "see each row",
        "render": whatif,
        "args": {"files": ["reports/whatif/cpu_gloo_tp2_nocomm.json",
                           "reports/whatif/h200/graphs_*.json",
                           "reports/whatif/h200/nocomm_*.json"]},
        "text": "docs/METRICS.md \"Extension: replay model\"; the runs: "
                "reports/whatif/h200/README.md.",
    },
    {
        "title": "Trace-engine speed against HTA",
        "where": "the project's 2-core CPU machine",
        "render": bench_sets,
        "args": {"file": "reports/bench-analyzer/issue23-round5.json",
                 "skip": ("start-up",),
                 "columns": [["domino-prof wall s", "ours_wall_s", ".2f"],
                             ["HTA / ours wall", "HTA/ours wall", ".1f"],
                             ["HTA / ours cpu", "HTA/ours cpu", ".1f"],
                             ["ours / decode floor (2 procs)",
                              "ours/floor ranks at once wall|ours/floor 2 procs wall", ".2f"],
                             ["peak PSS / JSON", "ours_peak_pss_over_json", ".2f"]]},
        "text": "Each repeat runs the tools of a set in turn; a ratio is taken within a repeat. "
                "The sets, the targets and the earlier rounds: reports/bench-analyzer/.",
    },
    {
        "title": "Start-up: a 2-event trace end to end",
        "where": "the project's 2-core CPU machine",
        "render": bench_sets,
        "args": {"file": "reports/bench-analyzer/issue23-round5.json",
                 "skip": ("tiled-real", "kernel-heavy", "kernel-flows", "one-big-file"),
                 "columns": [["domino-prof wall s", "ours_wall_s", ".2f"],
                             ["ours / `import pandas`", "ours/import pandas wall", ".2f"],
                             ["ours / bare `python`", "ours/python wall", ".2f"]]},
        "text": "`domino-prof analyze` of a trace of two events, against a bare interpreter "
                "and `python -c \"import pandas\"` in the same alternating runs.",
    },
]


def render() -> str:
    lines = [
        "# Measured results",
        "",
        "<!-- generated by scripts/gen_results.py from the JSON under reports/: do not edit; "
        "`python3 scripts/gen_results.py` rewrites it, tests/test_results_doc.py checks it -->",
        "",
        "Every table below is read from the committed files it names. Rows of one GPU at "
        "TP >= 2 are of **emulated** collectives (docs/EMULATION.md). How each was measured: "
        "the report directory's README and `bash benchmarks/gpu_session.sh --list`.",
    ]
    for s in SECTIONS:
        lines += ["", f"## {s['title']}", "", f"*{s['where']}.* {s['text']}", ""]
        lines += s["render"](**s["args"])
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/RESULTS.md differs")
    a = ap.parse_args(argv)
    text = render()
    if a.check:
        if not OUT.is_file() or OUT.read_text(encoding="utf-8") != text:
            print(f"{_rel(OUT)} is not what scripts/gen_results.py writes from reports/; run "
                  "python3 scripts/gen_results.py and commit it", file=sys.stderr)  # fmt: skip
            return 1
        return 0
    tmp = OUT.with_name(f".{OUT.name}.tmp")  # all or nothing: never a half-written page
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(OUT)
    print(f"wrote {_rel(OUT)} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
