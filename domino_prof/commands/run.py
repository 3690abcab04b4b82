"""`domino-prof run`: train the reference Domino TP Llama for a few steps, profiled."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
from contextlib import nullcontext
from enum import Enum
from pathlib import Path

import typer

from domino_prof.commands._common import user_errors
from domino_prof.errors import ConfigError, RunError
from domino_prof.reference_model import modes as _modes
from domino_prof.reference_model.config import RunConfig, parse_split_sizes

_FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}

# --mode's choices: the registry's modes (reference_model/modes.py, torch-free) + all
Mode = Enum("Mode", {n.replace("-", "_"): n for n in (*_modes.names(), "all")}, type=str)


def _opt(name: str, *flags: str, **kw) -> typer.models.OptionInfo:
    """The option of RunConfig's field ``name``: the flag, help text and default the field
    declares (config.py), ``flags`` added after its flag (short forms); a bool field's
    flag has its --no- form."""
    f = _FIELDS[name]
    default = f.metadata.get("cli_default", f.default)
    flag = f.metadata["flag"]
    if isinstance(default, bool) or f.metadata.get("switch"):
        flag = f"{flag}/--no-{flag.removeprefix('--')}"
    return typer.Option(default, flag, *flags, help=f.metadata["help"], **kw)


def _check_out(out: Path) -> None:
    """--out must be a directory we can create or write into (not an existing file)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(
            f"--out {out} is an existing file; give a directory (it is created if missing)"
        )
    parent = next((p for p in (out, *out.parents) if p.exists()), Path("."))
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {out}: cannot create or write in {parent}; choose a writable "
                          "directory")  # fmt: skip


def _positive(value: float) -> float:
    """--timeout must be > 0 (0 would kill the ranks at once): a usage error, exit 2."""
    if value is not None and not value > 0:
        raise typer.BadParameter(f"{value:g} s would stop the ranks at once; give seconds > 0")
    return value


