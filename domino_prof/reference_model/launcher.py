"""Start the TP ranks and watch them; nothing else.

Without torchrun, ``domino-prof run`` starts ``tp`` processes itself (each in its
own session, so Ctrl-C reaches only the launcher, which then ends every rank).
A rank that exits non-zero ends the run at once (the others are terminated,
the rank is named with the last line it printed); ranks still running after
the timeout are killed and named. Under torchrun every process runs the worker
in place. Assembling the run directory from what the ranks wrote (run.json, the
analyses, the report) is ``domino_prof.runs``' job: this module never imports the
trace engine, the analysis or the report.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from domino_prof.errors import ConfigError, RunError
from domino_prof.io import atomic_write_json
from domino_prof.reference_model.config import RunConfig

EXIT_PEER = 5  # train.EXIT_PEER: a peer went away mid-collective (not this rank's fault)
EXIT_MESSAGES = {3: "ran out of memory", 4: "rejected the configuration",
                 EXIT_PEER: "lost a peer rank"}  # fmt: skip
HEARTBEAT_S = 15.0  # a "still running" line after this long without a line from rank 0


def under_torchrun() -> bool:
    """Whether torchrun started this process (it then runs the worker in place)."""
    return "TORCHELASTIC_RUN_ID" in os.environ or (
        "RANK" in os.environ
        and "WORLD_SIZE" in os.environ
        and "MASTER_ADDR" in os.environ
        and "DOMINO_PROF_LAUNCHER" not in os.environ
    )


def import_torch():
    """torch, or a ConfigError line with the install hint (only `run` needs torch)."""
    try:
        import torch
    except ImportError:
        raise ConfigError(
            "`domino-prof run` needs PyTorch: pip install 'torch==2.13.0' "
            "--index-url https://download.pytorch.org/whl/cpu (CPU) or a CUDA "
            "build; analysing traces does not need it"
        ) from None
    return torch


def _visible_gpus(torch) -> int:
    """CUDA GPUs this process sees (a function of its own so tests can stand in one)."""
    return torch.cuda.device_count()


def resolve_device(device: str, *, tp: int, emulated: bool) -> str:
    """``run --device`` on this machine, the one place torch is first imported for a run:
    "auto" is cuda when torch sees a GPU, else cpu; cuda needs a visible GPU, and, unless
    the collectives are emulated (one process) or torchrun placed the ranks, one GPU per
    tp rank. A ConfigError line otherwise; other values pass through (RunConfig names
    them)."""
    torch = import_torch()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        n_gpu = _visible_gpus(torch)
        if n_gpu == 0:
            raise ConfigError("--device cuda but no CUDA GPU is visible; use --device cpu")
        if not under_torchrun() and not emulated and tp > n_gpu:
            raise ConfigError(
                f"--tp {tp} needs {tp} GPUs but {n_gpu} are visible; run rank 0's "
                f"shard on one GPU with emulated collectives (--comm emulate), lower "
                f"--tp, or use --device cpu"
            )
    return device


def check_torch_knobs(cfg: RunConfig) -> None:
    """The knobs this torch must offer, checked before any rank starts (one ConfigError
    line each): ``--comm-ctas`` needs NCCL's process-group config with ``min_ctas`` /
    ``max_ctas`` (real NCCL) or an ``EmulatedComm`` that takes ``ctas`` (emulated);
    ``--sm-carveout`` needs ``torch._C._set_sm_carveout_experimental``; ``--overlap-gemm
    triton`` needs Triton."""
    import inspect

    torch = import_torch()
    if cfg.comm_ctas is not None and cfg.emulated:
        from domino_prof.reference_model.emulate import EmulatedComm

        if "ctas" not in inspect.signature(EmulatedComm.__init__).parameters:
            raise ConfigError(
                "--comm-ctas with --comm emulate: this build's emulated collectives take no "
                "CTA count (EmulatedComm has no ctas); drop --comm-ctas"
            )
    elif cfg.comm_ctas is not None:
        import torch.distributed as dist

        nccl = getattr(dist, "ProcessGroupNCCL", None)
        config = getattr(nccl.Options(), "config", None) if nccl is not None else None
        if config is None or not all(hasattr(config, k) for k in ("min_ctas", "max_ctas")):
            raise ConfigError(
                f"--comm-ctas: torch {torch.__version__} offers no NCCL process-group "
                "config with min_ctas / max_ctas; drop --comm-ctas or use a CUDA build "
                "of torch >= 2.2"
            )
    if getattr(cfg, "overlap_gemm", "cublas") != "cublas":
        import importlib.util

        if importlib.util.find_spec("triton") is None:
            raise ConfigError(
                f"--overlap-gemm {cfg.overlap_gemm}: no Triton next to torch {torch.__version__} (torch's "
                "CUDA wheels bring it; else pip install triton); or drop --overlap-gemm"
            )
    if cfg.sm_carveout is not None and not hasattr(torch._C, "_set_sm_carveout_experimental"):
        raise ConfigError(
            f"--sm-carveout: torch {torch.__version__} has no "
            "torch._C._set_sm_carveout_experimental; drop --sm-carveout"
        )


def check_data(path: Path, *, mbs: int, seq: int) -> None:
    """``run --data FILE`` before any rank starts: a file ``train.TokenSource`` can
    batch from, a ``.npy`` 1-D integer array or ``.bin`` raw uint16 tokens, holding at
    least one batch (``mbs × (seq + 1)`` tokens). ConfigError naming the file and what
    it must be (a JSON file read as uint16 crashed a rank with a reshape error)."""
    import numpy as np

    must = "a .npy 1-D integer array (numpy.save) or .bin raw uint16 tokens"
    if not path.is_file():
        raise ConfigError(f"--data {path}: no such file; give {must}")
    need = mbs * (seq + 1)
    if path.suffix == ".npy":
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ConfigError(f"--data {path}: not a .npy array ({e}); give {must}") from None
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise ConfigError(
                f"--data {path}: holds a {arr.dtype} array of shape {arr.shape}; a .npy "
                "token file must be a 1-D integer array"
            )
        n = int(arr.shape[0])
    elif path.suffix == ".bin":
        size = path.stat().st_size
        if size % 2:
            raise ConfigError(
                f"--data {path}: {size} bytes is not a whole number of uint16 tokens; a .bin "
                "token file is raw uint16 (2 bytes a token)"
            )
        n = size // 2
    else:
        raise ConfigError(
            f"--data {path}: a token file must be {must}; {path.suffix or 'no suffix'!r} is "
            "neither"
        )
    if n < need:
        raise ConfigError(
            f"--data {path}: {n} tokens, fewer than one batch needs ({need} = --mbs {mbs} "
            f"x (--seq {seq} + 1)); give a longer file or lower --mbs / --seq"
        )


def cores() -> int:
    """The CPU cores this process may run on (its affinity, else the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def oversubscribed_note(cfg: RunConfig) -> str | None:
    """On CPU, more ranks than cores: said before the run starts (the ranks take turns
    on the cores, so the run is slow and its timings show the machine, not overlap)."""
    n = cores()
    if cfg.device != "cpu" or cfg.world_size <= n:
        return None
    return (
        f"{cfg.world_size} gloo ranks on {n} CPU cores: the ranks take turns on the cores, "
        f"so this run is slow (progress lines follow), its step times measure the sharing, "
        f"not overlap, and it is stopped after --timeout {cfg.timeout_s:.0f} s; --tp {n} or "
        "fewer fits this machine"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    # prefer our own one-line messages over traceback noise
    for ln in reversed(lines):
        if ln.startswith(("out of memory", "world size")):
            return ln
    return lines[-1] if lines else ""


def _kill(procs: list[subprocess.Popen], grace_s: float = 5.0) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    for p in procs:
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def spawn_ranks(cfg: RunConfig, out: Path) -> None:
    """Run ``cfg.world_size`` worker processes (``cfg.tp``; one under ``--comm emulate``,
    which runs rank 0's shard alone) to completion or raise RunError."""
    out.mkdir(parents=True, exist_ok=True)
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    cfg_path = out / "config.json"
    atomic_write_json(cfg_path, cfg.to_dict())
    port = _free_port()
    procs: list[subprocess.Popen] = []
    log_paths: list[Path] = []
    world = cfg.world_size
    how = "one process, emulated comm" if cfg.emulated else f"{cfg.backend}, {cfg.device}"
    print(f"[domino-prof] starting {world} rank{'s' if world > 1 else ''} ({how}); "
          f"rank logs in {logs}", file=sys.stderr, flush=True)  # fmt: skip
    note = oversubscribed_note(cfg)
    if note:
        print(f"note: {note}", file=sys.stderr, flush=True)
    try:
        for r in range(world):
            env = dict(
                os.environ,
                RANK=str(r),
                LOCAL_RANK=str(r),
                WORLD_SIZE=str(world),
                LOCAL_WORLD_SIZE=str(world),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                DOMINO_PROF_LAUNCHER="1",
                PYTHONUNBUFFERED="1",
            )
            env.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast on shared hosts
            env.setdefault("OMP_NUM_THREADS", "1" if cfg.device == "cpu" else "4")
            log_path = logs / f"rank{r}.log"
            log_paths.append(log_path)
            log = open(log_path, "wb")  # noqa: SIM115 - lives as long as the process
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "domino_prof.reference_model.train",
                        "--config",
                        str(cfg_path),
                        "--out",
                        str(out),
                    ],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            log.close()
        t0 = time.monotonic()
        shown = 0
        heard = t0  # when rank 0 last printed a progress line (or the last heartbeat)
        while True:
            was = shown
            shown = _echo_rank0(log_paths[0], shown)
            now = time.monotonic()
            if shown != was:
                heard = now
            elif now - heard >= HEARTBEAT_S:  # a long silent stretch: say it still runs
                heard = now
                print(f"[domino-prof] still running, {now - t0:.0f} s in"
                      f"{' (the ranks are starting)' if shown == 0 else ''}",
                      file=sys.stderr, flush=True)  # fmt: skip
            codes = [p.poll() for p in procs]
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                time.sleep(0.5)  # let a crashing rank finish writing its log
                codes = [p.poll() for p in procs]
                bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
                # name the rank that failed, not one that only lost it as a peer
                r, c = min(bad, key=lambda rc: (rc[1] == EXIT_PEER, rc[0]))
                _kill(procs)
                what = EXIT_MESSAGES.get(c, f"exited with code {c}")
                raise RunError(
                    f"rank {r} {what}: {_last_line(log_paths[r])} (full log: {log_paths[r]})"
                )
            if all(c == 0 for c in codes):
                _echo_rank0(log_paths[0], shown)
                return
            if time.monotonic() - t0 > cfg.timeout_s:
                hung = [r for r, c in enumerate(codes) if c is None]
                _kill(procs)
                raise RunError(
                    f"ranks {hung} did not finish within {cfg.timeout_s:.0f} s "
                    f"(hung?); logs in {logs}; raise --timeout if the run is "
                    f"just slow"
                )
            time.sleep(0.2)
    except BaseException:
        _kill(procs)
        raise


def _echo_rank0(path: Path, shown: int) -> int:
    """Print rank 0's new progress lines (ours only) as they appear."""
    try:
        data = path.read_bytes()
    except OSError:
        return shown
    new = data[shown:]
    cut = new.rfind(b"\n")
    if cut < 0:
        return shown
    for ln in new[:cut].decode(errors="replace").splitlines():
        if ln.startswith("[domino-prof]"):
            print(ln, file=sys.stderr, flush=True)
    return shown + cut + 1
