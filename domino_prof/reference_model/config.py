"""Typed configuration: model presets and the run configuration.

No torch import here, so the CLI can validate flags before spawning anything.
"""

from __future__ import annotations

import os

import functools
from dataclasses import MISSING, asdict, dataclass, field, replace

from domino_prof.errors import ConfigError
from domino_prof.reference_model import modes
from domino_prof.reference_model.carveout import SCOPES as CARVEOUT_SCOPES

# --overlap-gemm's kinds (overlap_gemm.py; kept here: that module imports units, which
# imports this one)
OVERLAP_GEMMS = ("cublas", "triton", "triton-covered")
# --comm-engine's kinds (emulate.py plays "ce"; emulation/ce.py models it)
COMM_ENGINES = ("sm", "ce")
# --wgrad-in's kinds (units._acc_mm_in): how the column-parallel weights' gradients read
# the micro-batches' norm outputs
WGRAD_INS = ("joint", "accumulate")
# --comm-ctas-scope's kinds: which collectives take --comm-ctas (all of a step's, or the
# backward's only: the forward keeps the library's CTAs)
COMM_CTAS_SCOPES = ("all", "bwd")
# --sp-wgrad-input's kinds (sp_step.py): where the sequence-parallel weight gradients read
# their gathered input (each norm's output): all-gathered again in the backward, or kept
# from the forward's all-gather
SP_WGRAD_INPUTS = ("regather", "keep")
# --sp-residual's kinds (sp_step.py): where the sequence-parallel forward adds the residual:
# in the chain after the reduce-scatter (chain, Megatron's), or folded into the core's
# partial sums before it (fold: the reduce-scatter returns the next residual)
SP_RESIDUALS = ("fold", "chain")


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """A Llama-3-style decoder. ``ffn_dim`` is the SwiGLU hidden size."""

    name: str
    dim: int
    ffn_dim: int
    n_heads: int
    n_kv_heads: int
    n_layers: int
    vocab_size: int
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def n_params(self, *, embedding: bool = True) -> int:
        """Parameter count (untied embedding and LM head)."""
        d, f, h = self.dim, self.ffn_dim, self.head_dim
        attn = d * (self.n_heads + 2 * self.n_kv_heads) * h + self.n_heads * h * d
        mlp = 3 * d * f
        per_layer = attn + mlp + 2 * d
        n = self.n_layers * per_layer + d + self.vocab_size * d  # + final norm + lm head
        if embedding:
            n += self.vocab_size * d
        return n

    def flops_per_token(self, seq: int) -> float:
        """Training FLOPs per token (fwd+bwd): 6·N (non-embedding incl. LM head) + attention
        12·L·d·S (PaLM appendix B; causal masking not discounted)."""
        return 6.0 * self.n_params(embedding=False) + 12.0 * self.n_layers * self.dim * seq


def tiny() -> ModelConfig:  # divisible by tp 1, 2, 4, 8 (heads 16, kv heads 8)
    return ModelConfig(
        name="tiny", dim=256, ffn_dim=512, n_heads=16, n_kv_heads=8, n_layers=2, vocab_size=512
    )


def llama3_1b() -> ModelConfig:
    return ModelConfig(
        name="llama3-1b",
        dim=2048,
        ffn_dim=8192,
        n_heads=32,
        n_kv_heads=8,
        n_layers=16,
        vocab_size=128256,
    )


def llama3_3b() -> ModelConfig:
    return ModelConfig(
        name="llama3-3b",
        dim=3072,
        ffn_dim=8192,
        n_heads=24,
        n_kv_heads=8,
        n_layers=28,
        vocab_size=128256,
    )


def llama3_8b() -> ModelConfig:
    return ModelConfig(
        name="llama3-8b",
        dim=4096,
        ffn_dim=14336,
        n_heads=32,
        n_kv_heads=8,
        n_layers=32,
        vocab_size=128256,
    )


def llama3_70b() -> ModelConfig:
    """Llama 3 70B (80 layers). On one GPU only as one rank's TP shard, with few
    ``--layers`` (e.g. ``--tp 8 --layers 8 --comm emulate``)."""
    return ModelConfig(
        name="llama3-70b",
        dim=8192,
        ffn_dim=28672,
        n_heads=64,
        n_kv_heads=8,
        n_layers=80,
        vocab_size=128256,
    )


PRESETS = {
    "tiny": tiny,
    "llama3-1b": llama3_1b,
    "llama3-3b": llama3_3b,
    "llama3-8b": llama3_8b,
    "llama3-70b": llama3_70b,
}
# The modes live in ``modes.py`` (the registry: schedule + comm + description). These
# tuples are snapshots of it at import, kept for older importers (runs.py reads
# OVERLAP_MODES); new code asks ``modes.get(name)``.
MODES = modes.names()  # `--mode all` runs them in this order
SP_MODES = tuple(n for n, m in modes.MODES.items() if m.sequence_parallel)
OVERLAP_MODES = tuple(n for n, m in modes.MODES.items() if m.micro_batched)


def preset(name: str, *, layers: int | None = None) -> ModelConfig:
    if name not in PRESETS:
        raise ConfigError(f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)}")
    cfg = PRESETS[name]()
    if layers is not None:
        if layers < 1:
            raise ConfigError(f"--layers must be >= 1, got {layers}")
        cfg = replace(cfg, n_layers=layers)
    return cfg


# fused attention kernels on CUDA (run --attention; units.set_attention)
ATTENTION_KERNELS = ("auto", "flash", "cudnn")
# what one CUDA graph holds (--graph-scope; reference_model/executor.py)
GRAPH_SCOPES = ("segment", "step")
# run --comm (RunConfig.comm); "auto" = nccl on CUDA, gloo on CPU
COMM_CHOICES = ("auto", "nccl", "gloo", "emulate")


def default_profile(tp: int) -> str:
    """The shipped comm profile for ``--tp`` (``h200-nvlink-tp{R}``), or a ConfigError
    line asking for ``--comm-profile``."""
    from domino_prof.emulation.profile import SHIPPED

    name = f"h200-nvlink-tp{tp}"
    if name not in SHIPPED:
        raise ConfigError(
            f"--comm emulate --tp {tp}: no shipped comm profile for {tp} ranks (shipped: "
            f"{', '.join(SHIPPED)}); pass --comm-profile FILE (`domino-prof calibrate` "
            "writes one from real traces)"
        )
    return name


def needed_collectives(cfg: RunConfig) -> list[tuple[str, str]]:
    """(collective, dtype) pairs the modes of ``cfg`` issue through a real or emulated
    Comm: the TP all-reduces in the run's dtype (the SP modes: reduce-scatter and
    all-gather, and the all-reduce of the norm weights' gradients), and the head's two
    small fp32 all-reduces of the cross-entropy (step_base._head_forward)."""
    need: list[tuple[str, str]] = []
    for name in cfg.modes:
        m = modes.get(name)
        if m.comm != "process-group":
            continue
        colls = ["all_reduce"] + (["reduce_scatter", "all_gather"] if m.sequence_parallel
                                  else [])  # fmt: skip
        for c in colls:
            if (c, cfg.dtype) not in need:
                need.append((c, cfg.dtype))
        if ("all_reduce", "float32") not in need:
            need.append(("all_reduce", "float32"))
    return need


