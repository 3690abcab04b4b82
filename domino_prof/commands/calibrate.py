"""`domino-prof calibrate TRACES... -o profile.json`: fit a comm profile from real traces.

Per (collective, R, dtype): alpha and algbw of ``t = alpha + size / algbw`` from the
collective kernels' durations against their message sizes (p10 per size, then a
least-squares line; ``domino_prof.emulation.fit``), CTAs from the kernels' grids. The
profile is what ``run --comm emulate --comm-profile FILE`` replays (docs/EMULATION.md).
Torch-free: traces are read by the trace loader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from domino_prof.commands._common import print_notes, user_errors
from domino_prof.errors import ConfigError
from domino_prof.io import atomic_write_text

DEFAULT_NAME = "calibrated"


@user_errors
def calibrate(
    traces: Annotated[
        list[str],
        typer.Argument(
            help="Real multi-GPU traces: trace files, directories of rank files, or run "
            "directories (each mode is read on its own).",
            show_default=False,
            metavar="TRACES",
        ),
    ],
    output: Annotated[
        str, typer.Option("-o", "--output", help="Profile JSON to write (atomically).")
    ],
    name: Annotated[
        str | None,
        typer.Option(
            "--name", help=f"The profile's name (default: --merge's, else {DEFAULT_NAME!r})."
        ),
    ] = None,
    merge: Annotated[
        str | None,
        typer.Option(
            "--merge",
            help="A profile (file or shipped name) whose entries are kept where the traces "
            "fit none (e.g. published reduce-scatter / all-gather figures).",
        ),
    ] = None,
    percentile: Annotated[
        float,
        typer.Option("--percentile", help="Low percentile of the durations per size (0, 50]."),
    ] = 10.0,
) -> None:
    """Fit a comm profile from real traces (for run --comm emulate).

    Per collective, R and dtype: alpha, algbw and CTAs (docs/EMULATION.md)."""
    from domino_prof.emulation.fit import collect, fit_profile  # numpy, pandas: not at start-up
    from domino_prof.emulation.profile import dumps, load_profile  # not at start-up either

    if not (0 < percentile <= 50):
        raise ConfigError(f"--percentile {percentile:g} is not in (0, 50]; the default is 10")
    base = load_profile(merge) if merge else None
    samples = collect(traces)
    names = [Path(t).resolve().name or t for t in traces]
    prof, notes = fit_profile(
        samples,
        name=name or (base.name if base else DEFAULT_NAME),
        traces=names,
        percentile=percentile,
        base=base,
    )
    try:
        atomic_write_text(output, dumps(prof))
    except OSError as e:
        raise ConfigError(f"{output}: cannot write the profile ({e.strerror or e})") from None
    print_notes(notes)
    fitted = {tuple(e.key) for e in prof.entries if e.fit is not None}
    print(f"comm profile {prof.name!r} -> {output}")
    print(f"{'collective':<15}{'R':>3} {'dtype':<9}{'alpha us':>10}{'algbw GB/s':>12}"
          f"{'busbw GB/s':>12}{'ctas':>6}  from")  # fmt: skip
    for e in prof.entries:
        src = "fitted" if e.key in fitted else "kept (--merge)"
        print(f"{e.collective:<15}{e.ranks:>3} {e.dtype:<9}{e.alpha_us:>10.3f}"
              f"{e.algbw_gbps:>12.2f}{e.busbw_gbps:>12.2f}{e.ctas:>6}  {src}")  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command("calibrate", no_args_is_help=True)(calibrate)
