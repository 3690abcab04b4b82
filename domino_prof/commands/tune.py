"""`domino-prof tune`: sweep Domino's schedule knobs, rank them by the fraction of the
no-comm bound they reach, and print the winning flags.

For one model / tp / seq / mbs (the same options as `run`), the grid (``--grid KEY=V,...``,
repeatable; every combination is a candidate) ranges over ``splits``, ``col_splits``,
``split_sizes`` (``even`` or ``3:1``-style sizes that sum to --mbs; sizes set the
micro-batches, so ``splits`` does not multiply them), ``comm_ctas`` (``default`` or N),
``sm_carveout`` (``default`` or N SMs left free by the GEMMs; ``--carveout-scope`` is a
sweep-wide option), ``comm_engine`` (``sm`` or ``ce``: emulated copy-engine collectives,
``--comm emulate`` only; a ``ce`` candidate with ``comm_ctas`` N is refused and listed
skipped), ``wgrad_in`` (``joint`` or ``accumulate``: how domino's column-parallel weight
gradients read the micro-batches; not a tp knob), ``mb_streams`` (``1`` or ``2``: domino's
two micro-batches on one stream or a stream each; not a tp knob; 2 needs 2 micro-batches
and, with graphs, one graph per step, else the candidate is skipped), ``sp_wgrad_input``
(``keep`` or ``regather``: domino-sp's weight gradients read the forward's gathered norm
outputs or gather them again; ``--schedule domino-sp`` only, else the candidate is
skipped), ``carveout_auto`` (``on`` or ``off``: ``--carveout-auto``, domino-sp's backward
carveout beside the SM stand-in; measured to help llama3-3b and cost llama3-8b at the
headline, so it is worth a sweep per model; ``--schedule domino-sp`` with CUDA graphs only),
``cuda_graphs`` (``off``/``on``) and ``mbs`` (sequences per step: a
workload knob, measured on one H200 to be the one that moved domino / nocomm, 0.726 at
mbs 2 to 0.803 at mbs 8 on the emulated headline). Each candidate is one `run` (the same
launcher and run directory: ``OUT/<candidate>/run.json``) of the modes domino, nocomm
and, once registered, domino-nocomm. tp takes none of the split knobs: it is timed once
at each of its own settings (``comm_ctas`` x ``cuda_graphs`` x ``sm_carveout`` x ``mbs`` x
``comm_engine``,
riding in the first candidate run that has those settings) and the fastest *of the
candidate's mbs* is the reference (the same tokens per step), never a tp slowed by the
candidate's knob.

``--schedule domino-sp`` tunes Domino over sequence parallelism instead: each candidate
runs domino-sp, nocomm and domino-sp-nocomm (its split's own cost), and
"domino" below reads domino-sp (tune.json's ``schedule`` says which; its
``domino_step_ms`` is that schedule's step). Its knobs are the same keys (``col_splits``
and ``mb_streams`` apply to domino only: those candidates are skipped); measured on one
H100 (emulated TP 8, reports/emulated-h100-2026-12-06c) it is the schedule nearest the
bound, with ``--sm-carveout`` and ``--high-priority-comm``.

The ranking key is domino / nocomm: nocomm's timed step over domino's (the fraction of
the no-comm bound, paired by block inside the candidate's run, with its 95% interval).
domino / best tp is best tp's step over domino's, from two runs: unpaired, no interval.
The limits decomposition is the candidate run's ``limits`` (analysis.limits) when it has
one. ``OUT/tune.json`` keeps every candidate; the winner is printed as a ready-to-paste
`run` command line.
"""

from __future__ import annotations

import itertools
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import typer

from domino_prof.commands._common import user_errors
from domino_prof.commands.run import _check_out, _opt, _positive
from domino_prof.errors import ConfigError, RunError
from domino_prof.reference_model import modes as _modes
from domino_prof.rundata import host_speed_note, mode_ratio

TUNE_SCHEMA = "domino-prof/tune"
TUNE_VERSION = 1
DEFAULT_TOP = 5
# a candidate's few timed steps (raise with --steps / --block-steps)
TUNE_STEPS, TUNE_BLOCK, TUNE_WARMUP, TUNE_PROFILE = 40, 4, 2, 1


# --- the grid --------------------------------------------------------------------------------
def _int_value(key: str, v: str) -> int:
    try:
        return int(v)
    except ValueError:
        raise ConfigError(f"--grid {key}: {v!r} is not a whole number") from None


def _sizes_value(key: str, v: str) -> tuple[int, ...] | None:
    if v == "even":
        return None
    try:
        return tuple(int(x) for x in v.split(":"))
    except ValueError:
        raise ConfigError(
            f"--grid {key}: {v!r} is neither 'even' nor sizes like 3:1 (sequences per "
            "micro-batch, ':'-separated)"
        ) from None


def _ctas_value(key: str, v: str) -> int | None:
    return None if v == "default" else _int_value(key, v)