def check_profile(cfg: RunConfig) -> str:
    """``--comm emulate``'s profile, checked before any process starts: loaded and
    validated (``emulation.profile``: missing file, invalid JSON, unknown collective,
    bandwidth <= 0, ... one ConfigError line each) and holding an entry for every
    (collective, R, dtype) the modes issue ("has no entries for R=8"), each with the
    per-CTA bandwidth ``--comm-ctas`` asks of it (a mode that would fail on it once the
    modes before it had run, e.g. sp's all-gathers under ``--mode all``, fails here
    instead). Returns the shipped name, or the file's absolute path (the ranks' working
    directory may differ)."""
    from pathlib import Path

    from domino_prof.emulation.profile import SHIPPED, load_profile

    name = cfg.comm_profile or default_profile(cfg.tp)
    prof = load_profile(name)
    for coll, dtype in needed_collectives(cfg):
        e = prof.entry(coll, cfg.tp, dtype)
        if cfg.comm_ctas is not None and cfg.comm_engine == "sm":
            e.with_ctas(cfg.comm_ctas)
    return name if name in SHIPPED else str(Path(name).resolve())


def _loaded_profile(name: str):
    """``load_profile(name)``, loaded once per shipped name or per file (its absolute path
    and modification time: a file rewritten in place is read again); comm_info is asked
    for every mode and step header of a run."""
    from pathlib import Path

    from domino_prof.emulation.profile import SHIPPED, load_profile

    if name in SHIPPED:
        return _profile_cached(name, 0)
    p = Path(name).resolve()
    try:
        stamp = p.stat().st_mtime_ns
    except OSError:
        return load_profile(name)  # missing: its ConfigError line, naming the path given
    return _profile_cached(str(p), stamp)


@functools.lru_cache(maxsize=32)
def _profile_cached(name: str, stamp: int):  # stamp: only part of the cache key
    from domino_prof.emulation.profile import load_profile

    return load_profile(name)


def comm_info(cfg: RunConfig) -> dict:
    """run.json's top-level ``comm`` block: ``kind`` (nccl | gloo | emulated), the
    profile's ``name`` and ``file`` (emulated; else None) and the ``label`` every number
    of the run carries (``emulated comm (profile NAME)``, else the backend's name)."""
    kind = cfg.backend
    if kind != "emulate":
        return {"kind": kind, "profile": None, "profile_file": None, "label": kind}
    from domino_prof.emulation.profile import SHIPPED

    prof = _loaded_profile(cfg.comm_profile or default_profile(cfg.tp))
    engine = getattr(cfg, "comm_engine", "sm")
    extra = {}
    if engine == "ce":  # the copy-engine model's parameters, env overrides included
        import dataclasses

        from domino_prof.emulation.ce import CeParams

        extra["ce"] = dataclasses.asdict(CeParams.from_env())
    return {
        "kind": "emulated",
        "profile": prof.name,
        "profile_file": (cfg.comm_profile if cfg.comm_profile and cfg.comm_profile not in SHIPPED
                         else None),  # fmt: skip
        "label": prof.label,
        "ranks": cfg.tp,
        "rank": 0,
        # the stand-in kernel (docs/EMULATION.md §3b; DOMINO_PROF_EMULATE_KERNEL=burst for
        # the first one) and --comm-ctas (None: each entry's own CTA count)
        "kernel": os.environ.get("DOMINO_PROF_EMULATE_KERNEL", "paced"),
        "ctas": getattr(cfg, "comm_ctas", None),
        "ctas_scope": getattr(cfg, "comm_ctas_scope", "all"),  # --comm-ctas-scope
        # --comm-engine: how the collectives move data (emulation/ce.py for "ce")
        "engine": engine,
        # how a collective keeps its tensors until done (DOMINO_PROF_EMULATE_TENSORS)
        "tensors": comm_tensors(),
        **extra,
    }


def lane_priorities() -> tuple[int, int]:
    """(lead, follow) stream priorities of the micro-batch lanes, from
    ``DOMINO_PROF_LANE_PRIORITY`` ("lead,follow"; lower is higher, 0 the lowest)."""
    v = os.environ.get("DOMINO_PROF_LANE_PRIORITY", "-100,0")
    try:
        lead, follow = (int(x) for x in v.split(","))
    except ValueError:
        raise ValueError(f"DOMINO_PROF_LANE_PRIORITY={v!r}: give two integers, lead,follow "
                         "(e.g. -1,0; lower is higher priority)") from None  # fmt: skip
    return lead, follow


def lane_phases() -> tuple[str, ...]:
    """The phases whose micro-batches run on two lanes, from ``DOMINO_PROF_LANE_PHASES``
    ("fwd,bwd", the default, or "bwd": forward on the lead lane alone, in order)."""
    v = os.environ.get("DOMINO_PROF_LANE_PHASES", "fwd,bwd")
    phases = tuple(x for x in v.split(",") if x)
    if not phases or set(phases) - {"fwd", "bwd"}:
        raise ValueError(f"DOMINO_PROF_LANE_PHASES={v!r}: give fwd,bwd or bwd or fwd")
    return phases


def _lane_choice(name: str, choices: tuple[str, ...]) -> str:
    """Environment variable ``name``, one of ``choices`` (unset: the first), else a
    one-line ValueError ("give a or b")."""
    v = os.environ.get(name, choices[0])
    if v not in choices:
        raise ValueError(f"{name}={v!r}: give {' or '.join(choices)}")
    return v


def _env_choice(name: str, choices: tuple[str, ...]) -> str:
    """:func:`_lane_choice` for a knob read outside ``--mb-streams 2``'s checks: a bad
    value is a ConfigError (one line)."""
    try:
        return _lane_choice(name, choices)
    except ValueError as e:
        raise ConfigError(str(e)) from None


COMM_TENSORS = ("held", "record_stream")  # the first is the default


def comm_tensors() -> str:
    """How an emulated collective keeps its tensors from the caching allocator until it is
    done, from ``DOMINO_PROF_EMULATE_TENSORS``: ``held`` (the default: its Work holds them
    until ``wait()``, as c10d's NCCL backend has since PyTorch 2.7, pytorch/pytorch#148590)
    or ``record_stream`` (each tensor ``record_stream``-ed on the comm stream: the emulator
    before 2026-12-07, for an A/B of eager host cost; then every later allocation of the
    step polls the comm's events, host work real NCCL no longer does). A bad value is a
    ConfigError (one line)."""
    return _env_choice("DOMINO_PROF_EMULATE_TENSORS", COMM_TENSORS)


ROPE_KERNELS = ("auto", "aten", "triton")  # the first is the default


def rope_env() -> str:
    """The rotary embedding's kernel, from ``DOMINO_PROF_ROPE`` (units.set_rope says what
    each does): ``auto`` (the default: the Triton launch on CUDA), ``aten`` (the A/B
    reference) or ``triton``. A bad value is a ConfigError (one line)."""
    return _env_choice("DOMINO_PROF_ROPE", ROPE_KERNELS)