class _Stopped(KeyboardInterrupt):
    """A kill (SIGTERM, SIGHUP) during `run`, taken as Ctrl-C is: the ranks are ended,
    the lock released, the run marked (``runs.mark_interrupted``)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum, frame) -> None:
    raise _Stopped(signum)


def _stop_on_kill() -> dict:
    """SIGTERM and SIGHUP raise :class:`_Stopped` (KeyboardInterrupt) in the main thread
    from now on; returns the handlers they had, for :func:`_restore`."""
    old = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            old[sig] = signal.signal(sig, _raise_stopped)
        except (ValueError, OSError):  # not the main thread (an embedding program)
            pass
    return old


def _restore(old: dict) -> None:
    for sig, h in old.items():
        signal.signal(sig, h)


def last_lines(out: Path) -> list[str]:
    """What `run` ends with (stderr): the run directory, then the report to open, or
    the command that writes it."""
    report = out / "report.html"
    if report.is_file():
        return [f"run directory: {out}", f"open the report: {report} (one file, works offline)"]
    hint = f"no report.html: `domino-prof run --reanalyze {out}` analyses the traces and writes it"
    return [f"run directory: {out}", hint]


def print_comparison(run: dict) -> None:
    from rich.console import Console

    from domino_prof.commands._format import DOMINO_NOCOMM_NOTE, NOCOMM_NOTE, modes_table
    from domino_prof.rundata import comm_label, host_speed_note, verdict_reason, verdict_text

    label = comm_label(run)  # "emulated comm (profile NAME)", None for real collectives
    t = modes_table(run)
    if t is not None:  # its title carries the label (_format.modes_table)
        Console().print(t)
    verdict = verdict_text(run.get("verdict") or [])
    if verdict:  # the answer, with its noise: "within noise" when the interval holds 1.0
        print(f"verdict (timed steps, 95% intervals{', ' + label if label else ''}): {verdict}")
        why = verdict_reason(run)
        if why:  # when this run cannot show overlap pay off: why, in one sentence
            print(f"why: {why}")
    host = host_speed_note(run)
    if host:  # lent GPU hosts change speed ~2x for seconds at a time
        print(f"host: {host}")
    for key in _modes.RUN_KEYS.values():  # what keeps domino, domino-sp from nocomm
        lim = run.get(key)
        if lim and lim.get("text"):  # analysis.limits
            print(f"what limits {lim['mode']}{' (' + label + ')' if label else ''}: "
                  f"{lim['text']}")  # fmt: skip
    if label:
        print(f"{label}: one GPU ran rank 0's shard; losses meaningless", file=sys.stderr)
    if "nocomm" in run["modes"]:
        Console(stderr=True).print(f"[dim]{NOCOMM_NOTE}[/dim]")
    for m in _modes.SPLIT_MODES.values():
        if m in run["modes"]:
            Console(stderr=True).print(f"[dim]{DOMINO_NOCOMM_NOTE.format(m=m)}[/dim]")


def register(app: typer.Typer) -> None:
    @app.command()
    @user_errors
    def run(
        tp: int = _opt("tp"),
        seq: int = _opt("seq"),
        model: str = _opt("model"),
        mode: Mode = _opt("modes"),
        splits: int = _opt("splits"),
        col_splits: int = _opt("col_splits"),
        split_sizes: str = _opt("split_sizes", metavar="N,N,..."),
        mbs: int = _opt("mbs"),
        layers: int = typer.Option(0, help="Override the preset's layer count (0: keep)."),
        timed_steps: int = _opt("timed_steps"),
        block_steps: int = _opt("block_steps"),
        warmup_steps: int = _opt("warmup_steps"),
        profile_steps: int = _opt("profile_steps"),
        timing: str = _opt("timing"),
        device: str = _opt("device"),
        dtype: str = _opt("dtype"),
        data: Path = _opt("data"),
        out: Path = typer.Option(
            None,
            "-o",
            "--output",
            "--out",
            metavar="DIR",
            help="Run directory to write [default: runs/<time>-<model>-tp<N>].",
        ),
        timeout_s: float = _opt("timeout_s", callback=_positive),
        seed: int = _opt("seed"),
        lr: float = _opt("lr"),
        cuda_graphs: bool = _opt("cuda_graphs"),
        graph_scope: str = _opt("graph_scope"),
        compile: bool = _opt("compile"),
        high_priority_comm: bool | None = _opt("high_priority_comm"),
        comm_ctas: int = _opt("comm_ctas"),
        comm_ctas_scope: str = _opt("comm_ctas_scope"),
        comm_engine: str = _opt("comm_engine"),
        sm_carveout: int = _opt("sm_carveout"),
        carveout_auto: bool = _opt("carveout_auto"),
        carveout_scope: str = _opt("carveout_scope"),
        overlap_gemm: str = _opt("overlap_gemm"),
        wgrad_in: str = _opt("wgrad_in"),
        sp_wgrad_input: str = _opt("sp_wgrad_input"),
        sp_residual: str = _opt("sp_residual"),
        mb_streams: int = _opt("mb_streams"),
        attention: str = _opt("attention"),
        comm: str = _opt("comm"),
        comm_profile: str = _opt("comm_profile", metavar="NAME|FILE"),
        analyze: bool = typer.Option(True, help="Analyse traces and write report.html."),
        reanalyze: Path = typer.Option(
            None,
            help="Train nothing: re-analyse this existing "
            "run directory in place (e.g. copied back from a GPU "
            "node without plotly) and print its table.",
        ),
    ) -> None:
        """Train the reference TP Llama, profiled; write a run directory.

        A few warm-up, timed and profiled steps per mode; then the traces, run.json,
        each mode's analysis and report.html."""
        from domino_prof import runs

        if reanalyze is not None:
            result = runs.refresh(reanalyze)
            print_comparison(result)
            for note in result.get("notes", []):  # e.g. what an interrupted run lacks
                print(f"note: {note}", file=sys.stderr)
            for line in last_lines(reanalyze):
                print(line, file=sys.stderr)
            return
        from domino_prof.reference_model import launcher

        options = {  # RunConfig's fields (from_options resolves model, layers and "auto")
            "model": model, "layers": layers, "tp": tp, "seq": seq, "mbs": mbs,
            "splits": splits, "modes": _modes.names() if mode is Mode.all else (mode.value,),
            "dtype": dtype, "warmup_steps": warmup_steps, "timed_steps": timed_steps,
            "block_steps": block_steps, "profile_steps": profile_steps, "timing": timing,
            "seed": seed, "lr": lr,
            "data": str(data) if data else None, "timeout_s": timeout_s,
            "cuda_graphs": cuda_graphs, "graph_scope": graph_scope, "compile": compile,
            "high_priority_comm": high_priority_comm, "attention": attention, "comm": comm,
            "comm_profile": comm_profile or "", "col_splits": col_splits,
            "split_sizes": parse_split_sizes(split_sizes), "comm_ctas": comm_ctas,
            "comm_ctas_scope": comm_ctas_scope,
            "sm_carveout": sm_carveout, "carveout_scope": carveout_scope,
            "carveout_auto": carveout_auto,
            "overlap_gemm": overlap_gemm, "comm_engine": comm_engine, "wgrad_in": wgrad_in,
            "sp_wgrad_input": sp_wgrad_input, "sp_residual": sp_residual,
            "mb_streams": mb_streams,
        }  # fmt: skip
        # the flags first, before torch is imported (a mistake costs no torch start-up)
        cfg = RunConfig.check_options(device=device, **options)
        device = launcher.resolve_device(device, tp=tp, emulated=comm == "emulate")
        if cfg is None:  # --device auto: the config of the device torch found
            cfg = RunConfig.from_options(device=device, **options)
        launcher.check_torch_knobs(cfg)  # --comm-ctas, --sm-carveout: offered by this torch?
        if cfg.emulated:  # the emulated collectives are Triton kernels (reference_model.emulate)
            import importlib.util

            if importlib.util.find_spec("triton") is None:
                raise ConfigError(
                    "--comm emulate needs Triton (its collectives are Triton kernels); it ships "
                    "with torch's CUDA wheels: pip install triton"
                )
        if data is not None:  # before any rank starts: what train.TokenSource can read
            launcher.check_data(data, mbs=cfg.mbs, seq=cfg.seq)
        if out is None:
            out = Path("runs") / (
                f"{time.strftime('%Y%m%d-%H%M%S')}-{cfg.model.name}-tp{tp}"
                f"{'-emulated' if cfg.emulated else ''}"
            )
        _check_out(out)
        if cfg.emulated:  # said before anything runs: what this run is and is not
            from domino_prof.reference_model.config import comm_info

            print(
                f"comm: {comm_info(cfg)['label']}: one process runs rank 0's shard of tp {cfg.tp} on "
                "one GPU; every collective is an emulated kernel, losses meaningless",
                file=sys.stderr,
            )

        # the run directory's life (runs.claim): locked against a second run, run.json
        # "incomplete" first, temp files removed however it ends; rank 0 holds it
        torchrun = launcher.under_torchrun()
        rank0 = not torchrun or int(os.environ.get("RANK", "0")) == 0
        held = runs.claim(out, run_json=runs.incomplete_run(cfg)) if rank0 else nullcontext()
        handlers = _stop_on_kill()  # a kill ends the run as Ctrl-C does (no stale lock)
        t0 = time.monotonic()
        with held:
            try:
                if torchrun:
                    from domino_prof.reference_model.train import worker

                    code = worker(cfg, out)
                    if code:
                        raise RunError(
                            f"rank {os.environ.get('RANK')} failed with exit code {code}"
                        )
                    if not rank0:
                        return
                else:
                    launcher.spawn_ranks(cfg, out)
                result = runs.assemble(cfg, out, analyze=analyze)
            except KeyboardInterrupt as e:
                signum = getattr(e, "signum", signal.SIGINT)
                how = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
                if rank0:
                    runs.mark_interrupted(out, how=how, after_s=time.monotonic() - t0)
                raise runs.Interrupted(out, signum=signum) from None
            finally:
                _restore(handlers)
        print_comparison(result)
        for note in result["notes"]:
            print(f"note: {note}", file=sys.stderr)
        for line in last_lines(out):
            print(line, file=sys.stderr)


if __name__ == "__main__":  # `python -m domino_prof.commands.run ...`: run alone, no other command
    _app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    register(_app)
    _app()