def _choice_value(choices: str):
    """The grid's parser of a knob that is ``default`` (run's: None) or one of
    reference_model.config's tuple named ``choices`` (imported when a value is parsed)."""

    def parse(key: str, v: str) -> str | None:
        from domino_prof.reference_model import config

        allowed = getattr(config, choices)
        if v == "default":
            return None
        if v not in allowed:
            raise ConfigError(f"--grid {key}: {v!r} is not one of default, {', '.join(allowed)}")
        return v

    return parse


def _bool_value(key: str, v: str) -> bool:
    on = {"on": True, "true": True, "1": True, "yes": True}
    off = {"off": False, "false": False, "0": False, "no": False}
    if v.lower() not in {**on, **off}:
        raise ConfigError(f"--grid {key}: {v!r} is not on or off")
    return {**on, **off}[v.lower()]


def _auto_value(key: str, v: str) -> bool | None:
    return None if v == "default" else _bool_value(key, v)


# key -> (parser of one value, the value when the grid does not name the key: run's default)
GRID_KEYS = {
    "splits": (_int_value, 2),
    "col_splits": (_int_value, 1),
    "split_sizes": (_sizes_value, None),
    "comm_ctas": (_ctas_value, None),
    "cuda_graphs": (_bool_value, False),
    "sm_carveout": (_ctas_value, None),  # SMs GEMMs leave free (default: none)
    "mbs": (_int_value, None),  # sequences per step (default: --mbs); a workload knob
    # how collectives move data (default: run's, sm)
    "comm_engine": (_choice_value("COMM_ENGINES"), None),
    # domino's w_in gradients (default: run's, joint)
    "wgrad_in": (_choice_value("WGRAD_INS"), None),
    "mb_streams": (_ctas_value, None),  # domino's micro-batch lanes (default: run's, 1)
    # domino-sp's weight gradients' gathered input (default: run's, keep)
    "sp_wgrad_input": (_choice_value("SP_WGRAD_INPUTS"), None),
    # domino-sp's backward carveout beside the SM stand-in (default: run's, on)
    "carveout_auto": (_auto_value, None),
}
# tp takes these (its best at the candidate's mbs: the reference)
TP_KEYS = ("comm_ctas", "cuda_graphs", "sm_carveout", "mbs", "comm_engine")


def parse_grid(items: list[str] | None) -> dict[str, list]:
    """``--grid KEY=V1,V2`` options -> {key: [values]} over every key of GRID_KEYS (a key
    not given: run's default alone). One ConfigError line for a malformed item, an
    unknown or repeated key, or a bad value."""
    grid: dict[str, list] = {}
    for item in items or []:
        key, sep, values = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key or not values.strip():
            raise ConfigError(
                f"--grid {item!r} is not KEY=V1,V2,...; e.g. --grid splits=1,2 --grid "
                "col_splits=1,2,4"
            )
        if key not in GRID_KEYS:
            raise ConfigError(f"--grid {item!r}: unknown key {key!r}; keys: {', '.join(GRID_KEYS)}")
        if key in grid:
            raise ConfigError(f"--grid {key} given twice; give all its values in one: "
                              f"--grid {key}=A,B")  # fmt: skip
        parse = GRID_KEYS[key][0]
        vals = [parse(key, v.strip()) for v in values.split(",")]
        grid[key] = list(dict.fromkeys(vals))  # in order, repeats dropped
    return {k: grid.get(k, [default]) for k, (_, default) in GRID_KEYS.items()}


