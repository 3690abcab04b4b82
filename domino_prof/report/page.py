"""One self-contained HTML page: plotly.js inlined once, no network access needed.

Each figure is a ``<div class="dp-plot" data-expected-traces="N">`` with its JSON
in a ``<script type="application/json">`` beside it; one script at the end draws
them all. No CDN, no web fonts, no external images: the file opens on a cluster
login node with no internet. Written atomically (``domino_prof.io``).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from domino_prof import __version__
from domino_prof.analysis.document import Analysis
from domino_prof.io import atomic_write_text
from domino_prof.reference_model.modes import RUN_KEYS
from domino_prof.report import figures as F
from domino_prof.rundata import comm_label

_CSS = """
:root { --fg:#1f2933; --muted:#616e7c; --line:#e4e7eb; --bg:#f5f7fa; --card:#fff;
  --good:#2f8132; --bad:#c23b3b; --accent:#4E79A7; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
  sans-serif; }
header { background:#1f2933; color:#fff; padding:18px 28px 14px; }
header h1 { margin:0 0 4px; font-size:22px; font-weight:600; }
header .sub { color:#cbd2d9; font-size:13px; }
.emulated-banner { background:#fff3c4; color:#5c3c00; border-bottom:2px solid #f0b429;
  padding:10px 28px; font-size:15px; font-weight:600; }
nav { padding:8px 28px; background:#fff; border-bottom:1px solid var(--line);
  position:sticky; top:0; z-index:10; font-size:13px; display:flex; flex-wrap:wrap;
  gap:2px 16px; }
nav a { color:var(--accent); text-decoration:none; white-space:nowrap; }
main { max-width:1320px; margin:0 auto; padding:18px 24px 40px; }
h2.group { margin:26px 0 8px; font-size:19px; border-bottom:2px solid var(--accent);
  padding-bottom:4px; }
section { background:var(--card); border:1px solid var(--line); border-radius:8px;
  padding:14px 18px 12px; margin:14px 0; }
section h3 { margin:0 0 2px; font-size:16px; }
p.caption { margin:0 0 8px; color:var(--muted); font-size:13px; }
p.note { margin:6px 0 0; color:#8a5a00; font-size:12.5px; background:#fff8e6;
  border-left:3px solid #f0b429; padding:4px 8px; }
.unavailable { padding:18px; color:var(--muted); background:#f9fafb;
  border:1px dashed #cbd2d9; border-radius:6px; text-align:center; }
.cards { display:flex; flex-wrap:wrap; gap:12px; }
.card { flex:1 1 180px; border:1px solid var(--line); border-radius:8px; padding:12px 14px;
  background:#fbfcfd; }
.card .label { color:var(--muted); font-size:12px; text-transform:uppercase;
  letter-spacing:.04em; }
.card .value { font-size:30px; font-weight:650; margin:2px 0; font-variant-numeric:tabular-nums; }
.card.good .value { color:var(--good); } .card.bad .value { color:var(--bad); }
.card .sub { color:var(--muted); font-size:12px; }
table.dp { border-collapse:collapse; width:100%; font-size:13px; margin-top:6px; }
table.dp th { text-align:left; background:#f0f4f8; font-weight:600; }
table.dp th, table.dp td { border-bottom:1px solid var(--line); padding:4px 8px;
  vertical-align:top; }
table.dp td.num, table.dp th.num { text-align:right; font-variant-numeric:tabular-nums; }
table.dp td { word-break:break-word; }
.grid2 { display:grid; grid-template-columns:1fr 1fr; gap:14px; }
.grid2 > section { margin:0; }
@media (max-width: 1000px) { .grid2 { grid-template-columns:1fr; } }
.sev { display:inline-block; padding:1px 8px; border-radius:10px; font-size:12px;
  font-weight:600; background:#e4e7eb; }
.sev-high { background:#fde2e1; color:#b42318; } .sev-medium { background:#fff1d6;
  color:#8a5a00; } .sev-low { background:#e3f2e4; color:#2f6b31; }
footer { color:var(--muted); font-size:12px; text-align:center; padding:18px; }
"""

_DRAW = """
(function () {
  var cfg = {displaylogo: false, responsive: true,
             modeBarButtonsToRemove: ['select2d', 'lasso2d', 'toImage']};
  document.querySelectorAll('div.dp-plot').forEach(function (div) {
    var spec = JSON.parse(document.getElementById(div.id + '-data').textContent);
    Plotly.newPlot(div, spec.data, spec.layout, cfg);
  });
})();
"""

# Sections drawn side by side when both are present (small distributions).
_PAIRS = (("switches", "launches"), ("skew", "graphs"))


class _Page:
    def __init__(self) -> None:
        self.n_fig = 0
        self.nav: list[tuple[str, str]] = []
        self.parts: list[str] = []

    def figure(self, fig: go.Figure) -> str:
        self.n_fig += 1
        fid = f"dp-fig-{self.n_fig}"
        spec = pio.to_json({"data": fig.data, "layout": fig.layout}, validate=False)
        # JSON inside <script>: "</" would end the element early
        spec = spec.replace("</", "<\\/")
        return (
            f'<div class="dp-plot" id="{fid}" data-expected-traces="{len(fig.data)}">'
            f'</div><script type="application/json" id="{fid}-data">{spec}</script>'
        )

    def body(self, body: Any) -> str:
        if isinstance(body, go.Figure):
            return self.figure(body)
        if isinstance(body, F.Unavailable):
            return f'<div class="unavailable">{html.escape(body.reason)}</div>'
        if isinstance(body, F.Table):
            return _table(body)
        if isinstance(body, list):
            return _cards(body)
        raise TypeError(f"unknown section body {type(body).__name__}")

    def section(self, sec: F.Section, *, anchor: str, nav_label: str | None = None) -> str:
        if nav_label:
            self.nav.append((anchor, nav_label))
        out = [
            f'<section id="{anchor}" data-section="{sec.key}">',
            f"<h3>{html.escape(sec.title)}</h3>",
        ]
        if sec.caption:
            out.append(f'<p class="caption">{html.escape(sec.caption)}</p>')
        out.append(self.body(sec.body))
        out.extend(self.body(x) for x in sec.extra)
        out.extend(f'<p class="note">{html.escape(n)}</p>' for n in sec.notes)
        out.append("</section>")
        return "".join(out)

    def group(self, sections: Sequence[F.Section], *, prefix: str, heading: str | None) -> None:
        if heading:
            self.parts.append(f'<h2 class="group" id="{prefix}">{html.escape(heading)}</h2>')
            self.nav.append((prefix, heading))
        by_key = {s.key: s for s in sections}
        done: set[str] = set()
        for sec in sections:
            if sec.key in done:
                continue
            pair = next((p for p in _PAIRS if sec.key in p and all(k in by_key for k in p)), None)
            if pair and len({isinstance(by_key[k].body, go.Figure) for k in pair}) > 1:
                pair = None  # a figure beside a one-line note leaves a hole: stack them
            if pair:
                cells = [
                    self.section(
                        by_key[k],
                        anchor=f"{prefix}-{k}",
                        nav_label=None if heading else by_key[k].title,
                    )
                    for k in pair
                ]
                self.parts.append('<div class="grid2">' + "".join(cells) + "</div>")
                done.update(pair)
                continue
            self.parts.append(
                self.section(
                    sec, anchor=f"{prefix}-{sec.key}", nav_label=None if heading else sec.title
                )
            )
            done.add(sec.key)

    def render(self, *, title: str, subtitle: str, emulation: str | None = None) -> str:
        """The page; ``emulation`` ("emulated comm (profile NAME)"): a banner under the
        title, on the first screen, saying every number stands on emulated collectives."""
        from plotly.offline import get_plotlyjs

        now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        nav = "".join(f'<a href="#{a}">{html.escape(t)}</a>' for a, t in self.nav)
        return "".join([
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{html.escape(title)}</title><style>{_CSS}</style>",
            # plotly.js, inlined once; the page must open with no network access
            f'<script type="text/javascript">{get_plotlyjs()}</script></head><body>',
            f"<header><h1>{html.escape(title)}</h1>",
            f'<div class="sub">{html.escape(subtitle)}</div></header>',
            _banner(emulation),
            f"<nav>{nav}</nav><main>", *self.parts, "</main>",
            f"<footer>domino-prof {__version__} · generated {now} · self-contained, opens "
            + "offline</footer>",
            f"<script>{_DRAW}</script></body></html>\n",
        ])  # fmt: skip


def _banner(emulation: str | None) -> str:
    if not emulation:
        return ""
    return (
        f'<div class="emulated-banner" id="emulated-comm">{html.escape(emulation)}: one GPU ran '
        "rank 0's shard of the TP group and every collective was an emulated kernel timed by "
        "that profile (docs/EMULATION.md); comm times are modelled, not measured on a network; "
        "losses are meaningless</div>"
    )


def _emulation_of(*analyses: Analysis | F.Unavailable, run: dict | None = None) -> str | None:
    """The label of run.json's ``comm`` block, else of the analyses' trace marks."""
    labels = [comm_label(run)] if run else []
    labels += [getattr(a, "emulation", None) for a in analyses]
    labels = list(dict.fromkeys(x for x in labels if x))
    return " + ".join(labels) if labels else None


def _td(v: object, numeric: bool, col: str) -> str:
    text = html.escape(str(v))
    if col == "severity" and text:
        text = f'<span class="sev sev-{_slug(text.lower())}">{text}</span>'
    return f'<td class="{"num" if numeric else ""}">{text}</td>'


def _table(t: F.Table) -> str:
    num = list(t.numeric) + [False] * (len(t.columns) - len(t.numeric))
    head = "".join(
        f'<th class="{"num" if n else ""}">{html.escape(str(c))}</th>'
        for c, n in zip(t.columns, num)
    )
    rows = "".join(
        "<tr>" + "".join(_td(v, n, str(c)) for v, n, c in zip(r, num, t.columns)) + "</tr>"
        for r in t.rows
    )
    return f'<table class="dp"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def _cards(cards: Sequence[F.Card]) -> str:
    out = ['<div class="cards">']
    for c in cards:
        out.append(
            f'<div class="card {c.tone}"><div class="label">{html.escape(c.label)}</div>'
            f'<div class="value">{html.escape(c.value)}</div>'
            f'<div class="sub">{html.escape(c.sub)}</div></div>'
        )
    out.append("</div>")
    return "".join(out)


def _source(analysis: Analysis | F.Unavailable) -> str:
    return str(getattr(analysis, "source", "") or "")


def _sections(
    analysis: Analysis | F.Unavailable, *, run: dict | None, mode: str | None, with_config: bool
) -> list[F.Section]:
    """The sections of one analysis, or one note when it could not be analysed."""
    if isinstance(analysis, F.Unavailable):
        secs = [F.Section("headline", "Not analysed", "", analysis)]
        if with_config:
            secs.append(F.configuration(None, run=run))
        return secs
    secs = F.analysis_sections(analysis, run=run, mode=mode, with_config=with_config)
    return F.for_cpu(secs) if getattr(analysis, "mode", None) == "cpu" else secs


def render_report(
    analysis: Analysis | F.Unavailable,
    *,
    run: dict | None = None,
    mode: str | None = None,
    title: str | None = None,
) -> str:
    """The HTML text of a one-analysis report."""
    if mode is None and run and len(run.get("modes") or {}) == 1:
        mode = next(iter(run["modes"]))
    page = _Page()
    page.group(_sections(analysis, run=run, mode=mode, with_config=True), prefix="a", heading=None)
    ranks = getattr(analysis, "ranks", []) or []
    sub = f"{_source(analysis)} · {len(ranks)} rank(s)" + (f" · mode {mode}" if mode else "")
    return page.render(title=title or "domino-prof overlap report", subtitle=sub,
                       emulation=_emulation_of(analysis, run=run))  # fmt: skip


def write_report(
    analysis: Analysis | F.Unavailable | Mapping[str, Analysis | F.Unavailable],
    path: str | Path,
    *,
    run: dict | None = None,
    title: str | None = None,
    mode: str | None = None,
) -> Path:
    """Write the report to ``path`` (atomically); returns the path.

    ``analysis``: one ``Analysis``, or a mapping ``{mode: Analysis}`` of a multi-mode
    run (then ``run`` is the run.json dict and the page has one group per mode)."""
    if isinstance(analysis, Mapping):
        return write_run_report(analysis, path, run=run or {}, title=title)
    return atomic_write_text(path, render_report(analysis, run=run, mode=mode, title=title))


def render_run_report(
    analyses: Mapping[str, Analysis | F.Unavailable], *, run: dict, title: str | None = None
) -> str:
    """A multi-mode run: the mode comparison, then one group of sections per mode."""
    page = _Page()
    if len(analyses) > 1 or run.get("comparison"):
        hidden = {
            m: (getattr(a, "totals", None) or {}).get("hidden_pct") for m, a in analyses.items()
        }
        secs = [F.mode_comparison(run, hidden_pct=hidden)]
        for m in RUN_KEYS:  # what keeps domino, domino-sp from nocomm (the mode registry)
            lim = F.domino_limits(run, analyses, mode=m)
            if lim is not None:
                secs.append(lim)
        page.group(secs, prefix="modes", heading="All modes")
    # domino (the schedule under study) first, then the run's order
    order = sorted(analyses, key=lambda m: (m != "domino", list(analyses).index(m)))
    for mode in order:
        a = analyses[mode]
        secs = _sections(a, run=run, mode=mode, with_config=False)
        page.group(secs, prefix=f"mode-{_slug(mode)}", heading=f"Mode: {mode}")
    page.group([F.configuration(None, run=run)], prefix="config", heading="Run configuration")
    sub = " · ".join([", ".join(order), *_run_facts(run)])
    return page.render(title=title or "domino-prof run report", subtitle=sub,
                       emulation=_emulation_of(*analyses.values(), run=run))  # fmt: skip


def _run_facts(run: dict) -> list[str]:
    """A few words on what ran: model, TP degree, sequence, device (when run.json says)."""
    cfg = run.get("config") or {}
    model = cfg.get("model")
    out = [str(model.get("name")) if isinstance(model, dict) and model.get("name") else ""]
    out.append(f"TP {cfg['tp']}" if cfg.get("tp") else "")
    out.append(f"seq {cfg['seq']}" if cfg.get("seq") else "")
    devs = run.get("devices") or []
    if devs and isinstance(devs[0], dict) and devs[0].get("name"):
        n = devs[0].get("count_visible")
        out.append(f"{n}× {devs[0]['name']}" if n else str(devs[0]["name"]))
    return [x for x in out if x]


def write_run_report(
    analyses: Mapping[str, Analysis | F.Unavailable],
    path: str | Path,
    *,
    run: dict,
    title: str | None = None,
) -> Path:
    """Write the report of a run directory (one section group per mode)."""
    return atomic_write_text(path, render_run_report(analyses, run=run, title=title))


def render_compare(
    a: Analysis,
    b: Analysis,
    *,
    labels: tuple[str, str] = ("A", "B"),
    title: str | None = None,
    timed_step_ms: tuple[float, float] | None = None,
) -> str:
    page = _Page()
    head = F.compare_headline(a, b, labels=labels, timed_step_ms=timed_step_ms)
    mixed = F.mixed_hardware_note(a, b, labels=labels)
    if mixed:  # on the first screen, under the side-by-side table
        head = dataclasses.replace(head, notes=(*head.notes, mixed))
    page.group(
        [head, F.compare_ops_figure(a, b, labels=labels)],
        prefix="cmp",
        heading=None,
    )
    for lab, x in zip(labels, (a, b)):
        page.group(
            [F.headline(x, title=f"{lab}: headline"), F.step_timeline(x)],
            prefix=f"side-{_slug(lab)}",
            heading=f"{lab}: {_source(x)}",
        )
    sub = f"{labels[0]}: {_source(a)}  vs  {labels[1]}: {_source(b)}"
    return page.render(
        title=title or f"domino-prof compare: {labels[0]} vs {labels[1]}", subtitle=sub,
        emulation=_emulation_of(a, b),
    )  # fmt: skip


def write_compare(
    a: Analysis,
    b: Analysis,
    path: str | Path,
    *,
    labels: tuple[str, str] = ("A", "B"),
    title: str | None = None,
) -> Path:
    """Write the A/B comparison page (headline side by side, per-op deltas)."""
    return atomic_write_text(path, render_compare(a, b, labels=labels, title=title))


def _slug(s: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in str(s)).strip("-") or "x"


__all__ = [
    "render_compare",
    "render_report",
    "render_run_report",
    "write_compare",
    "write_report",
    "write_run_report",
]
