"""`domino-prof run`: train the reference Domino TP Llama for a few steps, profiled."""

from __future__ import annotations

import os
import sys
import time
from contextlib import nullcontext
from enum import Enum
from pathlib import Path

import typer

from domino_prof.commands._common import user_errors
from domino_prof.errors import ConfigError, RunError
from domino_prof.reference_model import modes as _modes

# --mode's choices: the registry's modes (reference_model/modes.py, torch-free) + all
Mode = Enum("Mode", {n.replace("-", "_"): n for n in (*_modes.names(), "all")}, type=str)


# Timed steps by default: 50 blocks of 4 per mode (stats.py: the interval is ranks 18
# and 33 of 50 paired block ratios). On the tiny preset at tp 2 on the shared 2-core
# machine (load 0.5-5.7) that was 86-90 s of timed steps for the five modes and
# intervals of ±5.8-9.0% (README, the main job): short of ±5% under that load.
DEFAULT_TIMED_STEPS = 200
DEFAULT_BLOCK_STEPS = 4


def _under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or (
        "RANK" in os.environ
        and "WORLD_SIZE" in os.environ
        and "MASTER_ADDR" in os.environ
        and "DOMINO_PROF_LAUNCHER" not in os.environ
    )


def _import_torch():
    try:
        import torch
    except ImportError:
        raise ConfigError(
            "`domino-prof run` needs PyTorch: pip install 'torch==2.13.0' "
            "--index-url https://download.pytorch.org/whl/cpu (CPU) or a CUDA "
            "build; analysing traces does not need it"
        ) from None
    return torch


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


def _visible_gpus(torch) -> int:
    """CUDA GPUs this process sees (a function of its own so tests can stand in one)."""
    return torch.cuda.device_count()


def print_comparison(run: dict) -> None:
    from rich.console import Console

    from domino_prof.commands._format import NOCOMM_NOTE, modes_table
    from domino_prof.rundata import comm_label, verdict_text

    label = comm_label(run)  # "emulated comm (profile NAME)", None for real collectives
    t = modes_table(run)
    if t is not None:  # its title carries the label (_format.modes_table)
        Console().print(t)
    verdict = verdict_text(run.get("verdict") or [])
    if verdict:  # the answer, with its noise: "within noise" when the interval holds 1.0
        print(f"verdict (timed steps, 95% intervals{', ' + label if label else ''}): {verdict}")
    lim = run.get("limits")
    if lim and lim.get("text"):  # what keeps domino from nocomm (analysis.limits)
        print(f"what limits {lim['mode']}{' (' + label + ')' if label else ''}: {lim['text']}")
    if label:
        print(f"{label}: one GPU ran rank 0's shard; losses meaningless", file=sys.stderr)
    if "nocomm" in run["modes"]:
        Console(stderr=True).print(f"[dim]{NOCOMM_NOTE}[/dim]")