NORM_KERNELS = ("auto", "aten", "triton")  # the first is the default


def norm_env() -> str:
    """The residual add and norm's kernel, from ``DOMINO_PROF_NORM`` (units.set_norm says
    what each does): ``auto`` (the default: norm_kernel.py's one Triton launch on CUDA),
    ``aten`` (add, ``_fused_rms_norm`` and, where the output is kept in a joint buffer, a
    copy: the A/B reference) or ``triton``. Measured on one H100, emulated headline with
    ``--cuda-graphs``, aten -> auto: tp 99.11 -> 97.92 ms, nocomm 62.85 -> 61.70, domino
    85.05 -> 82.39, domino-sp 73.11 -> 72.87; the add and norm alone 1.7-2.7x faster
    (reports/emulated-h100-2026-12-08, call 2). A bad value is a ConfigError (one line)."""
    return _env_choice("DOMINO_PROF_NORM", NORM_KERNELS)


SIDE_PRIORITIES = ("normal", "high")  # the first is the default


def side_priority() -> str:
    """The priority of domino-sp's side stream (its chains: the norm between a
    micro-batch's reduce-scatter and its all-gather, forward and backward), from
    ``DOMINO_PROF_SIDE_PRIORITY``: ``normal`` (the default: 0, the compute stream's) or
    ``high`` (the device's highest, so a chain's small kernels take SMs ahead of the other
    micro-batch's queued GEMM blocks; an A/B knob of issue 34, recorded in run.json's
    ``side_stream``). Measured on one H100, emulated headline with ``--cuda-graphs``:
    domino-sp 80.46 and 79.84 ms high against 79.69 normal, no gain
    (reports/emulated-h100-2026-12-07, call 2). A bad value is a ConfigError (one line)."""
    return _env_choice("DOMINO_PROF_SIDE_PRIORITY", SIDE_PRIORITIES)


LANE_COMMS = ("shared", "own")  # the first is the default


def lane_comm() -> str:
    """Where the micro-batch lanes' collectives run, from ``DOMINO_PROF_LANE_COMM``:
    ``shared`` (the default: one comm stream, the group's, in issue order) or ``own`` (each
    lane's on a comm stream of its own: real NCCL, a second communicator of the same ranks;
    emulated, ``EmulatedComm.lane_sibling``: the two streams share one link)."""
    return _lane_choice("DOMINO_PROF_LANE_COMM", LANE_COMMS)


LANE_LOCKS = ("dgrad", "off")  # the first is the default


def lane_lock() -> str:
    """How far apart the backward lanes are held, from ``DOMINO_PROF_LANE_LOCK``: ``dgrad``
    (the default: the leader's input-gradient segment also waits for the end of the
    follower's previous one, and each unit's weight gradients run as a segment of their own
    on the follower's lane right after its all-reduce is launched: the input gradients
    alternate as on one stream, with each lane's all-reduce behind the other's segment, and
    the weight gradients fill the SMs beside the leader's; tp_step.py) or ``off`` (the
    leader's segment waits for its own all-reduce only: the two lanes run in phase,
    benchmarks/lane_phase.py). Measured on one H100, emulated TP 8, the headline with
    ``--cuda-graphs`` (reports/emulated-h100-2026-12-06b): SM stand-in 0.736 and 0.736 of
    nocomm with ``off``, 0.763 and 0.768 with ``dgrad`` (one stream: 0.744, 0.743); eager
    0.617 and 0.670; copy engines 0.785 and 0.787."""
    return _lane_choice("DOMINO_PROF_LANE_LOCK", LANE_LOCKS)


def lanes_info(cfg) -> dict | None:
    """run.json's ``lanes``: the micro-batch lanes' phases and stream priorities of a run
    with ``--mb-streams 2`` (their knobs are environment variables: recorded here so the
    run can be repeated), else None."""
    if getattr(cfg, "mb_streams", 1) != 2:
        return None
    return {"phases": list(lane_phases()), "priority": list(lane_priorities()),
            "comm": lane_comm(), "lock": lane_lock()}


def side_stream_info(cfg) -> dict | None:
    """run.json's ``side_stream``: the side stream's priority where it is not the default
    (``DOMINO_PROF_SIDE_PRIORITY``, an environment knob: recorded so the run can be
    repeated), on CUDA; else None."""
    if getattr(cfg, "device", "cpu") != "cuda":
        return None
    prio = side_priority()
    return None if prio == SIDE_PRIORITIES[0] else {"priority": prio}


def config_notes(cfg: RunConfig) -> list[str]:
    """run.json's notes that the config alone warrants (printed by `run` too): a choice
    that runs, but not as its user likely meant."""
    notes = []
    if getattr(cfg, "comm_engine", "sm") == "ce" and not (
            cfg.cuda_graphs and cfg.graph_scope == "step"):
        notes.append("--comm-engine ce outside a whole-step CUDA graph: each collective is "
                     "21 or more launches, so the host bounds the step (measured on one H200: "
                     "domino 267 ms a headline step with --graph-scope segment, 77 ms with "
                     "--cuda-graphs); add --cuda-graphs (graph scope step)")  # fmt: skip
    return notes


AUTO = "auto"  # an option chosen by the machine or by other options (RunConfig.from_options)


def _option(flag: str, help: str, *, cli_default: object = MISSING,
            switch: bool = False) -> dict:  # fmt: skip
    """A RunConfig field's `run` option: its flag and help text, and, where the option's
    default is a symbolic one resolved when the config is built ("auto", "all"), that
    default (else the field's own default is the option's). ``switch``: an on/off flag
    with a --no- form whose default (None) the config resolves (a bool default has the
    --no- form anyway)."""
    meta: dict = {"flag": flag, "help": help}
    if cli_default is not MISSING:
        meta["cli_default"] = cli_default
    if switch:
        meta["switch"] = True
    return meta


def _field(default: object, flag: str, help: str, **kw) -> object:
    return field(default=default, metadata=_option(flag, help, **kw))


# Timed steps by default: 50 blocks of 4 per mode (stats.py: the interval is ranks 18
# and 33 of 50 paired block ratios). On the tiny preset at tp 2 on the shared 2-core
# machine (load 0.5-5.7) that was 86-90 s of timed steps for the five modes and
# intervals of ±5.8-9.0% (reports/cpu-default-2026-12-03/README.md): short of ±5% under that load.
DEFAULT_TIMED_STEPS = 200
DEFAULT_BLOCK_STEPS = 4
TIMINGS = ("stream", "step")  # RunConfig.timing
DEFAULT_SPLITS = 2


