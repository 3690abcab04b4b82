"""Figure builders: an ``Analysis`` (and optionally a run.json dict) -> one section.

Each builder returns a :class:`Section` whose body is a plotly ``Figure``, a
:class:`Table`, a list of :class:`Card`, or an :class:`Unavailable` saying why the
figure is missing (no comm, no device activity, overheads not computed ...).
Builders select, reshape and downsample; every number they show was computed by
``domino_prof.analysis`` (derived views in ``domino_prof.analysis.timeline``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from domino_prof import __version__
from domino_prof.analysis import timeline as tl
from domino_prof.analysis.cpu_threads import busy_threads, cpu_count_of, why_text
from domino_prof.analysis.document import Analysis
from domino_prof.analysis.limits import concurrent_text, limits
from domino_prof.analysis.results import Overheads, Stats, Where
from domino_prof.reference_model.modes import SPLIT_MODES
from domino_prof.rundata import comparison_table, verdict_reason, verdict_text, verdicts

COLORS = {
    "compute": "#4E79A7",
    "comm_hidden": "#59A14F",
    "comm_exposed": "#E15759",
    "memory": "#B07AA1",
}
PART_LABELS = {
    "compute": "compute",
    "comm_hidden": "comm, hidden",
    "comm_exposed": "comm, exposed",
    "memory": "memory (copy/set)",
}
MODE_REF = "#52606D"  # tp, the reference bar of the mode comparison
MODE_OTHER = "#9AA5B1"  # every other mode: neutral (green is hidden comm only)
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
MAX_RECTS_PER_LANE = 1500
TOP_OPS = 25


# --- section model -------------------------------------------------------------
@dataclass(frozen=True)
class Unavailable:
    """Shown in place of a figure: what is missing and why."""

    reason: str


@dataclass(frozen=True)
class Card:
    label: str
    value: str
    sub: str = ""
    tone: str = ""  # "", "good", "bad"


@dataclass(frozen=True)
class Table:
    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    numeric: Sequence[bool] = ()


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    caption: str
    body: go.Figure | Table | list[Card] | Unavailable
    notes: tuple[str, ...] = ()
    extra: tuple[Any, ...] = field(default=())  # further bodies shown below the first


# --- formatting (text only; "n/a" for missing, never NaN) ------------------------
def _missing(x: object) -> bool:
    return x is None or (isinstance(x, float) and not math.isfinite(x))


MISSING = "—"  # a value one side of a comparison does not have (not 0, not n/a)


def fmt(x: object, spec: str = ".1f", unit: str = "") -> str:
    """Format a number, or "n/a" when it is missing/NaN."""
    if _missing(x):
        return "n/a"
    return f"{x:{spec}}{unit}"


def _none_if_nan(values: Iterable[float]) -> list[float | None]:
    return [None if _missing(float(v)) else float(v) for v in values]


def _base_layout(fig: go.Figure, *, height: int, **kw: Any) -> go.Figure:
    fig.update_layout(
        template="plotly_white",
        font={"family": FONT, "size": 12, "color": "#1f2933"},
        height=height,
        margin={"l": 10, "r": 10, "t": 30, "b": 40},
        hoverlabel={"font": {"family": FONT}},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        **kw,
    )
    return fig


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _frame(obj: Any, name: str) -> pd.DataFrame | None:
    f = _get(obj, name)
    return f if isinstance(f, pd.DataFrame) else None


def _unit_label(analysis: Analysis) -> str:
    return "thread" if _get(analysis, "mode") == "cpu" else "stream"


def _n_steps(analysis: Analysis) -> int:
    totals = _get(analysis, "totals") or {}
    n = totals.get("n_iterations") or 0
    return int(n) if not _missing(n) else 0


# --- headline ----------------------------------------------------------------
def headline(analysis: Analysis, *, comparison: dict | None = None, title: str = "") -> Section:
    """Cards: hidden %, exposed comm ms/step, step time (+ speedup vs tp and fraction
    of nocomm from a multi-mode run.json comparison row).

    One step time per page: with a run's comparison row the step card is the timed
    step (median of the timed, unprofiled steps: what the speedups compare) and the
    profiled steps' device wall is named in its caption; without a run it is the
    profiled step, labelled so. Green is only for hidden comm."""
    t = _get(analysis, "totals") or {}
    hp = t.get("hidden_pct")
    n_prof = t.get("n_iterations", 0) or 0
    profiled = fmt(t.get("step_ms"), ".2f", " ms")
    timed = (comparison or {}).get("step_ms")
    if _missing(timed):
        step = Card("profiled step", profiled, f"device wall, mean over {n_prof} profiled steps")
    else:
        step = Card(
            "timed step",
            fmt(timed, ".2f", " ms"),
            f"median of the timed (unprofiled) steps{_ci(comparison, 'step_ms', '.2f')}; "
            f"profiled: {profiled} device wall",
        )
    cards = [
        Card("comm hidden", fmt(hp, ".1f", " %"),
             "no comm in this trace" if _missing(hp) else
             f"{fmt(_ns_ms(t.get('hidden_ns')), '.2f')} of {fmt(_ns_ms(t.get('comm_ns')), '.2f')} ms comm",
             "" if _missing(hp) else ("good" if hp >= 80 else "bad" if hp < 50 else "")),
        Card("exposed comm / step", fmt(t.get("exposed_ms_per_step"), ".3f", " ms"),
             "comm not overlapped by compute (profiled steps)"),
        step,
    ]  # fmt: skip
    if comparison:
        sp = comparison.get("speedup_vs_tp")
        fr = comparison.get("frac_of_nocomm")
        cards.append(
            Card(
                "speedup vs tp",
                fmt(sp, ".3f", "×"),
                f"tp timed step / this mode's{_ci(comparison, 'speedup_vs_tp', '.3f')}"
                if not _missing(sp)
                else "tp is not in this run",
            )
        )
        cards.append(
            Card(
                "of nocomm",
                fmt(fr, ".3f"),
                f"throughput / nocomm's (1.000 = comm is free)"
                f"{_ci(comparison, 'frac_of_nocomm', '.3f')}"
                if not _missing(fr)
                else "nocomm is not in this run",
            )
        )
    ranks = _get(analysis, "ranks") or []
    where = (
        "any other thread of the same process"
        if _get(analysis, "mode") == "cpu"
        else "any stream of the same device"
    )
    cap = (
        f"{len(ranks)} rank(s), {_get(analysis, 'mode', 'gpu')} trace; "
        f"hidden = comm time covered by compute on {where}."
    )
    return Section("headline", title or "Headline", cap, cards)


def _ci(row: dict | None, key: str, spec: str) -> str:
    """'; 95% interval [lo, hi]' of a comparison row's ``key`` (rundata.comparison_rows),
    '' when the row has none."""
    lo, hi = (row or {}).get(f"{key}_low"), (row or {}).get(f"{key}_high")
    if _missing(lo) or _missing(hi):
        return ""
    return f"; 95% interval [{format(lo, spec)}, {format(hi, spec)}]"


def _ns_ms(x: object) -> float | None:
    return None if _missing(x) else float(x) / 1e6


# --- timeline ------------------------------------------------------------------
def step_timeline(
    analysis: Analysis, *, iteration: int | None = None, max_per_lane: int = MAX_RECTS_PER_LANE
) -> Section:
    """One step, one lane per (rank, stream): compute / comm hidden / comm exposed. On
    a CPU trace the lanes are threads: the main thread and the gloo threads by name."""
    title = f"One step, per rank and {_unit_label(analysis)}"
    iv = _frame(analysis, "intervals")
    if iv is None or len(iv) == 0:
        return Section(
            "timeline",
            title,
            "",
            Unavailable(
                "No device activity in this trace (no kernel, memcpy or memset events): "
                "nothing to draw. Was the profiler run with CUDA activities enabled?"
            ),
        )
    if iteration is None:
        iteration = tl.pick_iteration(_frame(analysis, "by_iteration"))
    notes: list[str] = []
    if iteration is None:
        iteration_sel = None
        notes.append("No ProfilerStep annotations: the whole trace is drawn.")
    else:
        iteration_sel = iteration
        if not (iv["iteration"] == iteration).any():
            iteration_sel = None
            notes.append(f"Step {iteration} has no device intervals: the whole trace is drawn.")
    pieces = tl.split_hidden_exposed(
        iv, reference=_get(analysis, "reference"), iteration=iteration_sel
    )
    n_raw = len(pieces)
    pieces, merged = tl.merge_for_display(pieces, max_per_lane=max_per_lane)
    if merged:
        notes.append(
            f"Downsampled for display: {n_raw:,} pieces drawn as {len(pieces):,} rectangles "
            f"(neighbours of the same kind closer than 1/{max_per_lane} of a lane's span "
            "are merged; hover shows how many). Numbers elsewhere use every interval."
        )
    t0 = int(pieces["start"].min())
    unit = _unit_label(analysis)
    lanes = pieces[["rank", "stream"]].drop_duplicates().sort_values(["rank", "stream"])
    names = _thread_roles(pieces) if unit == "thread" else {}
    lane_label = {(r, s): f"rank {r} · {names.get((r, s), unit)} {s}"
                  for r, s in lanes.itertuples(index=False)}  # fmt: skip
    order = [lane_label[(r, s)] for r, s in lanes.itertuples(index=False)]
    fig = go.Figure()
    for part in tl.PARTS:
        p = pieces[pieces["part"] == part]
        if len(p) == 0:
            continue
        start_ms = (p["start"].to_numpy() - t0) / 1e6
        dur_ms = (p["end"].to_numpy() - p["start"].to_numpy()) / 1e6
        y = [lane_label[(r, s)] for r, s in zip(p["rank"].to_numpy(), p["stream"].to_numpy())]
        count = p["count"].to_numpy()
        busy_us = p["busy_ns"].to_numpy() / 1e3
        names = p["name"].astype(str).str.slice(0, 90).to_numpy()
        extra = np.where(
            count > 1,
            [f"<br>{c:,} pieces merged, busy {b:,.1f} µs" for c, b in zip(count, busy_us)],
            "",
        )
        custom = np.stack([names, p["op"].astype(str).to_numpy(), extra], axis=1)
        fig.add_trace(go.Bar(
            name=PART_LABELS[part], orientation="h", y=y, x=dur_ms, base=start_ms,
            marker={"color": COLORS[part], "line": {"width": 0}}, width=0.72,
            customdata=custom,
            hovertemplate=("<b>%{customdata[0]}</b><br>op: %{customdata[1]}<br>"
                           f"{PART_LABELS[part]}: " "%{x:.4f} ms at +%{base:.4f} ms"
                           "%{customdata[2]}<extra></extra>"),
        ))  # fmt: skip
    _base_layout(fig, height=110 + 34 * len(order), barmode="overlay", bargap=0.2)
    fig.update_yaxes(categoryorder="array", categoryarray=order[::-1], title=None)
    cpu = unit == "thread"
    first = "first activity" if cpu else "first device activity"
    fig.update_xaxes(title=f"ms since the step's {first}", zeroline=False)
    which = f"step {iteration_sel}" if iteration_sel is not None else "whole trace"
    cover = (
        "compute on another thread of the same process (hidden; the threads share the "
        "machine's cores, so hidden comm still takes cores from compute)"
        if cpu
        else "compute on the same device (hidden)"
    )
    cap = (
        f"{which} (the profiled step closest to the median step time); comm is split "
        f"into the part covered by {cover} and the rest."
    )
    return Section("timeline", title, cap, fig, tuple(notes))


def _thread_roles(pieces: pd.DataFrame) -> dict[tuple[int, int], str]:
    """CPU lanes by role: per rank the thread with the most compute is the "main
    thread" (the training loop), a thread with comm only the "gloo thread"; others stay
    "thread". (rank, tid) -> word."""
    p = pieces.assign(busy=pieces["end"] - pieces["start"])
    kinds = p.groupby(["rank", "stream", "part"], observed=True)["busy"].sum().unstack(
        fill_value=0
    )
    out: dict[tuple[int, int], str] = {}
    compute = kinds["compute"] if "compute" in kinds else pd.Series(0, index=kinds.index)
    comm = sum((kinds[c] for c in ("comm_hidden", "comm_exposed") if c in kinds),
               pd.Series(0, index=kinds.index))  # fmt: skip
    for (r, tid), c in compute.items():
        if comm[(r, tid)] > 0 and c == 0:
            out[(int(r), int(tid))] = "gloo thread"
    for r, per in compute.groupby(level=0):
        if per.max() > 0:
            out[(int(r), int(per.idxmax()[1]))] = "main thread"
    return out


# --- layer x micro-batch -----------------------------------------------------------
def layer_heatmap(analysis: Analysis) -> Section:
    title = "Hidden % by layer × micro-batch"
    by_op = _frame(analysis, "by_op")
    grid = tl.layer_grid(by_op)
    if len(grid) == 0:
        why = (
            "no op names of the form fwd.layer_attn_{L}_batch_{b} / "
            "fwd.layer_mlp_{L}_batch_{b} / bwd.… in this trace (the reference model's "
            "record_function names)"
        )
        if by_op is None or len(by_op) == 0:
            why = "no per-op results in this analysis"
        return Section("layers", title, "", Unavailable(f"Not shown: {why}."))
    if (grid["comm_ns"] == 0).all():
        return Section(
            "layers",
            title,
            "",
            Unavailable("Not shown: the per-layer ops launched no comm kernels."),
        )
    phases = [p for p in ("fwd", "bwd") if (grid["phase"] == p).any()]
    names = {"fwd": "forward", "bwd": "backward"}
    fig = make_subplots(
        rows=1, cols=len(phases), subplot_titles=[names[p] for p in phases], horizontal_spacing=0.08
    )
    for i, ph in enumerate(phases, start=1):
        g = grid[grid["phase"] == ph]
        rows = (
            g[["layer", "block"]]
            .drop_duplicates()
            .sort_values(["layer", "block"], ascending=[False, False])
        )
        row_keys = list(rows.itertuples(index=False, name=None))
        batches = sorted(g["batch"].unique().tolist())
        z = [[None] * len(batches) for _ in row_keys]
        txt = [[""] * len(batches) for _ in row_keys]
        hover = [[""] * len(batches) for _ in row_keys]
        ri = {k: j for j, k in enumerate(row_keys)}
        bi = {b: j for j, b in enumerate(batches)}
        for r in g.itertuples(index=False):
            a, b = ri[(r.layer, r.block)], bi[r.batch]
            has = not _missing(r.hidden_pct)
            z[a][b] = float(r.hidden_pct) if has else None
            txt[a][b] = f"{r.hidden_pct:.0f}" if has else "–"
            hover[a][b] = (
                f"{ph}.layer_{r.block}_{r.layer}_batch_{r.batch}<br>hidden "
                f"{fmt(r.hidden_pct, '.1f', ' %')}<br>comm {r.comm_ns / 1e3:,.1f} µs, "
                f"exposed {r.exposed_ns / 1e3:,.1f} µs (all ranks)"
            )
        fig.add_trace(go.Heatmap(
            z=z, x=[f"mb {b}" for b in batches], y=[f"L{lay} {blk}" for lay, blk in row_keys],
            text=txt, texttemplate="%{text}", customdata=hover,
            hovertemplate="%{customdata}<extra></extra>", zmin=0, zmax=100,
            colorscale=[[0, "#D7301F"], [0.5, "#FDD49E"], [0.8, "#A1D99B"], [1, "#238B45"]],
            showscale=(i == len(phases)), xgap=2, ygap=2,
            colorbar={"title": {"text": "hidden %"}, "thickness": 12},
        ), row=1, col=i)  # fmt: skip
    n_rows = grid[["layer", "block"]].drop_duplicates().shape[0]
    _base_layout(fig, height=max(260, 90 + 26 * n_rows))
    cap = (
        "Share of each block's comm covered by compute, pooled over ranks and steps; "
        "red cells are where the micro-batch schedule fails to hide comm."
    )
    return Section("layers", title, cap, fig)


# --- exposed comm by op ------------------------------------------------------------
def exposed_by_op(analysis: Analysis, *, top: int = TOP_OPS) -> Section:
    title = "Exposed comm by op name"
    t = _get(analysis, "totals") or {}
    if not t.get("comm_ns"):
        return Section(
            "ops",
            title,
            "",
            Unavailable(
                "No comm in this trace (no kernel matched the comm pattern): nothing is exposed."
            ),
        )
    ops = tl.op_table(_frame(analysis, "by_op"))
    if len(ops) == 0:
        return Section("ops", title, "", Unavailable("No per-op comm results in this analysis."))
    shown = ops.head(top).iloc[::-1]
    k = max(_n_steps(analysis), 1) * max(len(_get(analysis, "ranks") or [1]), 1)
    fig = go.Figure()
    for col, part in (("exposed_ns", "comm_exposed"), ("hidden_ns", "comm_hidden")):
        fig.add_trace(go.Bar(
            name=PART_LABELS[part], orientation="h", y=shown["op"], x=shown[col] / k / 1e3,
            marker={"color": COLORS[part]},
            customdata=np.stack([_pct_text(shown["hidden_pct"])], axis=1),
            hovertemplate="%{y}<br>%{x:,.2f} µs per step and rank<br>hidden "
                          "%{customdata[0]}<extra>" + PART_LABELS[part] + "</extra>",
        ))  # fmt: skip
    _base_layout(fig, height=120 + 22 * len(shown), barmode="stack")
    fig.update_xaxes(title="µs per step and rank")
    fig.update_yaxes(automargin=True)
    notes = (f"{len(ops) - top} more op(s) with comm not shown.",) if len(ops) > top else ()
    cap = (
        "Comm time attributed to the innermost record_function at launch, sorted by its "
        "exposed part (the time to win back)."
    )
    return Section("ops", title, cap, fig, notes)


def comm_by_collective_type(analysis: Analysis) -> Section:
    """Hidden / exposed comm per collective type (all-reduce, reduce-scatter,
    all-gather, ...), pooled over ranks."""
    title = "Comm by collective type"
    t = _get(analysis, "totals") or {}
    if not t.get("comm_ns"):
        return Section("collectives", title, "", Unavailable(
            "No comm in this trace (no kernel matched the comm pattern)."))  # fmt: skip
    types = tl.collective_type_table(_frame(analysis, "by_collective_type"))
    if len(types) == 0:
        return Section(
            "collectives",
            title,
            "",
            Unavailable("No per-collective-type results in this analysis."),
        )
    shown = types.iloc[::-1]
    k = max(_n_steps(analysis), 1) * max(len(_get(analysis, "ranks") or [1]), 1)
    fig = go.Figure()
    for col, part in (("exposed_ns", "comm_exposed"), ("hidden_ns", "comm_hidden")):
        fig.add_trace(go.Bar(
            name=PART_LABELS[part], orientation="h", y=shown["collective"],
            x=shown[col] / k / 1e3, marker={"color": COLORS[part]},
            customdata=np.stack([_pct_text(shown["hidden_pct"]), shown["count"]], axis=1),
            hovertemplate="%{y}<br>%{x:,.2f} µs per step and rank<br>hidden "
                          "%{customdata[0]}, %{customdata[1]} instances<extra>"
                          + PART_LABELS[part] + "</extra>",
        ))  # fmt: skip
    _base_layout(fig, height=120 + 28 * len(shown), barmode="stack")
    fig.update_xaxes(title="µs per step and rank")
    fig.update_yaxes(automargin=True)
    source = "gloo event" if _get(analysis, "mode") == "cpu" else "kernel"
    cap = (
        "The collective type comes from the profiler's 'Collective name' argument, else the "
        f"{source} or op name (docs/METRICS.md); each type's comm is the union of its "
        "intervals."
    )
    return Section("collectives", title, cap, fig)


def _pct_text(v: pd.Series) -> np.ndarray:
    return np.array([fmt(x, ".1f", " %") for x in v.to_numpy(float)], dtype=object)


# --- overheads (tolerant of a missing or partial dict) ----------------------------
_PALETTE = [
    "#4E79A7",
    "#F28E2B",
    "#59A14F",
    "#E15759",
    "#76B7B2",
    "#EDC948",
    "#B07AA1",
    "#FF9DA7",
    "#9C755F",
    "#BAB0AC",
]


def _overheads(analysis: Analysis) -> Overheads | None:
    """The analysis' typed overheads (a JSON-shaped dict is read as one); None when the
    overhead analysis did not run."""
    ov = _get(analysis, "overheads")
    if ov is None:
        return None
    return ov if isinstance(ov, Overheads) else Overheads.of(ov)


def _ov_part(analysis: Analysis, key: str, what: str) -> Any:
    """The overhead section ``key`` when it was computed, else an Unavailable saying why
    (the section's own ``reason``)."""
    ov = _overheads(analysis)
    if ov is None:
        return Unavailable(
            f"{what}: not computed: the overhead analysis was not run for this trace."
        )
    part = getattr(ov, key)
    if not part.computed:
        return Unavailable(f"{what}: not computed: {part.reason or 'no result in the overheads.'}")
    return part


def _log_hist(values_ns: np.ndarray, *, color: str) -> tuple[go.Figure, int]:
    """Log-spaced histogram bars (µs); returns the figure and the count of zeros (not
    drawable on a log axis). Binning is display only."""
    us = values_ns.astype(float) / 1e3
    pos = us[us > 0]
    n_zero = int((us <= 0).sum())
    lo = max(pos.min(), 1e-3) if len(pos) else 1e-3
    hi = max(pos.max(), lo * 10) if len(pos) else 1.0
    edges = np.logspace(math.log10(lo) - 0.01, math.log10(hi) + 0.01, 36)
    cnt, _ = np.histogram(pos, bins=edges)
    mids = np.sqrt(edges[:-1] * edges[1:])
    fig = go.Figure(go.Bar(
        x=mids, y=cnt, width=np.diff(edges), marker={"color": color, "line": {"width": 0}},
        customdata=np.stack([edges[:-1], edges[1:]], axis=1),
        hovertemplate="%{customdata[0]:.3g}–%{customdata[1]:.3g} µs: %{y:,}<extra></extra>",
    ))  # fmt: skip
    _base_layout(fig, height=300, bargap=0.03, showlegend=False)
    mults = (1, 2, 5) if edges[-1] / edges[0] <= 2e3 else (1,)
    ticks = [m * 10.0**k for k in range(-3, 10) for m in mults]
    ticks = [t for t in ticks if edges[0] <= t <= edges[-1]]
    fig.update_xaxes(
        type="log", title="µs (log scale)", tickvals=ticks, ticktext=[f"{t:g}" for t in ticks]
    )
    fig.update_yaxes(title="count")
    return fig, n_zero


def switch_gaps(analysis: Analysis) -> Section:
    """Stream-switch gaps: total device idle by consumer op (top ops of the overheads
    summary), p50/p95 in the hover; the stream pairs in a table."""
    title = "Stream-switch gaps"
    sw = _ov_part(analysis, "stream_switches", "Stream switches")
    if isinstance(sw, Unavailable):
        return Section("switches", title, "", sw)
    st = sw.switch_gap or Stats()
    by_op = pd.DataFrame(sw.by_op)
    if not st.count or len(by_op) == 0 or "switch_gap_total_ns" not in by_op:
        return Section(
            "switches",
            title,
            "",
            Unavailable(
                f"No cross-stream wait with a matched producer and consumer "
                f"({sw.n_edges or 0} wait edge(s), source: {sw.source})."
            ),
        )
    by_op = by_op.sort_values("switch_gap_total_ns", ascending=True, kind="stable")
    p50 = [fmt(_us(v), ".2f") for v in by_op.get("switch_gap_p50_ns", [None] * len(by_op))]
    p95 = [fmt(_us(v), ".2f") for v in by_op.get("switch_gap_p95_ns", [None] * len(by_op))]
    n = by_op["n_switches"].to_numpy() if "n_switches" in by_op else np.zeros(len(by_op))
    fig = go.Figure(go.Bar(
        orientation="h", y=by_op["op"].astype(str), x=by_op["switch_gap_total_ns"] / 1e3,
        marker={"color": "#F28E2B"}, customdata=np.stack([n, p50, p95], axis=1),
        hovertemplate=("%{y}: %{x:,.1f} µs idle over %{customdata[0]} waits<br>p50 "
                       "%{customdata[1]} µs, p95 %{customdata[2]} µs<extra></extra>"),
    ))  # fmt: skip
    _base_layout(fig, height=140 + 26 * len(by_op), showlegend=False)
    fig.update_xaxes(title="device idle from cross-stream waits, µs (all profiled steps)")
    fig.update_yaxes(automargin=True)
    pairs = sw.by_stream_pair
    extra: tuple[Any, ...] = ()
    if pairs:
        extra = (Table(["rank", "from stream", "to stream", "waits", "idle µs"],
                       [[_cell(q.get("rank")), _cell(q.get("from_stream")),
                         _cell(q.get("to_stream")), _cell(q.get("n_switches")),
                         fmt(_us(q.get("switch_gap_total_ns")), ",.1f")] for q in pairs],
                       [True] * 5),)  # fmt: skip
    cap = (
        f"{st.count:,} cross-stream waits ({sw.source}); idle each put on the "
        f"waiting stream, by the op that waited: p50 {fmt(_us(st.p50_ns), '.2f')} µs,"
        f" p95 {fmt(_us(st.p95_ns), '.2f')} µs, "
        f"{fmt(sw.switch_gap_ms_per_step, '.3f')} ms per step and rank."
    )
    return Section("switches", title, cap, fig, extra=extra)


def _us(x: object) -> float | None:
    return None if _missing(x) else float(x) / 1e3


def launch_delays(analysis: Analysis) -> Section:
    """Histogram of launch delays (device start − end of the launch call)."""
    title = "Kernel launch delays"
    la = _ov_part(analysis, "launches", "Kernel launches")
    if isinstance(la, Unavailable):
        return Section("launches", title, "", la)
    vals = tl.launch_delay_values(_frame(analysis, "intervals"))
    if len(vals) == 0:
        return Section(
            "launches",
            title,
            "",
            Unavailable("No launch call joined to device work: no launch delays to show."),
        )
    fig, n0 = _log_hist(vals, color="#76B7B2")
    st = la.launch_delay or Stats()
    cap = (
        f"{len(vals):,} launches: device start − end of the launch call (queueing; a "
        f"long tail is fine when the host runs ahead). p50 "
        f"{fmt(_us(st.p50_ns), '.1f')} µs, p95 {fmt(_us(st.p95_ns), '.1f')} µs; "
        f"{n0:,} with zero delay not drawn. Host-bound idle: "
        f"{fmt(la.host_bound_idle_ms_per_step, '.3f')} ms per step and stream."
    )
    return Section("launches", title, cap, fig)


def graph_candidates(analysis: Analysis) -> Section:
    title = "CUDA-graph candidates"
    la = _ov_part(analysis, "launches", "Graph candidates")
    if isinstance(la, Unavailable):
        return Section("graphs", title, "", la)
    cands = la.graph_candidates
    if not cands:
        return Section(
            "graphs",
            title,
            "",
            Unavailable(
                "No runs of host-bound gaps or tiny kernels: nothing to gain from CUDA graphs."
            ),
        )
    rows = [[_cell(c.get("rank")), _cell(c.get("stream")), _cell(c.get("iteration")),
             _cell(c.get("n_intervals")), f"{(c.get('saving_ns') or 0) / 1e3:,.1f}",
             _cell(c.get("ops") or [])] for c in cands]  # fmt: skip
    n = la.n_graph_candidates if la.n_graph_candidates is not None else len(cands)
    cap = (
        f"{n:,} run(s) of consecutive host-bound gaps / tiny kernels on one stream "
        f"(top {len(cands)} shown); the saving estimate is their host-bound idle: "
        f"{fmt(la.graph_saving_ms_per_step, '.3f')} ms per step in all."
    )
    return Section(
        "graphs",
        title,
        cap,
        Table(
            ["rank", "stream", "step", "kernels", "est. saving µs", "ops"],
            rows,
            [True, True, True, True, True, False],
        ),
    )


def _cell(v: Any) -> str:
    if isinstance(v, (list, tuple, np.ndarray)):
        return ", ".join(str(x) for x in list(v)[:3])
    if isinstance(v, float):
        return fmt(v, ",.1f")
    return "n/a" if v is None else str(v)


def _rank_cell(v: Any) -> str:
    return "none" if v is None or (isinstance(v, (int, float)) and v < 0) else _cell(v)


def rank_skew(analysis: Analysis) -> Section:
    """Per rank: time spent waiting for later peers, and skew it caused by arriving last."""
    title = "Cross-rank skew and stragglers"
    ranks = _get(analysis, "ranks") or []
    if len(ranks) < 2:
        return Section(
            "skew", title, "", Unavailable(f"Needs two or more ranks; this trace has {len(ranks)}.")
        )
    ar = _ov_part(analysis, "across_ranks", "Cross-rank skew")
    if isinstance(ar, Unavailable):
        return Section("skew", title, "", ar)
    strag = pd.DataFrame(ar.stragglers)
    if len(strag) == 0 or "rank" not in strag:
        return Section("skew", title, "", Unavailable("No per-rank straggler results."))
    strag = strag.sort_values("rank")
    cols = [c for c in ("wait_ns", "skew_caused_ns") if c in strag]
    if not cols or not (strag[cols].to_numpy(float) > 0).any():
        return Section(
            "skew",
            title,
            "",
            Unavailable(
                f"No arrival skew: in all {ar.n_instances or 0:,} matched collective "
                "instances every rank started at the same time."
            ),
        )
    lab = [f"rank {r}" for r in strag["rank"]]
    fig = go.Figure()
    for col, name, color in (
        ("wait_ns", "waited for peers", "#BAB0AC"),
        ("skew_caused_ns", "made peers wait (arrived last)", "#E15759"),
    ):
        if col in strag:
            fig.add_trace(
                go.Bar(
                    x=lab,
                    y=strag[col].to_numpy(float) / 1e3,
                    name=name,
                    marker={"color": color},
                    hovertemplate="%{x}: %{y:,.1f} µs<extra>" + name + "</extra>",
                )
            )
    _base_layout(fig, height=300, barmode="group")
    fig.update_yaxes(title="µs, all profiled instances")
    st = ar.skew or Stats()
    late = ar.late_rank
    cap = (
        f"{ar.n_instances or 0:,} collective instances matched across ranks; arrival "
        f"skew p50 {fmt(_us(st.p50_ns), '.1f')} µs, p95 "
        f"{fmt(_us(st.p95_ns), '.1f')} µs; "
        + (f"rank {late} arrives last most." if late is not None else "no straggler.")
    )
    worst = ar.worst_instances
    extra: tuple[Any, ...] = ()
    if worst:
        extra = (Table(["collective", "step", "late rank", "skew µs", "transfer µs",
                        "wait share"],
                       [[str(w.get("coll") or w.get("key") or ""), _cell(w.get("iteration")),
                         _rank_cell(w.get("late_rank")), fmt(_us(w.get("skew_ns")), ",.1f"),
                         fmt(_us(w.get("transfer_ns")), ",.1f"),
                         fmt(w.get("wait_share"), ".2f")] for w in worst],
                       [False, True, True, True, True, True]),)  # fmt: skip
    return Section("skew", title, cap, fig, extra=extra)


def _where_text(w: Any) -> str:
    if isinstance(w, Where):
        w = w.to_json()
    if isinstance(w, dict):
        names = {"iteration": "step"}
        return " · ".join(f"{names.get(k, k)} {v}" for k, v in w.items() if not _missing(v))
    return "" if w is None else str(w)


def findings(analysis: Analysis) -> Section:
    title = "Findings"
    ov = _overheads(analysis)
    if ov is None:
        why = "Findings: not computed: the overhead analysis was not run for this trace."
        return Section("findings", title, "", Unavailable(why))
    if not ov.findings:
        return Section(
            "findings", title, "", Unavailable("No findings: no overhead crossed its threshold.")
        )
    rank = {"high": 0, "medium": 1, "low": 2}
    fs = sorted(ov.findings, key=lambda f: rank.get(f.severity, 3))
    rows = [[f.severity, " — ".join(x for x in (f.title, f.detail) if x), _where_text(f.where),
             fmt(f.est_gain_ms_per_step, ".3f", " ms"), f.fix] for f in fs]  # fmt: skip
    return Section(
        "findings",
        title,
        "What the overhead rules flagged, most severe first, "
        "with the estimated gain per step and what to try.",
        Table(
            ["severity", "finding", "where", "gain / step", "what to try"],
            rows,
            [False, False, False, True, False],
        ),
    )


# --- configuration -------------------------------------------------------------
def _flatten(d: Any, prefix: str = "") -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if isinstance(d, dict):
        for k, v in d.items():
            out.extend(_flatten(v, f"{prefix}{k}."))
    elif isinstance(d, list) and d and all(isinstance(x, dict) for x in d):
        for i, v in enumerate(d):
            out.extend(_flatten(v, f"{prefix}{i}."))
    else:
        v = "n/a" if _missing(d) else (", ".join(map(str, d)) if isinstance(d, list) else str(d))
        out.append((prefix.rstrip("."), v))
    return out


def configuration(analysis: Analysis | None, *, run: dict | None = None) -> Section:
    rows: list[list[str]] = []
    notes: list[str] = [str(n) for n in (run or {}).get("notes") or []]
    if run:
        used = run.get("attention")  # the kernel the schedules ran (train.py records it)
        for part in ("config", "versions", "devices"):
            if run.get(part):
                rows.extend([[f"{part}.{k}", f"{v} (used: {used})"
                              if used and f"{part}.{k}" == "config.attention" else v]
                             for k, v in _flatten(run[part])])  # fmt: skip
    if analysis is not None:
        rows.append(["trace", str(_get(analysis, "source", ""))])
        rows.append(["ranks", ", ".join(map(str, _get(analysis, "ranks") or []))])
        rows.append(["trace kind", str(_get(analysis, "mode", ""))])
        cfg = _get(analysis, "config")
        if cfg is not None:
            d = cfg if isinstance(cfg, dict) else getattr(cfg, "__dict__", {})
            rows.extend([[f"analysis.{k}", v] for k, v in _flatten(d)])
        notes.extend(str(n) for n in _get(analysis, "notes") or [])

    rows.append(["domino-prof", __version__])
    half = (len(rows) + 1) // 2
    left, right = rows[:half], rows[half:] + [["", ""]] * (2 * half - len(rows))
    return Section(
        "config",
        "Configuration and versions",
        "What was run and analysed (from run.json when the report comes from a run directory).",
        Table(["key", "value", "key", "value"], [a + b for a, b in zip(left, right)]),
        notes=tuple(notes),
    )


# --- multi-mode run comparison -----------------------------------------------------
def mode_comparison(run: dict, *, hidden_pct: dict[str, float | None] | None = None) -> Section:
    """Timed step per mode and the comparison table (``rundata.comparison_table``: the
    columns and units the CLI prints); ``hidden_pct`` fills that column from the
    analyses where run.json has none. Bars are neutral (green means hidden comm)."""
    title = "Modes compared"
    comp = [dict(c) for c in run.get("comparison") or []]
    for c in comp:
        if _missing(c.get("hidden_pct")) and hidden_pct:
            c["hidden_pct"] = hidden_pct.get(str(c.get("mode")))
    if not comp:
        return Section("modes", title, "", Unavailable("run.json has no comparison table."))
    modes = [str(c.get("mode")) for c in comp]
    step = _none_if_nan(
        c.get("step_ms") if not _missing(c.get("step_ms")) else float("nan") for c in comp
    )
    fig = go.Figure(go.Bar(
        x=modes, y=step, marker={"color": [MODE_REF if m == "tp" else MODE_OTHER
                                           for m in modes]},
        text=[fmt(c.get("speedup_vs_tp"), ".3f", "× vs tp") for c in comp],
        textposition="outside", hovertemplate="%{x}: %{y:.2f} ms per timed step<extra></extra>",
    ))  # fmt: skip
    lows = [c.get("step_ms_low") for c in comp]
    highs = [c.get("step_ms_high") for c in comp]
    if all(not _missing(x) for x in lows + highs) and all(not _missing(x) for x in step):
        fig.update_traces(error_y={  # the 95% interval of each mode's timed step
            "type": "data", "symmetric": False, "color": "#555",
            "array": [h - y for h, y in zip(highs, step)],
            "arrayminus": [y - lo for lo, y in zip(lows, step)]})  # fmt: skip
    _base_layout(fig, height=320, showlegend=False)
    fig.update_yaxes(title="ms per timed step")
    headers, rows = comparison_table(comp)
    table = Table(headers, rows, [h != "mode" for h in headers])
    notes = []
    if "tp" not in modes:
        notes.append("tp did not run: no speedup to show (`domino-prof run --mode all`).")
    answer = overlap_verdict(comp, verdict=run.get("verdict"))
    if answer:
        title = f"{title}: {answer}"
        why = verdict_reason(run)  # when this run cannot show overlap pay off (issue 35)
        if why:
            notes.insert(0, f"Why: {why[0].upper()}{why[1:]}.")
    cap = (
        "Timed step per mode (median of the timed, unprofiled steps) from the same run: "
        "tp = plain tensor parallel, domino = overlapped micro-batches, nocomm = comm "
        "removed (the ceiling), sp / domino-sp = the same with sequence parallelism; "
        "hidden % comes from the profiled steps. [low, high]: 95% intervals over the "
        "timed blocks (domino_prof/stats.py); a ratio is 'within noise' when its "
        "interval holds 1.000."
    )
    return Section("modes", title, cap, fig, tuple(notes), extra=(table,))


def domino_limits(run: dict, analyses: Mapping[str, Analysis | Unavailable], *,
                  mode: str = "domino") -> Section | None:  # fmt: skip
    """What keeps ``mode`` (domino or domino-sp) from nocomm in this run
    (``analysis.limits``): the profiled step gap split into its measured parts (the
    split's cost from domino-nocomm / domino-sp-nocomm, exposed comm's step cost, or the
    exposed comm where the analysis lacks it, overlap tax, host) and the residual, or
    without the split's mode into the same exposed part, overlap tax, host and the rest (a
    remainder). None without ``mode`` and nocomm."""
    d = limits(run, analyses, mode=mode)
    if d is None:
        return None
    split_mode = d.get("split_mode")
    rows = [[f"profiled step gap ({mode} − nocomm)", fmt(d["gap_ms"], ".2f", " ms")]]
    if split_mode:
        rows.append([f"the split's own cost ({split_mode} − nocomm, measured)",
                     fmt(d["split_ms"], ".2f", " ms")])  # fmt: skip
    if d.get("exposed_cost_ms") is None:
        rows.append(["exposed comm", fmt(d["exposed_comm_ms"], ".2f", " ms")])
    else:  # the part is its step cost; the rest of it lay in bubbles a step has anyway
        rows.append(["exposed comm (not a part: its step cost is)",
                     fmt(d["exposed_comm_ms"], ".2f", " ms")])  # fmt: skip
        bubble = d.get("exposed_bubble_us")
        rows.append(["exposed comm's step cost (beyond the "
                     + (f"{bubble:.2f} µs " if bubble is not None else "")
                     + "kernel-to-kernel bubbles, host waits and memory ops of its gaps)",
                     fmt(d["exposed_cost_ms"], ".2f", " ms")])  # fmt: skip
    if d.get("tax_withheld"):  # compute beside compute (the lanes): no part of the step
        rows.append(["overlap tax (not a part: compute ran beside other compute, "
                     + concurrent_text(d) + "; the residual holds it)",
                     fmt(None, ".2f", " ms")])  # fmt: skip
    else:
        rows.append([f"overlap tax ({mode}'s compute − {split_mode}'s, class by class)"
                     if split_mode else "overlap tax (compute slowed under comm)",
                     fmt(d["overlap_tax_ms"], ".2f", " ms")])  # fmt: skip
    if d.get("host_ms") is not None:
        rows.append([f"host (device idle waiting for launches, beyond {split_mode or 'nocomm'}'s)",
                     fmt(d["host_ms"], ".2f", " ms")])  # fmt: skip
    if split_mode:
        word = ("tax not measured" if d["adds_up"] is None
                else "adds up: within 5% of the gap" if d["adds_up"]
                else "does not add up: beyond 5% of the gap")  # fmt: skip
        rows.append([f"residual (gap − the parts; {word})",
                     fmt(d["residual_ms"], ".2f", " ms")])  # fmt: skip
    else:
        rows.append(["the rest (split's own cost; a remainder)", fmt(d["rest_ms"], ".2f", " ms")])
    if d.get("occupancy_added_ms") is not None:  # the same gap counted another way
        busy = (f"by occupancy: compute busy, added ({mode}'s union of compute kernels − "
                f"{split_mode}'s: the tax, each instant once; not a further part)")
        idle = ("by occupancy: time without compute, added (exposed comm, host waits, idle; "
                "with the split and the row above, the gap)")
        kt = f"  of which kernel time, added (Σ of {mode}'s kernels − {split_mode}'s)"
        lost = f"  of which compute beside compute, lost ({split_mode}'s − {mode}'s)"
        rows += [[busy, fmt(d["occupancy_added_ms"], ".2f", " ms")],
                 [kt, fmt(d["kernel_time_added_ms"], ".2f", " ms")],
                 [lost, fmt(d["concurrency_lost_ms"], ".2f", " ms")],
                 [idle, fmt(d["no_compute_added_ms"], ".2f", " ms")]]  # fmt: skip
    if d.get("comm_stretch_ms") is not None:
        rows.append(["comm stretched by compute (not a part)",
                     fmt(d["comm_stretch_ms"], ".2f", " ms")])  # fmt: skip
    rows += [[f"exposed in {t['op']}", fmt(t["exposed_ms_per_step"], ".3f", " ms")]
             for t in d["top_exposed"]]  # fmt: skip
    cap = ("Per rank and profiled step (docs/METRICS.md, Extension: what limits domino). "
           + d["text"])
    return Section("limits" if mode == "domino" else f"limits-{mode}",
                   f"What limits {mode} here", cap,
                   Table(["part", "ms per step"], rows, [False, True]))  # fmt: skip


def overlap_verdict(comp: list[dict], *, verdict: list[dict] | None = None) -> str:
    """'domino 0.962× tp [0.941, 0.983] (slower), domino-sp 1.004× sp [0.990, 1.020]
    (within noise)': each overlapped mode's speed relative to its synchronous
    counterpart with its 95% interval (run.json ``verdict``, ``rundata.verdicts``); "within
    noise" only when the interval holds 1.0. Without ``verdict`` (a run.json before
    blocks): from the comparison rows' step times, said to have no interval. "" when
    the run lacks a pair."""
    if verdict is None:
        verdict = verdicts({str(c.get("mode")): {"step_ms": c.get("step_ms")} for c in comp
                            if not _missing(c.get("step_ms"))})  # fmt: skip
    return verdict_text(verdict)


# --- compare two analyses ----------------------------------------------------------
def compare_headline(
    a: Analysis,
    b: Analysis,
    *,
    labels: tuple[str, str],
    timed_step_ms: tuple[float, float] | None = None,
) -> Section:
    """Headline numbers of A and B side by side. ``timed_step_ms``: each side's timed
    (unprofiled) step from its run.json, the step time comparisons use; the profiled
    step (device wall of the profiled steps) is labelled as such."""
    ta, tb = _get(a, "totals") or {}, _get(b, "totals") or {}
    rows = []
    if timed_step_ms is not None:
        va, vb = timed_step_ms
        rows.append(["timed step (ms)", fmt(va, ".3f"), fmt(vb, ".3f"),
                     fmt(None if _missing(va) or _missing(vb) else vb - va, "+.3f"),
                     fmt(None if _missing(va) or _missing(vb) or not va else vb / va, ".3f",
                         "×")])  # fmt: skip
    for key, label, spec in (("step_ms", "profiled step (ms)", ".3f"),
                             ("hidden_pct", "comm hidden (%)", ".1f"),
                             ("exposed_ms_per_step", "exposed comm per step (ms)", ".3f"),
                             ("comm_ns", "comm time, all steps (ms)", ".3f"),
                             ("n_iterations", "profiled steps", "d")):  # fmt: skip
        va, vb = ta.get(key), tb.get(key)
        if key == "comm_ns":
            va, vb = _ns_ms(va), _ns_ms(vb)
        delta = None if _missing(va) or _missing(vb) else vb - va
        ratio = None if _missing(va) or _missing(vb) or not va else vb / va
        rows.append(
            [
                label,
                fmt(va, spec),
                fmt(vb, spec),
                fmt(delta, "+" + spec.lstrip("+")),
                fmt(ratio, ".3f", "×"),
            ]
        )
    return Section(
        "compare",
        "Headline, side by side",
        f"{labels[1]} relative to {labels[0]} (delta = {labels[1]} − {labels[0]}).",
        Table(
            ["metric", labels[0], labels[1], "delta", "ratio"],
            rows,
            [False, True, True, True, True],
        ),
    )


def compare_ops_figure(
    a: Analysis, b: Analysis, *, labels: tuple[str, str], top: int = TOP_OPS
) -> Section:
    title = "Exposed comm per op, delta"
    m = tl.compare_ops(
        _frame(a, "by_op"),
        _frame(b, "by_op"),
        a_steps=_n_steps(a),
        b_steps=_n_steps(b),
        a_ranks=len(_get(a, "ranks") or []),
        b_ranks=len(_get(b, "ranks") or []),
    )
    if len(m) == 0:
        return Section(
            "opdelta",
            title,
            "",
            Unavailable("Neither trace has comm attributed to an op name: no per-op deltas."),
        )
    if not ((m["exposed_ns_a"] > 0) | (m["exposed_ns_b"] > 0)).any():
        return Section(
            "opdelta",
            title,
            "",
            Unavailable(
                f"No exposed comm in {labels[0]} or {labels[1]}: every op's comm is hidden."
            ),
        )
    shown = m.head(top).iloc[::-1]
    delta = [_dash(v / 1e3, "+,.2f") for v in shown["delta_exposed_ns"].to_numpy(float)]
    fig = go.Figure()
    for lab, col, color in (
        (labels[0], "exposed_ns_a", "#9AA5B1"),
        (labels[1], "exposed_ns_b", "#E15759"),
    ):
        fig.add_trace(go.Bar(
            orientation="h", y=shown["op"], x=_none_if_nan(shown[col].to_numpy(float) / 1e3),
            name=lab, marker={"color": color}, customdata=delta,
            hovertemplate=("%{y}<br>" + lab + ": %{x:,.2f} µs<br>delta "
                           "%{customdata} µs<extra></extra>"),
        ))  # fmt: skip
    _base_layout(fig, height=130 + 30 * len(shown), barmode="group", bargap=0.25)
    fig.update_xaxes(title="exposed comm, µs per step and rank")
    fig.update_yaxes(automargin=True)
    rows = [
        [
            r.op,
            _dash(r.exposed_ns_a / 1e3, ",.2f"),
            _dash(r.exposed_ns_b / 1e3, ",.2f"),
            _dash(r.delta_exposed_ns / 1e3, "+,.2f"),
            fmt(r.hidden_pct_a, ".1f") if r.in_a else MISSING,
            fmt(r.hidden_pct_b, ".1f") if r.in_b else MISSING,
        ]
        for r in m.head(top).itertuples(index=False)
    ]
    table = Table(
        [
            "op",
            f"exposed µs {labels[0]}",
            f"exposed µs {labels[1]}",
            "delta µs",
            f"hidden % {labels[0]}",
            f"hidden % {labels[1]}",
        ],
        rows,
        [False, True, True, True, True, True],
    )
    cap = (
        f"Exposed comm per op in {labels[0]} and {labels[1]}, the largest changes first "
        "(per step and rank; delta in the hover and the table). An op that launched no comm "
        f"on one side shows {MISSING} there (missing, not 0)."
    )
    return Section("opdelta", title, cap, fig, extra=(table,))


def _dash(x: float, spec: str) -> str:
    """A number, or "—" where one side of a comparison has no value."""
    return MISSING if _missing(x) else f"{x:{spec}}"


NOCOMM_EMPTY = (
    "nocomm runs no collectives, so its trace has no comm to analyse; what comm costs "
    "is the timed step of tp against that of nocomm (the modes table)"
)


SPLIT_NOCOMM_EMPTY = (
    "{mode} runs no collectives, so its trace has no comm to analyse; what its schedule's "
    "split costs is its timed step against that of nocomm (the modes table)"
)


def not_analysed(mode: str | None, reason: str) -> Unavailable:
    """What a mode's place in a report says when its traces could not be analysed: for
    nocomm, domino-nocomm and domino-sp-nocomm one line saying why it is empty (no comm by
    design), else the reason."""
    if mode == "nocomm":
        return Unavailable(NOCOMM_EMPTY)
    if mode in SPLIT_MODES.values():
        return Unavailable(SPLIT_NOCOMM_EMPTY.format(mode=mode))
    return Unavailable(f"Not analysed: {reason}")


GPU_ONLY_SECTIONS = ("switches", "launches", "graphs")  # streams, launches, CUDA graphs


def for_cpu(secs: list[Section]) -> list[Section]:
    """A CPU trace's sections in its own words: threads and cores, not devices. The
    GPU-only measures (stream switches, kernel launches, CUDA-graph candidates) are
    left out (the configuration's notes say they do not apply), and the headline's
    profiled-step card names the wall of the profiled steps, not a device's."""
    out = []
    for sec in secs:
        if sec.key in GPU_ONLY_SECTIONS:
            continue
        if sec.key == "headline" and isinstance(sec.body, list):
            cards = [Card(c.label, c.value, c.sub.replace("device wall", "wall (all threads)"),
                          c.tone) for c in sec.body]  # fmt: skip
            sec = Section(sec.key, sec.title, sec.caption, cards, sec.notes, sec.extra)
        out.append(sec)
    return out


def mixed_hardware_note(a: Analysis, b: Analysis, *, labels: tuple[str, str]) -> str | None:
    """The note when one side of a comparison is a CPU trace and the other a GPU one."""
    ma, mb = _get(a, "mode"), _get(b, "mode")
    if {ma, mb} != {"cpu", "gpu"}:
        return None
    what = {"cpu": "a CPU trace (gloo collectives on host threads)",
            "gpu": "a GPU trace (NCCL kernels on device streams)"}  # fmt: skip
    return (
        f"A ({labels[0]}) is {what[ma]} and B ({labels[1]}) {what[mb]}: their step times "
        "and comm figures come from different hardware, so the deltas say nothing about "
        "the schedule; compare CPU with CPU, GPU with GPU"
    )


def analysis_sections(
    analysis: Analysis,
    *,
    run: dict | None = None,
    mode: str | None = None,
    with_config: bool = True,
) -> list[Section]:
    """Every section of a one-analysis report, in page order."""
    comparison = None
    if run and mode:
        comparison = next((c for c in run.get("comparison") or [] if c.get("mode") == mode), None)
    secs = [
        headline(analysis, comparison=comparison),
        step_timeline(analysis),
        layer_heatmap(analysis),
        exposed_by_op(analysis),
        comm_by_collective_type(analysis),
        switch_gaps(analysis),
        launch_delays(analysis),
        graph_candidates(analysis),
        rank_skew(analysis),
        findings(analysis),
        *whatif_sections(analysis, run=run),
    ]
    if with_config:
        secs.append(configuration(analysis, run=run))
    elif _get(analysis, "notes"):
        secs.append(
            Section(
                "notes",
                "Notes",
                "What the analysis of this mode could not do, or assumed.",
                Table(["note"], [[str(n)] for n in analysis.notes]),
            )
        )
    return secs


def whatif_sections(analysis: Analysis, *, run: dict | None = None) -> list[Section]:
    """The replay's what-if table and critical paths (analysis.replay), and on a CPU
    trace why its threads could not overlap for free (analysis.cpu_threads). Tables
    only: every number comes from the analysis."""
    ov = _overheads(analysis)
    w = (ov.whatif if ov is not None else None) or {}
    if not w.get("computed"):
        return []
    rows = [[s["label"], fmt(s.get("step_ms"), ".3f", " ms"), fmt(s.get("gain_ms"), ".3f", " ms")]
            for s in w.get("scenarios") or ()]  # fmt: skip
    if w.get("explained"):
        add = w.get("gains_add")
        wall = "wall (all threads)" if _get(analysis, "mode") == "cpu" else "device wall"
        cap = (f"Each row replays the profiled step (the slowest rank's {wall}) with one "
               "change; gain = replayed step - predicted step. "
               + ("" if add is None else
                  f"The fixes' gains {'add up' if add else 'do not add up'}: their sum "
                  f"{fmt(w.get('sum_of_fix_gains_ms'), '.3f', ' ms')} against "
                  f"{fmt(w.get('combined_gain_ms'), '.3f', ' ms')} with all applied."))  # fmt: skip
    else:
        cap = str(w.get("reason"))
    out = [Section("whatif", "What if", cap,
                   Table(["scenario", "predicted step", "gain / step"], rows, [False, True, True]))]
    pct = lambda x: fmt(None if x is None else 100 * x, ".0f", "%")  # noqa: E731
    cp = [[r["rank"], r["iteration"], fmt(r["length_ns"] / 1e6, ".3f", " ms"),
           pct(r.get("compute_share")), pct(r.get("exposed_comm_share")),
           pct(r.get("host_share")), pct(r.get("idle_share"))]
          for r in w.get("critical_path") or ()]  # fmt: skip
    out.append(Section(
        "critical_path", "Critical path",
        "Each rank's chain of binding dependencies through its profiled step, as shares of "
        "its wall: compute, exposed comm (comm on the path, waiting for peers included), "
        "host (host calls, the host's gaps, launch latency) and idle.",
        Table(["rank", "step", "wall", "compute", "exposed comm", "host", "idle"], cp,
              [True, True, True, True, True, True, True])))  # fmt: skip
    if _get(analysis, "mode") == "cpu":
        b = busy_threads(_get(analysis, "intervals"), cpu_count=cpu_count_of(run))
        if b is not None:
            out.append(Section("cpu_threads", "CPU threads",
                               "Why overlap costs time on this CPU run, from the trace.",
                               Table(["finding"], [[why_text(b, w.get("overlap_tax"))]])))  # fmt: skip
    return out