@dataclass(frozen=True)
class Settings:
    """One candidate's knobs (the effective ones: sizes set the micro-batches)."""

    splits: int
    col_splits: int
    split_sizes: tuple[int, ...] | None
    comm_ctas: int | None
    cuda_graphs: bool
    sm_carveout: int | None = None
    mbs: int | None = None  # None: the sweep's --mbs
    comm_engine: str | None = None  # None: run's default (sm)
    wgrad_in: str | None = None  # None: run's default (joint); not tp's (one micro-batch)
    mb_streams: int | None = None  # None: run's default (1); not tp's (one micro-batch)
    sp_wgrad_input: str | None = None  # None: run's default (keep); --schedule domino-sp
    carveout_auto: bool | None = None  # None: run's default (on); --schedule domino-sp

    def fields(self) -> dict:
        """The RunConfig fields the candidate sets (mbs and the engine only when given)."""
        f = {"splits": self.splits, "col_splits": self.col_splits,
             "split_sizes": self.split_sizes, "comm_ctas": self.comm_ctas,
             "cuda_graphs": self.cuda_graphs, "sm_carveout": self.sm_carveout}  # fmt: skip
        if self.comm_engine is not None:
            f["comm_engine"] = self.comm_engine
        if self.wgrad_in is not None:
            f["wgrad_in"] = self.wgrad_in
        if self.mb_streams is not None:
            f["mb_streams"] = self.mb_streams
        if self.sp_wgrad_input is not None:
            f["sp_wgrad_input"] = self.sp_wgrad_input
        if self.carveout_auto is not None:
            f["carveout_auto"] = self.carveout_auto
        return f if self.mbs is None else {**f, "mbs": self.mbs}

    def tp(self) -> tuple:
        return (self.comm_ctas, self.cuda_graphs, self.sm_carveout, self.mbs, self.comm_engine)

    def text(self) -> str:
        """'splits 2 (3+1), col 2, ctas 8, graphs'."""
        s = f"splits {self.splits}"
        if self.mbs is not None:
            s = f"mbs {self.mbs}, " + s
        if self.split_sizes is not None:
            s += f" ({'+'.join(map(str, self.split_sizes))})"
        s += f", col {self.col_splits}"
        if self.comm_ctas is not None:
            s += f", ctas {self.comm_ctas}"
        if self.sm_carveout is not None:
            s += f", carveout {self.sm_carveout}"
        if self.comm_engine is not None:
            s += f", engine {self.comm_engine}"
        if self.wgrad_in is not None:
            s += f", wgrad-in {self.wgrad_in}"
        if self.mb_streams is not None:
            s += f", mb-streams {self.mb_streams}"
        if self.sp_wgrad_input is not None:
            s += f", sp-wgrad-input {self.sp_wgrad_input}"
        if self.carveout_auto is not None:
            s += f", carveout-auto {'on' if self.carveout_auto else 'off'}"
        return s + (", graphs" if self.cuda_graphs else "")

    def slug(self) -> str:
        s = f"splits{self.splits}"
        if self.mbs is not None:
            s = f"mbs{self.mbs}-" + s
        if self.split_sizes is not None:
            s += "_" + "-".join(map(str, self.split_sizes))
        s += f"-col{self.col_splits}"
        if self.comm_ctas is not None:
            s += f"-ctas{self.comm_ctas}"
        if self.sm_carveout is not None:
            s += f"-carve{self.sm_carveout}"
        if self.comm_engine is not None:
            s += f"-{self.comm_engine}"
        if self.wgrad_in is not None:
            s += f"-wgrad-{self.wgrad_in}"
        if self.mb_streams is not None:
            s += f"-streams{self.mb_streams}"
        if self.sp_wgrad_input is not None:
            s += f"-sp-{self.sp_wgrad_input}"
        if self.carveout_auto is not None:
            s += f"-auto-{'on' if self.carveout_auto else 'off'}"
        return s + ("-graphs" if self.cuda_graphs else "")

    def flags(self) -> list[str]:
        f = ["--splits", str(self.splits)]
        if self.mbs is not None:
            f += ["--mbs", str(self.mbs)]
        if self.split_sizes is not None:
            f += ["--split-sizes", ",".join(map(str, self.split_sizes))]
        if self.col_splits != 1:
            f += ["--col-splits", str(self.col_splits)]
        if self.comm_ctas is not None:
            f += ["--comm-ctas", str(self.comm_ctas)]
        if self.sm_carveout is not None:
            f += ["--sm-carveout", str(self.sm_carveout)]
        if self.comm_engine is not None:
            f += ["--comm-engine", self.comm_engine]
        if self.wgrad_in is not None:
            f += ["--wgrad-in", self.wgrad_in]
        if self.mb_streams is not None:
            f += ["--mb-streams", str(self.mb_streams)]
        if self.sp_wgrad_input is not None:
            f += ["--sp-wgrad-input", self.sp_wgrad_input]
        if self.carveout_auto is not None:
            f += ["--carveout-auto" if self.carveout_auto else "--no-carveout-auto"]
        return f + (["--cuda-graphs"] if self.cuda_graphs else [])


def candidates(grid: dict[str, list]) -> list[Settings]:
    """Every combination of the grid, in grid order, repeats (the same effective knobs)
    dropped: sizes set the micro-batches, so with sizes the ``splits`` value is theirs."""
    out: dict[Settings, None] = {}
    keys = list(GRID_KEYS)
    for combo in itertools.product(*(grid[k] for k in keys)):
        v = dict(zip(keys, combo))
        sizes = v["split_sizes"]
        splits = len(sizes) if sizes is not None else v["splits"]
        out.setdefault(Settings(splits, v["col_splits"], sizes, v["comm_ctas"],
                                v["cuda_graphs"], v["sm_carveout"], v["mbs"],
                                v["comm_engine"], v["wgrad_in"], v["mb_streams"],
                                v["sp_wgrad_input"], v["carveout_auto"]),
                        None)  # fmt: skip
    return list(out)


# the schedules tune sweeps (--schedule) and the modes a candidate runs for each
SCHEDULES = {"domino": ("domino", "nocomm", "domino-nocomm"),
             "domino-sp": ("nocomm", "domino-sp", "domino-sp-nocomm")}  # fmt: skip


def tune_modes(schedule: str = "domino") -> tuple[str, ...]:
    """A candidate's modes: the tuned schedule, nocomm and the schedule's no-comm mode
    (domino-nocomm, domino-sp-nocomm: the split's own cost) when registered (in the
    registry's order, as `run --mode all`)."""
    return tuple(n for n in _modes.names() if n in SCHEDULES[schedule])


# --- a candidate's numbers, from its run.json -------------------------------------------------
def _row(run: dict, mode: str) -> dict:
    return next((r for r in run.get("comparison") or [] if r.get("mode") == mode), {})