def parse_split_sizes(text: str | None) -> tuple[int, ...] | None:
    """``--split-sizes 3,1`` -> (3, 1); None or "" -> None (even). A ConfigError line
    for anything that is not a comma-separated list of whole numbers."""
    if text is None or not str(text).strip():
        return None
    try:
        return tuple(int(x) for x in str(text).split(","))
    except ValueError:
        raise ConfigError(
            f"--split-sizes {text}: not a comma-separated list of sequence counts; e.g. "
            "--split-sizes 3,1"
        ) from None


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything one `domino-prof run` needs; validated before any process starts.

    Each field is one `run` option: its flag, help text and default live here (the
    field's metadata, read by commands/run.py), so the command is a mapping from options
    to fields; ``from_options`` builds and validates a config from them. ``seq`` 0 and
    ``dtype`` "auto" resolve when the config is built (by the model and the device)."""

    model: ModelConfig = field(metadata=_option(
        "--model", f"{', '.join(PRESETS)} (auto: tiny on CPU, llama3-3b on CUDA).",
        cli_default=AUTO))  # fmt: skip
    tp: int = _field(2, "--tp", "Tensor-parallel ranks (processes).")
    seq: int = _field(0, "--seq", "Sequence length (0: 128 for tiny, else 4096).")
    mbs: int = _field(2, "--mbs", "Sequences per batch (split into --splits).")
    splits: int = _field(DEFAULT_SPLITS, "--splits", "Domino micro-batches per batch.")
    # Domino's second split (arXiv 2409.15241): the row-parallel GEMM's output columns (and,
    # backward, the input-gradient GEMM's) in K chunks, each all-reduced on its own while
    # the next chunk computes; 1 = none (schedules.py, tp_step.py)
    col_splits: int = _field(1, "--col-splits", "Domino's second split: the row-parallel "
                             "GEMM's output (backward: the input-gradient GEMM's) in K column "
                             "chunks, each all-reduced while the next one computes; 1: none. "
                             "Works with --splits 1 too (domino only).")  # fmt: skip
    # sequences per micro-batch (TokenWeave-style uneven split); None = --mbs / --splits each
    split_sizes: tuple[int, ...] | None = _field(None, "--split-sizes", "Sequences per "
                                                 "micro-batch, e.g. 3,1 (they sum to --mbs and "
                                                 "set --splits); default: --mbs split evenly "
                                                 "(domino, domino-sp).")  # fmt: skip
    # CTAs (thread blocks) a collective runs on: NCCL's min_ctas = max_ctas (process-group
    # options), or the emulated kernel's; None = the library's own choice
    comm_ctas: int | None = _field(None, "--comm-ctas", "CTAs per collective: NCCL's min and "
                                   "max CTAs (process-group options) or the emulated "
                                   "kernel's (--comm emulate); default: the library's.",
                                   )  # fmt: skip
    # which collectives take --comm-ctas (schedule.build_runner: emulated comm only)
    comm_ctas_scope: str = _field("all", "--comm-ctas-scope", "Collectives that take "
                                  "--comm-ctas: all, or bwd (the backward's only; the "
                                  "forward's keep the library's CTAs; --comm emulate only).",
                                  )  # fmt: skip
    # how a collective moves its data: "sm", NCCL's kernels (emulated: the stand-in on the
    # profile's CTAs); "ce", copy engines (emulated only: emulation/ce.py's model of torch's
    # symmetric-memory low-contention collectives; no CTA held while data moves)
    comm_engine: str = _field("sm", "--comm-engine", "How collectives move data: sm "
                              "(NCCL's kernels on SMs) or ce (copy engines, as torch's "
                              "symmetric-memory low-contention ops; --comm emulate only, "
                              "meant for --cuda-graphs: eager pays 21-37 launches an "
                              "all-reduce).")  # fmt: skip
    sm_carveout: int | None = _field(None, "--sm-carveout", "SMs that GEMMs leave free for "
                                     "the collectives (torch's experimental SM carveout, on "
                                     "the cuBLASLt path it needs; CUDA only); default: none.",
                                     )  # fmt: skip
    # without --sm-carveout: domino-sp's backward GEMMs beside the emulated SM stand-in
    # leave its CTAs free (carveout.auto_carveout: measured there; every other mode, real
    # collectives and copy engines keep every SM)
    carveout_auto: bool = _field(True, "--carveout-auto", "Without --sm-carveout: domino-sp's "
                                 "backward GEMMs beside emulated SM collectives leave the "
                                 "stand-in's CTAs free, with --cuda-graphs (scope bwd; eager, "
                                 "other modes, real collectives and copy engines: "
                                 "none).")  # fmt: skip
    # the GEMM kernels of the segments issued beside a collective (overlap_gemm.py)
    overlap_gemm: str = _field("cublas", "--overlap-gemm", "GEMM kernels of the segments "
                               "issued while an async collective is in flight: cublas "
                               "(torch's), triton (non-persistent tiles where measured "
                               "faster beside it; CUDA, eager or --cuda-graphs) or "
                               "triton-covered (those tiles only while the collective's "
                               "expected time still covers the GEMM).")  # fmt: skip
    # the micro-batched all-reduce schedules' column-parallel weight gradients (wqkv, w13):
    # one GEMM over the [ΣT, d] buffer of norm outputs (each copied in: the fused norm
    # kernel takes no out=) or one GEMM per micro-batch accumulating, no copy (units.py).
    # joint stays the default: measured on one H200 (reports/emulated-h200-2026-12-06),
    # accumulate cuts the copies (split 7.47 -> 6.37 ms) but not domino's step (0.801 ->
    # 0.796 of nocomm; the copies sit in the forward, whose all-reduces set its time)
    # domino-sp: every weight gradient joint (sp_step.py) or one per micro-batch; joint is
    # the default by measurement (reports/emulated-h100-2026-12-06c: 75.70 against 75.90 ms
    # at the headline, copy engines; tp 1 domino-sp / tp graphs 1.037 against 1.078)
    wgrad_in: str = _field("joint", "--wgrad-in", "Micro-batched schedules: domino's "
                           "column-parallel weights' gradients (domino-sp's every weight "
                           "gradient) as one GEMM over every micro-batch (joint: domino copies "
                           "their norm outputs into one buffer) or one GEMM per micro-batch "
                           "(accumulate: no copy).")  # fmt: skip
    # sp / domino-sp: the weight gradient of a unit's w_in reads the unit's norm output on
    # the whole sequence. Megatron all-gathers it again in the backward (regather: the
    # gathered copy is freed after the forward's core); keep holds the forward's gathered
    # copy to the weight gradient instead: a third of the backward's collectives fewer (no
    # all-gather of the norm output), one [T, d] activation more per unit in memory (none
    # more where the executor holds the forward's buffers to the step's end anyway: a side
    # stream's or a CUDA graph's). Gradients are the same bits (tests/test_sp_wgrad_input).
    # keep is the default by measurement (one H100, emulated TP 8, headline shape,
    # --cuda-graphs, reports/emulated-h100-2026-12-07b/call1, two runs each): domino-sp
    # 79.43 / 79.35 -> 76.82 / 76.87 ms (0.828 -> 0.857 of nocomm), sp 98.96 / 98.84 ->
    # 90.08 / 90.00; peak memory domino-sp 24.0 -> 21.4 GB (graphs: the joint buffer
    # replaces the forward's), sp 11.1 -> 13.2 GB (the cost: regather where memory binds).
    sp_wgrad_input: str = _field("keep", "--sp-wgrad-input", "Sequence-parallel modes: "
                                 "the weight gradients' gathered input kept from the "
                                 "forward (keep: a third less backward comm, up to one "
                                 "gathered activation a layer more memory) or all-gathered "
                                 "again in the backward (regather, Megatron's).")  # fmt: skip
    # sp / domino-sp forward: the residual add h_s + y_s after each reduce-scatter sits in
    # the chain between it and the next all-gather, which in domino-sp is the forward's
    # longer stream (reports/emulated-h100-2026-12-07b). fold adds h_s into the core's
    # partial sums at this rank's rows instead (on the compute stream), so the
    # reduce-scatter returns the next residual and the chain is the norm alone. Gradients
    # are the unsharded model's within bf16 rounding (the sum's order moves). fold is the
    # default by measurement (one H100, emulated TP 8, headline shape, --cuda-graphs,
    # reports/emulated-h100-2026-12-07c/call1, two runs each): domino-sp 77.38 / 77.14 ->
    # 76.96 / 76.79 ms; the chain's gap between its two collectives 13.3 -> 8.8 us median.
    sp_residual: str = _field("fold", "--sp-residual", "Sequence-parallel modes: the "
                              "forward's residual folded into the partial sums before each "
                              "reduce-scatter (fold: the chain between the collectives is "
                              "the norm alone) or added after it (chain, Megatron's).")  # fmt: skip
    # each micro-batch of the all-reduce micro-batched modes (domino, domino-nocomm) on a
    # CUDA stream of its own (tp_step.py, "micro-batch lanes"): one micro-batch's kernels
    # fill the SMs the other's leave idle (issue 34: attention's sub-wave grid at 3 heads a
    # rank, kernel tails, the gaps between kernels). Measured on one H200, emulated TP 8
    # (reports/emulated-h200-2026-12-06): domino-nocomm 0.897 -> 0.977 of nocomm, but domino
    # 0.801 -> 0.781 (backward: the in-order comm stream queues the leader's all-reduce
    # behind the slowed follower's, benchmarks/exposed_by_part.py): 1 stays the default.
    # DOMINO_PROF_LANE_COMM=own (lane_comm) gives each lane a comm stream of its own for
    # that queueing; measured on one H100 (reports/emulated-h100-2026-12-06): no gain with
    # the copy engines (0.790 against one stream's 0.792), +0.013 with the SM stand-in, the
    # backward's exposed comm unmoved (11.7 ms): the queueing was not the cause, the lanes
    # run in phase (their calls 121 us apart, under a call: benchmarks/lane_phase.py); shared
    # stays the default. DOMINO_PROF_LANE_LOCK=dgrad (lane_lock, now the lanes' default)
    # holds the backward lanes apart. Measured with it on one H100, emulated TP 8
    # (reports/emulated-h100-2026-12-06b): SM stand-in, --cuda-graphs, 0.761-0.768 of
    # nocomm in 4 runs against one stream's 0.743-0.744 (3); mbs 4 --wgrad-in accumulate
    # 0.835 against 0.818; llama3-8b mbs 4 ce accumulate 0.907-0.908 against 0.898-0.900;
    # eager 0.670 and 0.684 against 0.664 and 0.645; copy engines at mbs 2 0.787 against
    # 0.791. But the peak memory grows 15.8 -> 24.9 GB at the headline and 38.8 -> 67.4
    # GB for llama3-8b at mbs 4 (each lane's blocks are held to the join, tp_step.py), so
    # 1 stays the default and `domino-prof tune --grid mb_streams=1,2` weighs it.
    mb_streams: int = _field(1, "--mb-streams", "Micro-batched all-reduce modes with 2 "
                             "micro-batches: 2 runs each micro-batch on a CUDA stream of its "
                             "own (the one a phase issues first at high priority), so their "
                             "kernels share the SMs; 1 runs them one after the other on one "
                             "stream (CUDA; eager or one graph per step).")  # fmt: skip
    # which GEMMs take --sm-carveout (reference_model/carveout.py)
    carveout_scope: str = _field("overlap", "--carveout-scope", "GEMMs that take "
                                 "--sm-carveout: overlap (the segments issued while an "
                                 "async collective is in flight), fwd or bwd (those of the "
                                 "forward or of the backward only) or all.")  # fmt: skip
    modes: tuple[str, ...] = _field(MODES, "--mode", f"{', '.join(MODES)}, or all of them back "
                                    "to back in one process group.", cli_default="all")
    device: str = _field("cpu", "--device", "cuda, cpu, or auto.", cli_default=AUTO)
    dtype: str = _field(AUTO, "--dtype", "float32 or bfloat16 (auto: bf16 on CUDA).")
    warmup_steps: int = _field(2, "--warmup", "Warm-up steps per mode.")
    timed_steps: int = _field(DEFAULT_TIMED_STEPS, "--steps", "Timed steps per mode (after "
                              "warm-up), in blocks of --block-steps.")  # fmt: skip
    # timed steps per block (stats.py; modes interleave by block on CPU)
    block_steps: int = _field(DEFAULT_BLOCK_STEPS, "--block-steps", "Timed steps per block: "
                              "each block's median is one sample of the 95% intervals; on CPU "
                              "the modes take turns block by block.")  # fmt: skip
    profile_steps: int = _field(2, "--profile-steps", "Profiled steps per mode.")
    # how the timed steps are timed (train.ModeRun.timed_block). stream: a block's steps run
    # back to back, as a training loop runs them (no loss read between steps), each timed
    # on the device from the previous step's end to its own (CUDA events); step: each step
    # alone, the device drained before and after it (the only way before 2026-12-07 (g)),
    # so every step starts with an empty queue and a host-bound step pays the wait for its
    # first kernels each time. auto (validate: _resolve_timing): stream on CUDA, step on CPU.
    timing: str = _field(AUTO, "--timing", "How the timed steps are timed: stream (a "
                         "block's steps back to back, each timed on the device from the "
                         "previous step's end: a training loop's throughput) or step (each "
                         "step alone, the device idle before and after it); auto: stream "
                         "on CUDA, step on CPU.")  # fmt: skip
    seed: int = _field(1234, "--seed", "Seed of the weights and the synthetic tokens.")
    lr: float = _field(1e-4, "--lr", "AdamW learning rate.")
    data: str | None = _field(None, "--data", "Token file (.npy ints or .bin uint16); default: "
                              "synthetic deterministic tokens.")  # fmt: skip
    timeout_s: float = _field(900.0, "--timeout", "Seconds before hung ranks are killed (> 0).")
    cuda_graphs: bool = _field(False, "--cuda-graphs", "Replay every schedule segment as a CUDA "
                               "graph (one shared memory pool; CUDA only).")  # fmt: skip
    # what one CUDA graph holds (reference_model/executor.py): a schedule segment, or the
    # whole step with its collectives (emulated or skipped comm only, until a real NCCL
    # capture has been run and checked on a multi-GPU machine); validate() resolves auto
    graph_scope: str = _field(AUTO, "--graph-scope", "With --cuda-graphs: segment (a graph "
                              "per schedule segment, collectives between them) or step (one "
                              "graph per step, collectives captured: --comm emulate, or tp "
                              "1). auto: step where it can, else segment.")  # fmt: skip
    compile: bool = _field(False, "--compile", "torch.compile every schedule segment.")
    # None: on with --device cuda, off on CPU (__post_init__). On by measurement (issue 34,
    # reports/emulated-h100-2026-12-07: the headline with --cuda-graphs, emulated, one
    # H100: domino-sp 83.1 -> 79.7 ms, tp and domino within 0.3 %)
    high_priority_comm: bool | None = _field(None, "--high-priority-comm", "Run the "
                                             "collectives (NCCL's or the emulated) on a "
                                             "high-priority CUDA stream [default: on with "
                                             "--device cuda].", switch=True)  # fmt: skip
    attention: str = _field(AUTO, "--attention", "Fused attention kernel on CUDA (bf16): flash, "
                            "cudnn, or auto (cuDNN on Hopper, else flash).")  # fmt: skip
    # the collectives (run --comm): nccl | gloo | emulate; "auto" = nccl on CUDA, gloo on
    # CPU (validate() resolves it). emulate: ONE process runs rank 0's shard of tp R and
    # every collective is an emulated kernel timed by a comm profile (docs/EMULATION.md)
    comm: str = _field(AUTO, "--comm", "Collectives: nccl (one process per GPU), gloo (CPU), "
                       "or emulate (ONE process on one GPU runs rank 0's shard of --tp R; every "
                       "collective is an emulated kernel timed by --comm-profile; "
                       "docs/EMULATION.md). auto: nccl on CUDA, gloo on CPU.")  # fmt: skip
    # --comm emulate: a shipped profile's name or a profile file (validate() resolves ""
    # to the shipped h200-nvlink-tp{R} and a file to its absolute path)
    comm_profile: str = _field("", "--comm-profile", "--comm emulate's comm profile: a shipped "
                               "one (h200-nvlink-tp2, -tp4, -tp8) or a JSON file from "
                               "`domino-prof calibrate` [default: h200-nvlink-tp<R>].",
                               cli_default=None)  # fmt: skip

    def __post_init__(self) -> None:
        # the defaults that follow other fields, resolved where the config is built
        if self.seq == 0:
            object.__setattr__(self, "seq", 128 if self.model.name == "tiny" else 4096)
        if self.dtype == AUTO:
            object.__setattr__(self, "dtype", "bfloat16" if self.device == "cuda" else "float32")
        if self.high_priority_comm is None:  # a CUDA stream's priority: CUDA only
            object.__setattr__(self, "high_priority_comm", self.device == "cuda")
        if self.split_sizes is not None:
            object.__setattr__(self, "split_sizes", tuple(self.split_sizes))
            if self.splits == DEFAULT_SPLITS:  # the sizes set the micro-batches
                object.__setattr__(self, "splits", len(self.split_sizes))

    @classmethod
    def from_options(cls, *, device: str, model: str = AUTO, layers: int = 0,
                     **fields: object) -> RunConfig:  # fmt: skip
        """`run`'s options as a validated config on ``device`` (cpu or cuda; "auto" is
        the launcher's to resolve: ``launcher.resolve_device``): ``model`` a preset name
        or "auto" (llama3-3b on CUDA, tiny on CPU), cut to ``layers`` (0: the preset's);
        every other option is the field of its name. A ConfigError line on the first
        problem."""
        name = model if model != AUTO else ("llama3-3b" if device == "cuda" else "tiny")
        mcfg = preset(name, layers=layers or None)
        return cls(model=mcfg, device=device, **fields).validate()  # type: ignore[arg-type]

    @classmethod
    def check_options(cls, *, device: str, **options: object) -> RunConfig | None:
        """The options checked before torch is imported: the validated config when
        ``device`` names one; under "auto" (known once torch looks for a GPU) None, or
        the ConfigError that both devices give (a mistake on any machine). A mistake
        whose wording depends on the device is left to ``from_options`` once the device
        is known, so each message is the one the resolved device gives."""
        if device != AUTO:
            return cls.from_options(device=device, **options)
        errors: list[ConfigError] = []
        for d in ("cpu", "cuda"):
            try:
                cls.from_options(device=d, **options)
            except ConfigError as e:
                errors.append(e)
        if len(errors) == 2 and str(errors[0]) == str(errors[1]):
            raise errors[0]
        return None

    @property
    def backend(self) -> str:
        """The collectives' backend: ``comm``, with "auto" resolved (older run.json)."""
        if self.comm == "auto":
            return "nccl" if self.device == "cuda" else "gloo"
        return self.comm

    @property
    def emulated(self) -> bool:
        return self.comm == "emulate"

    @property
    def world_size(self) -> int:
        """Processes the run starts: tp, or 1 when the comm is emulated (rank 0 only)."""
        return 1 if self.emulated else self.tp

    def validate(self) -> RunConfig:
        """Check every flag before any process starts; returns the config with ``comm``
        (and, emulated, ``comm_profile``) resolved. A ConfigError line on the first
        problem."""
        self._validate()
        cfg = self._resolve_comm()._resolve_graph_scope()._resolve_timing()
        if cfg.mb_streams == 2 and cfg.cuda_graphs and cfg.graph_scope == "segment":
            raise ConfigError("--mb-streams 2 with --cuda-graphs needs one graph per step "
                              "(--graph-scope step: emulated comm, or tp 1); a graph per "
                              "segment cannot hold two streams' work")  # fmt: skip
        return cfg

    def _resolve_graph_scope(self) -> RunConfig:
        """``graph_scope`` auto: one graph per step where the collectives can be captured
        (emulated, or none at tp 1), else a graph per segment (real NCCL at tp >= 2: its
        capture has not been run and checked yet; measured, reports/emulated-h200-
        2026-12-03c: the step graph took domino 84.3 -> 82.4 ms, tp 98.6 -> 96.9 ms at
        the headline shape, and tp 1's domino graphs / tp graphs 1.043 -> 1.035, the
        median of 8 runs). Without graphs it is segment (unused)."""
        real = self.comm == "nccl" and self.tp > 1
        if self.graph_scope == AUTO:
            return replace(self, graph_scope="step" if self.cuda_graphs and not real
                           else "segment")  # fmt: skip
        if self.graph_scope == "step" and real:
            raise ConfigError("--graph-scope step captures the collectives, and a capture "
                              "of real NCCL collectives has not been run and checked yet; "
                              "use --graph-scope segment with --comm nccl (or --comm "
                              "emulate)")  # fmt: skip
        return self

    def _resolve_timing(self) -> RunConfig:
        """``timing`` auto: stream on CUDA, step on CPU.

        CUDA: stream is what a training loop's throughput is, and its median was below
        step's in every mode measured. One H100 (emulated TP 8, headline shape, eager;
        benchmarks/bench_timing_ab.py, 12 ABAB pairs of 4-step blocks, reports/emulated-
        h100-2026-12-07i), stream / step: nocomm 0.976, tp 0.983 (every pair below 1),
        domino-sp 0.963, domino-sp-nocomm 0.945 (the host at its slow level); graph steps
        0.994-0.996 (-07h).
        CPU: a step there runs on the host that issues it, so both time the same thing,
        and step keeps a host probe and an issue time for every step."""
        if self.timing == AUTO:
            return replace(self, timing="stream" if self.device == "cuda" else "step")
        return self

    def _validate(self) -> None:
        m = self.model
        if self.device == "cuda":
            side_priority()  # its environment knob: a bad value is one line here
        rope_env()  # the same for the rotary kernel's knob
        norm_env()  # and the norm's
        if self.tp < 1:
            raise ConfigError(f"--tp must be >= 1, got {self.tp}")
        for what, n in (
            ("heads", m.n_heads),
            ("kv heads", m.n_kv_heads),
            ("ffn dim", m.ffn_dim),
            ("vocab size", m.vocab_size),
        ):
            if n % self.tp:
                raise ConfigError(
                    f"--tp {self.tp} does not divide the {m.name} model's {what} ({n}); "
                    f"choose a tp that divides {n}"
                )
        if self.splits < 1:
            raise ConfigError(f"--splits must be >= 1, got {self.splits}")
        for mode in self.modes:
            modes.get(mode)  # unknown mode: one clear error
        self._validate_splits()
        if self.seq < 2:
            raise ConfigError(f"--seq must be >= 2, got {self.seq}")
        sp = [m for m in self.modes if modes.get(m).sequence_parallel]
        if sp and self.seq % self.tp:
            raise ConfigError(
                f"--seq {self.seq} is not divisible by --tp {self.tp}: sequence parallelism "
                f"(modes {', '.join(sp)}) gives every rank seq/tp positions; use a multiple "
                f"of {self.tp}"
            )
        if self.device not in ("cpu", "cuda"):
            raise ConfigError(f"--device must be cpu or cuda, got {self.device!r}")
        if self.cuda_graphs and self.device != "cuda":
            raise ConfigError("--cuda-graphs needs --device cuda")
        if self.graph_scope not in (AUTO, *GRAPH_SCOPES):
            raise ConfigError(f"--graph-scope must be auto, {' or '.join(GRAPH_SCOPES)}, got "
                              f"{self.graph_scope!r}")  # fmt: skip
        if self.graph_scope == "step" and not self.cuda_graphs:
            raise ConfigError("--graph-scope step needs --cuda-graphs (it says what one "
                              "CUDA graph holds)")  # fmt: skip
        if self.sm_carveout is not None and self.device != "cuda":
            raise ConfigError("--sm-carveout needs --device cuda (CUDA only: the SMs GEMMs "
                              "leave free)")  # fmt: skip
        if self.sm_carveout is not None and self.sm_carveout < 0:
            raise ConfigError(f"--sm-carveout must be >= 0 SMs, got {self.sm_carveout}")
        if self.carveout_scope not in CARVEOUT_SCOPES:
            raise ConfigError(f"--carveout-scope must be one of {', '.join(CARVEOUT_SCOPES)}, "
                              f"got {self.carveout_scope!r}")  # fmt: skip
        for flag, value, choices in (("--wgrad-in", self.wgrad_in, WGRAD_INS),
                                     ("--sp-wgrad-input", self.sp_wgrad_input, SP_WGRAD_INPUTS),
                                     ("--sp-residual", self.sp_residual, SP_RESIDUALS)):
            if value not in choices:
                raise ConfigError(f"{flag} must be {' or '.join(choices)}, got {value!r}")
        if self.mb_streams not in (1, 2):
            raise ConfigError(f"--mb-streams must be 1 or 2, got {self.mb_streams}")
        if self.mb_streams == 2:
            self._validate_mb_streams()
        if self.overlap_gemm not in OVERLAP_GEMMS:
            raise ConfigError(f"--overlap-gemm must be one of {', '.join(OVERLAP_GEMMS)}, got "
                              f"{self.overlap_gemm!r}")  # fmt: skip
        if self.overlap_gemm != "cublas" and self.device != "cuda":
            raise ConfigError(f"--overlap-gemm {self.overlap_gemm} needs --device cuda "
                              "(Triton GPU kernels)")  # fmt: skip
        if self.overlap_gemm != "cublas" and self.compile:
            raise ConfigError(f"--overlap-gemm {self.overlap_gemm} does not go with "
                              "--compile (inductor picks the compiled segments' GEMMs); "
                              "drop one of them")  # fmt: skip
        if self.comm_ctas is not None and self.comm_ctas < 1:
            raise ConfigError(f"--comm-ctas must be >= 1, got {self.comm_ctas}")
        if self.comm_engine not in COMM_ENGINES:
            raise ConfigError(f"--comm-engine must be one of {', '.join(COMM_ENGINES)}, got "
                              f"{self.comm_engine!r}")  # fmt: skip
        if self.comm_ctas_scope not in COMM_CTAS_SCOPES:
            raise ConfigError(f"--comm-ctas-scope must be one of {', '.join(COMM_CTAS_SCOPES)}, "
                              f"got {self.comm_ctas_scope!r}")  # fmt: skip
        if self.comm_ctas_scope != "all" and self.comm_ctas is None:
            raise ConfigError(f"--comm-ctas-scope {self.comm_ctas_scope} says which "
                              "collectives take --comm-ctas N; add --comm-ctas N")  # fmt: skip
        if self.comm_engine == "ce" and self.comm_ctas is not None:
            raise ConfigError("--comm-ctas sets the CTAs of an SM-driven collective; "
                              "--comm-engine ce moves data with copies: drop one of them")
        if self.high_priority_comm and self.device != "cuda":
            raise ConfigError("--high-priority-comm needs --device cuda (NCCL streams)")
        if self.attention not in ATTENTION_KERNELS:
            raise ConfigError(f"unknown --attention {self.attention!r}; use auto, flash or cudnn")
        if self.attention == "cudnn" and self.device != "cuda":
            raise ConfigError("--attention cudnn needs --device cuda (cuDNN's attention kernel)")
        if self.dtype == "float16":
            raise ConfigError(
                "--dtype float16 is not supported: the reference model has no loss scaling, "
                "so float16 training overflows to NaN; use bfloat16 (no scaling needed) or "
                "float32"
            )
        if self.dtype not in ("float32", "bfloat16"):
            raise ConfigError(f"unknown dtype {self.dtype!r}; use float32 or bfloat16")
        if self.profile_steps < 1 or self.timed_steps < 1 or self.warmup_steps < 0:
            raise ConfigError("--steps must leave at least one timed and one profiled step")
        if self.block_steps < 1:
            raise ConfigError(f"--block-steps must be >= 1, got {self.block_steps}")
        if self.timing not in (AUTO, *TIMINGS):
            raise ConfigError(f"--timing must be one of {', '.join((AUTO, *TIMINGS))}, got "
                              f"{self.timing!r}")  # fmt: skip

    def _validate_mb_streams(self) -> None:
        """--mb-streams 2: CUDA, 2 micro-batches, eager or a whole-step graph, and a mode
        that takes it."""
        takes = [n for n in self.modes if self.mb_streams_for(n) == 2]
        if not takes:
            raise ConfigError(
                f"--mb-streams 2 applies to the micro-batched all-reduce modes "
                f"({', '.join(n for n, x in modes.MODES.items() if _lanes_mode(x))}); "
                f"--mode {', '.join(self.modes)} takes none"
            )
        if self.device != "cuda":
            raise ConfigError("--mb-streams 2 needs --device cuda (CUDA streams); on CPU "
                              "the micro-batches run one after the other (drop it)")  # fmt: skip
        try:  # its environment knobs: a bad value is one line here, not a rank's traceback
            lane_phases(), lane_priorities()
            lane_comm(), lane_lock()
        except ValueError as e:
            raise ConfigError(f"--mb-streams 2: {e}") from None
        n = len(self.split_sizes) if self.split_sizes is not None else self.splits
        if n != 2:
            raise ConfigError(f"--mb-streams 2 takes 2 micro-batches, got --splits {n}; "
                              "use --splits 2 or drop --mb-streams")  # fmt: skip

    def mb_streams_for(self, mode: str) -> int:
        """--mb-streams for a micro-batched all-reduce mode, else 1."""
        return self.mb_streams if _lanes_mode(modes.get(mode)) else 1

    def _validate_splits(self) -> None:
        """--splits, --col-splits, --split-sizes: each on the modes that take it."""
        m = self.model
        if self.col_splits < 1:
            raise ConfigError(f"--col-splits must be >= 1, got {self.col_splits}")
        if m.dim % self.col_splits:
            raise ConfigError(
                f"--col-splits {self.col_splits} does not divide the {m.name} model's dim "
                f"({m.dim}); choose a K that divides {m.dim}"
            )
        takes_col = [n for n in self.modes if modes.get(n).col_split]
        if self.col_splits > 1 and not takes_col:
            raise ConfigError(
                f"--col-splits {self.col_splits} applies to the modes of the domino schedule "
                f"({', '.join(n for n, x in modes.MODES.items() if x.col_split)}); "
                f"--mode {', '.join(self.modes)} takes none"
            )
        for mode in self.modes:
            if modes.get(mode).micro_batched and self.splits < 2 and self.col_splits_for(mode) < 2:
                also = ", unless --col-splits >= 2" if modes.get(mode).col_split else ""
                raise ConfigError(
                    f"--splits must be >= 2 for {mode} (1 micro-batch cannot overlap{also})"
                )
        if self.mbs < 1:
            raise ConfigError(f"--mbs must be >= 1 (sequences per batch), got {self.mbs}")
        sizes = self.split_sizes
        if sizes is None:
            if self.mbs % self.splits:
                raise ConfigError(
                    f"batch (--mbs {self.mbs}) is not divisible by --splits {self.splits}; "
                    f"use an mbs that is a multiple of {self.splits}"
                )
            return
        given = ",".join(map(str, sizes))
        if not sizes or min(sizes) < 1:
            raise ConfigError(f"--split-sizes {given}: every micro-batch needs >= 1 sequence")
        if sum(sizes) != self.mbs:
            raise ConfigError(
                f"--split-sizes {given} sums to {sum(sizes)} sequences but --mbs is "
                f"{self.mbs}; give sizes that sum to --mbs"
            )
        if len(sizes) != self.splits:
            raise ConfigError(
                f"--split-sizes {given} gives {len(sizes)} micro-batches but --splits is "
                f"{self.splits}; drop --splits (the sizes set it)"
            )
        if not any(modes.get(n).micro_batched for n in self.modes):
            raise ConfigError(
                f"--split-sizes applies to the micro-batched modes "
                f"({', '.join(n for n, x in modes.MODES.items() if x.micro_batched)}); "
                f"--mode {', '.join(self.modes)} takes one micro-batch"
            )

    def _resolve_comm(self) -> RunConfig:
        if self.comm not in COMM_CHOICES:
            raise ConfigError(f"unknown --comm {self.comm!r}; use nccl, gloo or emulate")
        comm = self.backend
        if comm == "nccl" and self.device != "cuda":
            raise ConfigError("--comm nccl needs --device cuda; on CPU use --comm gloo")
        if comm == "gloo" and self.device == "cuda":
            raise ConfigError(
                "--comm gloo runs on CPU tensors: the reference model's CUDA step needs "
                "--comm nccl (several GPUs) or --comm emulate (one GPU)"
            )
        if comm != "emulate":
            if self.comm_engine != "sm":
                raise ConfigError(
                    f"--comm-engine {self.comm_engine} is emulated only (--comm emulate): "
                    "the real copy-engine path (torch's symmetric-memory low-contention "
                    "collectives) needs 2+ GPUs to be checked, and none were lent; drop "
                    "--comm-engine or add --comm emulate"
                )
            if self.comm_profile:
                raise ConfigError(
                    f"--comm-profile {self.comm_profile} applies to --comm emulate only; "
                    "add --comm emulate or drop --comm-profile"
                )
            if self.comm_ctas_scope != "all":  # two groups (their CTAs) per phase: not built
                raise ConfigError(
                    f"--comm-ctas-scope {self.comm_ctas_scope} runs with --comm emulate only "
                    "(real collectives would need a second process group with its own CTAs, "
                    "not built until a multi-GPU machine can check it); use --comm emulate "
                    "or drop it"
                )
            if self.comm_ctas is not None and comm != "nccl":
                raise ConfigError(
                    f"--comm-ctas sets the CTAs of NCCL's (or the emulated) collectives; "
                    f"--comm {comm} has none: use --device cuda (nccl or --comm emulate)"
                )
            return replace(self, comm=comm)
        if self.device != "cuda":
            raise ConfigError(
                "--comm emulate runs its collectives as GPU kernels and needs --device "
                "cuda; on CPU use --comm gloo (tp ranks as processes)"
            )
        if self.tp < 2:
            raise ConfigError(f"--comm emulate needs --tp >= 2 (it stands in for tp ranks), "
                              f"got --tp {self.tp}")  # fmt: skip
        return replace(self, comm=comm, comm_profile=check_profile(self))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["modes"] = list(self.modes)
        return d

    @staticmethod
    def from_dict(d: dict) -> RunConfig:
        d = dict(d)
        d["model"] = ModelConfig(**d["model"])
        d["modes"] = tuple(d["modes"])
        if d.get("split_sizes") is not None:
            d["split_sizes"] = tuple(d["split_sizes"])
        return RunConfig(**d)

    def splits_for(self, mode: str) -> int:
        return self.splits if modes.get(mode).micro_batched else 1

    def col_splits_for(self, mode: str) -> int:
        """--col-splits for a mode whose schedule takes it (domino's), else 1."""
        return self.col_splits if modes.get(mode).col_split else 1

    def split_sizes_for(self, mode: str) -> tuple[int, ...] | None:
        """--split-sizes for a micro-batched mode, else None (one micro-batch)."""
        return self.split_sizes if modes.get(mode).micro_batched else None


def _lanes_mode(m) -> bool:
    """A mode that takes --mb-streams: micro-batched, all-reduce TP (domino's step)."""
    return m.micro_batched and not m.sequence_parallel