def register(app: typer.Typer) -> None:
    @app.command()
    @user_errors
    def run(
        tp: int = typer.Option(2, help="Tensor-parallel ranks (processes)."),
        seq: int = typer.Option(0, help="Sequence length (0: 128 for tiny, else 4096)."),
        model: str = typer.Option(
            "auto",
            help="tiny, llama3-1b, llama3-3b, llama3-8b, llama3-70b (auto: tiny on CPU, "
            "llama3-3b on CUDA).",
        ),
        mode: Mode = typer.Option(
            Mode.all,
            help=f"{', '.join(_modes.names())}, or all of them back to back in one "
            "process group.",
        ),
        splits: int = typer.Option(2, help="Domino micro-batches per batch."),
        mbs: int = typer.Option(2, help="Sequences per batch (split into --splits)."),
        layers: int = typer.Option(0, help="Override the preset's layer count (0: keep)."),
        steps: int = typer.Option(
            DEFAULT_TIMED_STEPS,
            help="Timed steps per mode (after warm-up), in blocks of --block-steps.",
        ),
        block_steps: int = typer.Option(
            DEFAULT_BLOCK_STEPS,
            help="Timed steps per block: each block's median is one sample of the 95% "
            "intervals; on CPU the modes take turns block by block.",
        ),
        warmup: int = typer.Option(2, help="Warm-up steps per mode."),
        profile_steps: int = typer.Option(2, help="Profiled steps per mode."),
        device: str = typer.Option("auto", help="cuda, cpu, or auto."),
        dtype: str = typer.Option("auto", help="float32 or bfloat16 (auto: bf16 on CUDA)."),
        data: Path = typer.Option(
            None,
            help="Token file (.npy ints or .bin uint16); default: synthetic deterministic tokens.",
        ),
        out: Path = typer.Option(
            None,
            "-o",
            "--output",
            "--out",
            metavar="DIR",
            help="Run directory to write [default: runs/<time>-<model>-tp<N>].",
        ),
        timeout: float = typer.Option(
            900.0, callback=_positive, help="Seconds before hung ranks are killed (> 0)."
        ),
        seed: int = typer.Option(1234),
        cuda_graphs: bool = typer.Option(
            False,
            help="Replay every schedule segment as a CUDA graph (one shared memory pool; "
            "CUDA only).",
        ),
        compile: bool = typer.Option(False, help="torch.compile every schedule segment."),
        high_priority_comm: bool = typer.Option(
            False, help="Run NCCL collectives on a high-priority CUDA stream."
        ),
        attention: str = typer.Option(
            "auto",
            help="Fused attention kernel on CUDA (bf16): flash, cudnn, or auto (cuDNN on "
            "Hopper, else flash).",
        ),
        comm: str = typer.Option(
            "auto",
            help="Collectives: nccl (one process per GPU), gloo (CPU), or emulate (ONE "
            "process on one GPU runs rank 0's shard of --tp R; every collective is an "
            "emulated kernel timed by --comm-profile; docs/EMULATION.md). auto: nccl on "
            "CUDA, gloo on CPU.",
        ),
        comm_profile: str = typer.Option(
            None,
            metavar="NAME|FILE",
            help="--comm emulate's comm profile: a shipped one (h200-nvlink-tp2, -tp4, "
            "-tp8) or a JSON file from `domino-prof calibrate` [default: h200-nvlink-tp<R>].",
        ),
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
            return
        from domino_prof.reference_model.config import RunConfig, preset

        torch = _import_torch()
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda":
            n_gpu = _visible_gpus(torch)
            if n_gpu == 0:
                raise ConfigError("--device cuda but no CUDA GPU is visible; use --device cpu")
            if not _under_torchrun() and comm != "emulate" and tp > n_gpu:
                raise ConfigError(
                    f"--tp {tp} needs {tp} GPUs but {n_gpu} are visible; run rank 0's "
                    f"shard on one GPU with emulated collectives (--comm emulate), lower "
                    f"--tp, or use --device cpu"
                )
        name = model if model != "auto" else ("llama3-3b" if device == "cuda" else "tiny")
        mcfg = preset(name, layers=layers or None)
        modes = _modes.names() if mode is Mode.all else (mode.value,)
        cfg = RunConfig(
            model=mcfg,
            tp=tp,
            seq=seq or (128 if name == "tiny" else 4096),
            mbs=mbs,
            splits=splits,
            modes=modes,
            device=device,
            dtype=dtype if dtype != "auto" else ("bfloat16" if device == "cuda" else "float32"),
            warmup_steps=warmup,
            timed_steps=steps,
            block_steps=block_steps,
            profile_steps=profile_steps,
            seed=seed,
            data=str(data) if data else None,
            timeout_s=timeout,
            cuda_graphs=cuda_graphs,
            compile=compile,
            high_priority_comm=high_priority_comm,
            attention=attention,
            comm=comm,
            comm_profile=comm_profile or "",
        ).validate()
        if cfg.emulated:  # the emulated collectives are Triton kernels (reference_model.emulate)
            import importlib.util

            if importlib.util.find_spec("triton") is None:
                raise ConfigError(
                    "--comm emulate needs Triton (its collectives are Triton kernels); it ships "
                    "with torch's CUDA wheels: pip install triton"
                )
        if data is not None:  # before any rank starts: what train.TokenSource can read
            from domino_prof.reference_model.launcher import check_data

            check_data(data, mbs=cfg.mbs, seq=cfg.seq)
        if out is None:
            out = Path("runs") / (
                f"{time.strftime('%Y%m%d-%H%M%S')}-{name}-tp{tp}"
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
        torchrun = _under_torchrun()
        rank0 = not torchrun or int(os.environ.get("RANK", "0")) == 0
        held = runs.claim(out, run_json=runs.incomplete_run(cfg)) if rank0 else nullcontext()
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
                    from domino_prof.reference_model import launcher

                    launcher.spawn_ranks(cfg, out)
                result = runs.assemble(cfg, out, analyze=analyze)
            except KeyboardInterrupt:
                raise runs.Interrupted(out) from None
        print_comparison(result)
        for note in result["notes"]:
            print(f"note: {note}", file=sys.stderr)
        print(f"run directory: {out}", file=sys.stderr)


if __name__ == "__main__":  # `python -m domino_prof.commands.run ...`: run alone, no other command
    _app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    register(_app)
    _app()