# run.json's limits as tune keeps them: measured (with domino-nocomm, which every
# candidate runs: split and residual) or a remainder (rest); analysis.limits
# (the occupancy figures: the cell gives the compute held longer where the tax is withheld;
# tune's JSON keeps every part of it)
LIMIT_KEYS = ("gap_ms", "split_ms", "exposed_comm_ms", "exposed_cost_ms", "overlap_tax_ms",
              "tax_withheld", "host_ms", "residual_ms", "rest_ms", "occupancy_added_ms",
              "kernel_time_added_ms", "concurrency_lost_ms", "no_compute_added_ms")


def candidate_numbers(run: dict, schedule: str = "domino") -> dict:
    """What tune reads from a candidate's run.json: the tuned schedule's (``schedule``)
    timed step and interval, its fraction of nocomm (``comparison``'s ``frac_of_nocomm``
    and interval), the schedule over its no-comm mode (domino / domino-nocomm, domino-sp /
    domino-sp-nocomm: paired blocks; None in a run without it) and the schedule's limits
    decomposition (run.json's ``limits``, ``limits_sp``: the mode registry's RUN_KEYS);
    ``host``: rundata.host_speed_note of the run (an eager candidate timed while the
    host's speed moved: its rank is partly the host's), else None."""
    m = (run.get("modes") or {}).get(schedule) or {}
    row = _row(run, schedule)
    dn = mode_ratio(run.get("modes") or {}, schedule, _modes.SPLIT_MODES[schedule])
    lim = run.get(_modes.RUN_KEYS[schedule])
    return {
        "domino_step_ms": m.get("step_ms"),
        "domino_step_ms_interval": m.get("step_ms_interval"),
        "frac_of_nocomm": row.get("frac_of_nocomm"),
        "frac_of_nocomm_interval": [row.get("frac_of_nocomm_low"), row.get("frac_of_nocomm_high")],
        "of_domino_nocomm": dn.value if dn is not None else None,
        "limits": {k: lim.get(k) for k in LIMIT_KEYS} if lim else None,
        "host": host_speed_note(run),
    }


def summarise(cands: list[dict], tps: list[dict]) -> tuple[list[dict], dict | None]:
    """Rank the candidates (in place: ``rank``, ``vs_best_tp``) by domino / nocomm, the
    best first, failed and skipped ones unranked; returns (ranked, the best tp entry).
    A candidate's tp is the fastest tp of *its* mbs (the same tokens per step, so the
    step times' ratio is the throughputs'); the returned entry is the best tp of the
    first candidate's mbs (the whole sweep's when mbs is not swept)."""
    timed = [t for t in tps if t.get("step_ms")]

    def best_at(mbs):
        these = [t for t in timed if (t.get("settings") or {}).get("mbs") == mbs]
        return min(these, key=lambda t: t["step_ms"]) if these else None

    for c in cands:
        d = c.get("domino_step_ms")
        b = best_at((c.get("settings") or {}).get("mbs"))
        c["vs_best_tp"] = b["step_ms"] / d if b and d else None
        c["best_tp_ms"] = b["step_ms"] if b else None
    best_tp = best_at((cands[0].get("settings") or {}).get("mbs")) if cands else None
    ok = [c for c in cands if c["status"] == "ok" and c.get("frac_of_nocomm") is not None]
    ranked = sorted(ok, key=lambda c: -c["frac_of_nocomm"])
    for i, c in enumerate(ranked):
        c["rank"] = i + 1
    for c in cands:
        c.setdefault("rank", None)
    return ranked, best_tp


# --- printing ----------------------------------------------------------------------------------
def _ci(v, lo_hi, spec: str) -> str:
    if v is None:
        return "n/a"
    lo, hi = (lo_hi or [None, None])[:2]
    return format(v, spec) + ("" if lo is None or hi is None else
                              f" [{format(lo, spec)}, {format(hi, spec)}]")  # fmt: skip


def _limits_text(lim: dict | None) -> str:
    """A candidate's limits in one cell: the gap, then its parts as run.json has them
    (measured: split, exposed with its step cost, tax, host, residual; a remainder:
    exposed, tax, host, rest); a part that is null is left out, a withheld tax says so,
    with the compute held longer by occupancy where run.json has it."""
    if not lim:
        return "n/a"
    parts = [f"gap {lim['gap_ms']:.2f}"]
    if lim.get("split_ms") is not None:
        parts.append(f"split {lim['split_ms']:.2f}")
    cost = lim.get("exposed_cost_ms")
    parts.append(f"exposed {lim['exposed_comm_ms']:.2f}"
                 + (f" (cost {cost:.2f})" if cost is not None else ""))  # fmt: skip
    if lim.get("tax_withheld"):
        held = lim.get("occupancy_added_ms")  # the tax counted once (run.json since 12-08)
        parts.append("tax n/a (compute beside compute)" if held is None else
                     f"tax n/a, compute held longer {held:.2f} (by occupancy)")  # fmt: skip
    for key, name in (("overlap_tax_ms", "tax"), ("host_ms", "host"),
                      ("residual_ms", "residual"), ("rest_ms", "rest")):  # fmt: skip
        if lim.get(key) is not None:
            parts.append(f"{name} {lim[key]:.2f}")
    return ", ".join(parts)


