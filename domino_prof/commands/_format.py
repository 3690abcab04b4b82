"""Tables the commands print that more than one command shares (rich, stdout)."""

from __future__ import annotations

from typing import Any

from domino_prof.rundata import comm_label, comparison_table


def modes_table(run: dict | None) -> Any:
    """The run's comparison of modes (``rundata.comparison_table``), or None without one."""
    from rich.table import Table

    rows = (run or {}).get("comparison") or []
    if not rows:
        return None
    cfg = run.get("config") or {}
    model = cfg.get("model") or {}
    title = "  ".join(
        x
        for x in (
            str(model.get("name", "")) if isinstance(model, dict) else "",
            f"tp {cfg['tp']}" if cfg.get("tp") else "",
            f"seq {cfg['seq']}" if cfg.get("seq") else "",
            f"mbs {cfg['mbs']}" if cfg.get("mbs") else "",
            comm_label(run) or "",  # "emulated comm (profile NAME)": every number is
        )
        if x
    )
    headers, cells = comparison_table(rows, compact=True)
    t = Table(title=title or None, caption=COMPARISON_CAPTION)
    for h in headers:
        if h == "mode":  # a long name folds on a narrow terminal: "domino-s…" is ambiguous
            t.add_column(h, justify="left", overflow="fold")
        else:
            t.add_column(h, justify="right")
    for line in cells:
        t.add_row(*line)
    return t


COMPARISON_CAPTION = (
    "timed step: median of the timed (unprofiled) steps, what the speedups compare; "
    "±P%: the wider side of the 95% interval over the timed blocks (run.json and the "
    "report give both ends); hidden %: the profiled steps"
)
NOCOMM_NOTE = (
    "nocomm skips every TP collective: its losses are meaningless; it is a throughput "
    "upper bound only."
)
DOMINO_NOCOMM_NOTE = (  # .format(m="domino-nocomm" | "domino-sp-nocomm")
    "{m} skips every TP collective of its schedule's micro-batch split: its losses are "
    "meaningless; it measures the split's own cost only."
)