def tune_table(ranked: list[dict], *, top: int, best_tp: dict | None, title: str,
               schedule: str = "domino"):  # fmt: skip
    from rich.table import Table

    d = schedule
    dn = any(c.get("of_domino_nocomm") is not None for c in ranked)
    by_mbs = any((c.get("settings") or {}).get("mbs") is not None for c in ranked)
    t = Table(title=title, caption=(
        f"{d} / nocomm: nocomm's timed step over {d}'s (the ranking key, 95% interval "
        f"over paired blocks); {d} / best tp: "
        + (f"the fastest tp of the candidate's mbs over {d}'s, two runs, no interval"
           if by_mbs else
           f"tp's best ({best_tp['settings_text']}, {best_tp['step_ms']:.2f} ms) over "
           f"{d}'s, two runs, no interval" if best_tp else "no tp timed")
        + "; limits: ms per profiled step"))  # fmt: skip
    for h in ["#", "settings", f"{d} ms", f"{d} / nocomm", *([f"{d} / {d}-nocomm"] if dn
              else []), f"{d} / best tp", "limits (ms)"]:  # fmt: skip
        t.add_column(h, justify="left" if h in ("settings", "limits (ms)") else "right",
                     no_wrap=h == "settings")
    for c in ranked[:top]:
        cells = [str(c["rank"]), c["settings_text"],
                 _ci(c["domino_step_ms"], c["domino_step_ms_interval"], ".2f"),
                 _ci(c["frac_of_nocomm"], c["frac_of_nocomm_interval"], ".3f")]  # fmt: skip
        if dn:
            v = c.get("of_domino_nocomm")
            cells.append("n/a" if v is None else f"{v:.3f}")
        v = c.get("vs_best_tp")
        cells += ["n/a" if v is None else f"{v:.3f}", _limits_text(c.get("limits"))]
        t.add_row(*cells)
    return t


def run_command(base_flags: list[str], s: Settings, schedule: str = "domino") -> str:
    """The candidate's `run` line: the sweep's flags less those the candidate sets itself
    (its --mbs, its --sm-carveout: each flag once, with the candidate's value), then its
    own, then ``--mode`` the tuned schedule."""
    own = {f for f in s.flags() if f.startswith("--")}
    if s.comm_ctas is None:  # the sweep's --comm-ctas-scope: nothing to scope here
        own.add("--comm-ctas-scope")
    base, i = [], 0
    while i < len(base_flags):
        flag = base_flags[i]
        n = 2 if flag in _VALUED else 1  # the flag and its value
        if flag not in own:
            base += base_flags[i:i + n]
        i += n
    return shlex.join(["domino-prof", "run", *base, *s.flags(), "--mode", schedule])


# the flags of Settings.flags() that take a value
_VALUED = ("--mbs", "--sm-carveout", "--comm-ctas", "--splits", "--split-sizes", "--col-splits",
           "--comm-ctas-scope")


# --- the command ----------------------------------------------------------------------------
def register(app: typer.Typer) -> None:
    @app.command()
    @user_errors
    def tune(
        grid: list[str] = typer.Option(None, "--grid", metavar="KEY=V1,V2", help=(
            "A swept knob and its values, repeatable; the candidates are every "
            "combination. Keys: splits (N), col_splits (K), split_sizes (even or sizes "
            "such as 3:1, summing to --mbs), comm_ctas (default or N), sm_carveout "
            "(default or N), cuda_graphs (off, on), mbs (N: sequences per step; each "
            "candidate meets tp at its own mbs), comm_engine (default, sm, ce; ce: "
            "--comm emulate only), wgrad_in (default, joint, accumulate), mb_streams (default, 1, 2), sp_wgrad_input (default, keep, regather; --schedule domino-sp), carveout_auto (default, on, off; --schedule domino-sp, cuda_graphs=on). A key not given keeps run's default.")),  # fmt: skip
        schedule: str = typer.Option("domino", "--schedule", help=(
            "The schedule tuned: domino (all-reduce TP) or domino-sp (over sequence "
            "parallelism); each candidate runs it and nocomm.")),  # fmt: skip
        tp: int = _opt("tp"),
        seq: int = _opt("seq"),
        model: str = _opt("model"),
        mbs: int = _opt("mbs"),
        layers: int = typer.Option(0, help="Override the preset's layer count (0: keep)."),
        device: str = _opt("device"),
        dtype: str = _opt("dtype"),
        comm: str = _opt("comm"),
        comm_profile: str = _opt("comm_profile", metavar="NAME|FILE"),
        attention: str = _opt("attention"),
        compile: bool = _opt("compile"),
        high_priority_comm: bool | None = _opt("high_priority_comm"),
        sm_carveout: int = _opt("sm_carveout"),
        comm_engine: str = _opt("comm_engine"),
        carveout_scope: str = _opt("carveout_scope"),
        comm_ctas_scope: str = _opt("comm_ctas_scope"),
        graph_scope: str = _opt("graph_scope"),
        seed: int = _opt("seed"),
        timed_steps: int = typer.Option(TUNE_STEPS, "--steps", help="Timed steps per mode "
                                        "of each candidate (few, for speed; raise for "
                                        "tighter intervals)."),  # fmt: skip
        block_steps: int = typer.Option(TUNE_BLOCK, "--block-steps", help="Timed steps per "
                                        "block (each block's median: one sample of the 95% "
                                        "intervals)."),  # fmt: skip
        warmup_steps: int = typer.Option(TUNE_WARMUP, "--warmup", help="Warm-up steps per mode."),
        profile_steps: int = typer.Option(TUNE_PROFILE, "--profile-steps",
                                          help="Profiled steps per mode."),  # fmt: skip
        timeout_s: float = _opt("timeout_s", callback=_positive),
        top: int = typer.Option(DEFAULT_TOP, "--top", help="Candidates shown (tune.json keeps "
                                "all)."),  # fmt: skip
        analyze: bool = typer.Option(True, help="Analyse each candidate's traces (run.json's "
                                     "limits decomposition)."),  # fmt: skip
        out: Path = typer.Option(None, "-o", "--output", "--out", metavar="DIR", help=(
            "Directory of the candidates' run directories and tune.json [default: "
            "runs/<time>-tune-<model>-tp<N>].")),  # fmt: skip
    ) -> None:
        """Sweep Domino's knobs; rank them by domino / nocomm.

        Each candidate is a `run` of domino + nocomm (+ domino-nocomm) under OUT (with
        --schedule domino-sp: domino-sp + nocomm); tp is
        timed at each of its own settings and its best is the reference. Prints the best
        few, writes OUT/tune.json and the winner's `run` command line."""
        from domino_prof.reference_model import launcher
        from domino_prof.reference_model.config import RunConfig

        if top < 1:
            raise ConfigError(f"--top must be >= 1, got {top}")
        if schedule not in SCHEDULES:
            raise ConfigError(f"--schedule must be one of {', '.join(SCHEDULES)}, got "
                              f"{schedule!r}")  # fmt: skip
        if launcher.under_torchrun():
            raise ConfigError("`domino-prof tune` starts each candidate's ranks itself; run it "
                              "without torchrun")  # fmt: skip
        g = parse_grid(grid)
        swept = {i.partition("=")[0].strip().replace("-", "_") for i in grid or []}
        if "sm_carveout" not in swept:
            g["sm_carveout"] = [sm_carveout]  # --sm-carveout: the one value, not swept
        if comm_engine != "sm" and "comm_engine" not in swept:
            g["comm_engine"] = [comm_engine]  # --comm-engine: likewise
        cands = candidates(g)
        base = {"model": model, "layers": layers, "tp": tp, "seq": seq, "mbs": mbs,
                "dtype": dtype, "comm": comm, "comm_profile": comm_profile or "",
                "attention": attention, "compile": compile,
                "high_priority_comm": high_priority_comm, "carveout_scope": carveout_scope,
                "comm_ctas_scope": comm_ctas_scope, "graph_scope": graph_scope, "seed": seed,
                "timed_steps": timed_steps, "block_steps": block_steps,
                "warmup_steps": warmup_steps, "profile_steps": profile_steps,
                "timeout_s": timeout_s}  # fmt: skip
        device = launcher.resolve_device(device, tp=tp, emulated=comm == "emulate")
        plan = _plan(cands, base, device, RunConfig, schedule)
        for cfg in (p["cfg"] for p in plan if p["cfg"] is not None):
            launcher.check_torch_knobs(cfg)
        first = next(p["cfg"] for p in plan if p["cfg"] is not None)
        if first.emulated:
            import importlib.util

            if importlib.util.find_spec("triton") is None:
                raise ConfigError("--comm emulate needs Triton (its collectives are Triton "
                                  "kernels): pip install triton")  # fmt: skip
        if out is None:
            out = Path("runs") / (f"{time.strftime('%Y%m%d-%H%M%S')}-tune-{first.model.name}"
                                  f"-tp{tp}")  # fmt: skip
        _check_out(out)
        from domino_prof import runs

        with runs.claim(out):
            doc = _sweep(plan, out, analyze=analyze, first=first, schedule=schedule)
            doc["base_flags"] = _base_flags(first, layers=layers, ctas_scope=comm_ctas_scope)
            _finish(doc, out, top=top)


def _plan(cands: list[Settings], base: dict, device: str, RunConfig,
          schedule: str = "domino") -> list[dict]:  # fmt: skip
    """Every run to make: each candidate's validated config (or why it is skipped), tp
    added to the first candidate of each tp setting; a tp setting no valid candidate has
    gets a run of its own. A grid value refused in every candidate it is in is a mistake
    of the grid: its one ConfigError line."""
    plan, errors = [], {}
    for i, s in enumerate(cands):
        try:
            cfg = RunConfig.from_options(device=device, modes=tune_modes(schedule),
                                         **_graph_fields(base, s.fields()))  # fmt: skip
            why = None
        except ConfigError as e:
            cfg, why = None, str(e)
        if s.sp_wgrad_input is not None and not _modes.get(schedule).sequence_parallel:
            cfg, why = None, (f"--sp-wgrad-input {s.sp_wgrad_input} applies to a sequence-"
                              "parallel schedule: tune it with --schedule domino-sp")  # fmt: skip
        if s.carveout_auto is not None and not _modes.get(schedule).sequence_parallel:
            cfg, why = None, ("carveout_auto acts on domino-sp only (carveout.auto_carveout): "
                              "tune it with --schedule domino-sp")  # fmt: skip
        elif s.carveout_auto is not None and not s.cuda_graphs:  # eager: the same as off
            cfg, why = None, ("carveout_auto acts with CUDA graphs only (carveout."
                              "auto_carveout): tune it with cuda_graphs=on")  # fmt: skip
        plan.append({"name": f"c{i:02d}-{s.slug()}", "settings": s, "cfg": cfg, "error": why,
                     "tp": False})  # fmt: skip
        errors[s] = why
    for key in GRID_KEYS:
        for v in {getattr(s, key) for s in cands}:
            these = [errors[s] for s in cands if getattr(s, key) == v]
            if all(these):
                raise ConfigError(these[0])
    tp_plan = []
    for ts in dict.fromkeys(s.tp() for s in cands):
        host = next((p for p in plan if p["cfg"] is not None and p["settings"].tp() == ts), None)
        if host is not None:
            host["tp"] = True
            host["cfg"] = _with_modes(host["cfg"], ("tp", *tune_modes(schedule)))
            continue
        ctas, graphs, carve, mbs, engine = ts
        s = Settings(1, 1, None, ctas, graphs, carve, mbs, engine)
        fields = _graph_fields(base, {"comm_ctas": ctas, "cuda_graphs": graphs,
                               "sm_carveout": carve, **({} if mbs is None else {"mbs": mbs}),
                               **({} if engine is None else {"comm_engine": engine})})
        cfg = RunConfig.from_options(device=device, modes=("tp",), **fields)
        name = ("tp" + ("" if mbs is None else f"-mbs{mbs}") + ("" if ctas is None else
                f"-ctas{ctas}") + ("" if engine is None else f"-{engine}")
                + ("-graphs" if graphs else ""))  # fmt: skip
        tp_plan.append({"name": name, "settings": s, "cfg": cfg, "error": None, "tp": True,
                        "tp_only": True})  # fmt: skip
    return plan + tp_plan


def _graph_fields(base: dict, fields: dict) -> dict:
    """A candidate's RunConfig fields: the sweep-wide --graph-scope applies to the
    candidates with CUDA graphs, --comm-ctas-scope to those with --comm-ctas N (tp's own
    settings too); the others have none to scope."""
    f = {**base, **fields}
    if not f.get("cuda_graphs"):
        f["graph_scope"] = "segment"
    if f.get("comm_ctas") is None:
        f["comm_ctas_scope"] = "all"
    return f


def _with_modes(cfg, names: tuple[str, ...]):
    from dataclasses import replace

    order = [n for n in _modes.names() if n in names]
    return replace(cfg, modes=tuple(order))


def _sweep(plan: list[dict], out: Path, *, analyze: bool, first, schedule: str = "domino") -> dict:
    """Run every planned run under ``out`` (the same launcher and run directory as
    `run`); a failed run is kept with its error line and the sweep goes on."""
    from domino_prof import runs
    from domino_prof.reference_model import launcher
    from domino_prof.reference_model.config import comm_info

    cands, tps = [], []
    todo = [p for p in plan if p["cfg"] is not None]
    for n, p in enumerate(todo, 1):
        cfg, d = p["cfg"], out / p["name"]
        print(f"[domino-prof] tune {n}/{len(todo)}: {p['name']} ({', '.join(cfg.modes)})",
              file=sys.stderr, flush=True)  # fmt: skip
        try:
            with runs.claim(d, run_json=runs.incomplete_run(cfg)):
                try:
                    launcher.spawn_ranks(cfg, d)
                    p["run"] = runs.assemble(cfg, d, analyze=analyze)
                except KeyboardInterrupt:
                    raise runs.Interrupted(d) from None
        except RunError as e:
            if isinstance(e, runs.Interrupted):
                raise
            p["error"] = str(e)
            print(f"[domino-prof] tune: {p['name']} failed: {e}", file=sys.stderr, flush=True)
    for p in plan:
        s, run = p["settings"], p.get("run")
        status = "skipped" if p["cfg"] is None else ("failed" if run is None else "ok")
        if p["tp"]:
            tm = ((run or {}).get("modes") or {}).get("tp") or {}
            tps.append({"settings": dict(zip(TP_KEYS, s.tp())),
                        "settings_text": _tp_text(s), "run_dir": p["name"],
                        "step_ms": tm.get("step_ms"),
                        "step_ms_interval": tm.get("step_ms_interval")})  # fmt: skip
        if p.get("tp_only"):
            continue
        entry = {"name": p["name"], "run_dir": p["name"] if p["cfg"] is not None else None,
                 "settings": s.fields(), "settings_text": s.text(), "status": status,
                 "error": p["error"]}  # fmt: skip
        entry.update(candidate_numbers(run or {}, schedule))
        cands.append(entry)
    ranked, best_tp = summarise(cands, tps)
    return {"schema": TUNE_SCHEMA, "version": TUNE_VERSION, "config": first.to_dict(),
            "schedule": schedule, "modes": list(tune_modes(schedule)),
            "ranking": "frac_of_nocomm", "candidates": cands,
            "tp": tps, "best_tp": best_tp, "ranked": [c["name"] for c in ranked],
            "comm": comm_info(first)}  # fmt: skip


def _tp_text(s: Settings) -> str:
    parts = [f"mbs {s.mbs}"] if s.mbs is not None else []
    parts += [f"ctas {s.comm_ctas}" if s.comm_ctas is not None else "default ctas"]
    parts += [f"carveout {s.sm_carveout}"] if s.sm_carveout is not None else []
    parts += [f"engine {s.comm_engine}"] if s.comm_engine is not None else []
    return ", ".join(parts + (["graphs"] if s.cuda_graphs else []))


def _base_flags(cfg, *, layers: int, ctas_scope: str = "all") -> list[str]:
    """The `run` flags of what every candidate shares (as resolved: model, seq, dtype);
    ``ctas_scope``: the sweep's --comm-ctas-scope (run_command keeps it for a candidate
    with --comm-ctas N only)."""
    f = ["--model", cfg.model.name]
    if layers:
        f += ["--layers", str(layers)]
    f += ["--tp", str(cfg.tp), "--seq", str(cfg.seq), "--mbs", str(cfg.mbs), "--device",
          cfg.device, "--dtype", cfg.dtype, "--comm", cfg.comm]  # fmt: skip
    if cfg.emulated and cfg.comm_profile:
        f += ["--comm-profile", cfg.comm_profile]
    if cfg.attention != "auto":
        f += ["--attention", cfg.attention]
    f += ["--compile"] if cfg.compile else []
    if cfg.high_priority_comm:  # on CUDA the default: said anyway, so the line stands alone
        f += ["--high-priority-comm"]
    elif cfg.device == "cuda":
        f += ["--no-high-priority-comm"]
    if cfg.sm_carveout is not None:
        f += ["--sm-carveout", str(cfg.sm_carveout)]
    if cfg.carveout_scope != "overlap":
        f += ["--carveout-scope", cfg.carveout_scope]
    if cfg.graph_scope != "segment":
        f += ["--graph-scope", cfg.graph_scope]
    if ctas_scope != "all":
        f += ["--comm-ctas-scope", ctas_scope]
    return f + ["--seed", str(cfg.seed)]


def _finish(doc: dict, out: Path, *, top: int) -> None:
    """The winner's command line into the document, tune.json written, the table and the
    winner printed."""
    from rich.console import Console

    from domino_prof.io import atomic_write_json
    from domino_prof.rundata import comm_label

    schedule = doc.get("schedule", "domino")
    by_name = {c["name"]: c for c in doc["candidates"]}
    ranked = [by_name[n] for n in doc["ranked"]]
    win = ranked[0] if ranked else None
    if win is not None:
        s = Settings(**{**win["settings"], "split_sizes": tuple(win["settings"]["split_sizes"])
                        if win["settings"]["split_sizes"] else None})  # fmt: skip
        doc["winner"] = {"name": win["name"], "settings": win["settings"], "flags": s.flags(),
                         "command": run_command(doc["base_flags"], s, schedule)}  # fmt: skip
    else:
        doc["winner"] = None
    atomic_write_json(out / "tune.json", doc)
    cfg = doc["config"]
    label = comm_label({"comm": doc.get("comm")})
    title = "  ".join(x for x in (cfg["model"]["name"], f"tp {cfg['tp']}", f"seq {cfg['seq']}",
                                  f"mbs {cfg['mbs']}", label or "") if x)  # fmt: skip
    if ranked:
        Console().print(tune_table(ranked, top=top, best_tp=doc["best_tp"], title=title,
                                   schedule=schedule))  # fmt: skip
    for c in doc["candidates"]:
        if c["status"] != "ok":
            print(f"note: {c['name']} {c['status']}: {c['error']}", file=sys.stderr)
        elif c.get("host"):  # an eager candidate timed on a host that changed speed
            print(f"note: {c['name']}: {c['host']}", file=sys.stderr)
    print(f"tune.json: {out / 'tune.json'} ({len(doc['candidates'])} candidates)",
          file=sys.stderr)  # fmt: skip
    if win is None:
        raise RunError(f"no candidate was timed; see {out / 'tune.json'}")
    print(f"winner ({win['settings_text']}): {doc['winner']['command']}")
