"""A training step as data: a runner binds a sharded model, a :class:`~comm.Comm`, a
schedule and a segment executor.

A step is a fixed sequence of **segments** (straight-line tensor code between two
collectives, ``segments.py`` on ``units.py``'s explicit forward and backward pieces)
and **collectives** (launched and waited for by the schedule through the Comm). Who
does what:

* ``layers.py``     — one class per layer kind: its weights' names, forward,
                      input-gradient and weight-gradient maths;
* ``tp_step.py`` / ``sp_step.py`` (on ``step_base.py``) — a step's operations over
                      (unit, micro-batch) and the data they hand each other
                      (all-reduce TP; sequence parallel);
* ``schedules.py``  — tp, domino, sp, domino-sp: each an ordering of those operations;
* ``executor.py``   — how a segment runs (eager, ``torch.compile``, CUDA graph capture
                      and replay in one pool, side stream, launch throttle);
* ``modes.py``      — the registry: a mode = a schedule + a comm choice + one line;
* ``comm.py``       — the collectives' interface (process group, skip; ``emulate.py``).

``build_runner(cfg, mode, ...)`` is what ``train.py`` calls; tests and benchmarks build
a :class:`StepRunner` from a model and a Comm directly.
"""

from __future__ import annotations

import torch

from domino_prof.reference_model import modes
from domino_prof.reference_model import units as U
from domino_prof.reference_model.carveout import carveout_of
from domino_prof.reference_model.comm import Comm, ProcessGroupComm, make_comm, pg_options
from domino_prof.reference_model.config import (
    SP_RESIDUALS,
    SP_WGRAD_INPUTS,
    default_profile,
    lane_comm,
)
from domino_prof.reference_model.executor import SegmentExecutor
from domino_prof.reference_model.layers import Embedding, units_of
from domino_prof.reference_model.model import Transformer, rope_tables
from domino_prof.reference_model.overlap_gemm import overlap_gemm_of
from domino_prof.reference_model.parallel import shard_model
from domino_prof.reference_model.sp_step import ShardedStep
from domino_prof.reference_model.tp_step import AllReduceStep

_LEGACY = {(False, False): "tp", (True, False): "domino", (False, True): "sp",
           (True, True): "domino-sp"}  # fmt: skip


class StepRunner:
    """Runs forward + backward of one batch through a sharded model.

    ``schedule``: a registered schedule name (``modes.SCHEDULES``); ``splits``: its
    micro-batches (used only by a micro-batched schedule; else 1), of ``split_sizes``
    sequences each (a micro-batched schedule; None: the batch split evenly);
    ``col_splits``: column chunks of each all-reduced partial sum (a schedule registered
    with ``col_split``; tp_step.py); ``wgrad_in``: "joint" or "accumulate", how the
    all-reduce schedules' column-parallel weight gradients read the micro-batches' norm
    outputs (``--wgrad-in``, units._acc_mm_in); ``sp_wgrad_input``: "keep" or "regather",
    whether the sequence-parallel weight gradients' gathered input is all-gathered again in
    the backward or kept from the forward (``--sp-wgrad-input``, sp_step.py);
    ``sp_residual``: "fold" or "chain", where the sequence-parallel forward adds the
    residual (``--sp-residual``, sp_step.py);
    ``mb_streams``: 2 runs each of the 2 micro-batches of an all-reduce schedule on a CUDA
    stream of its own (``--mb-streams``, tp_step.py's micro-batch lanes). The older spelling
    ``overlap=, sp=`` (no ``schedule``) still picks tp / domino / sp / domino-sp.
    ``graphs``: CUDA graphs of every segment (CPU: an emulation, for tests), or of the
    whole step with its collectives (``graph_scope="step"``; executor.py);
    ``compile``: ``torch.compile`` every segment function; ``record``: the executor
    records the executed events (``executor.events``).

    ``step`` *overwrites* ``.grad`` of every parameter with this batch's gradient
    (the buffers are the runner's own, zeroed at the start of each step, so graphs
    can write into them); callers need no ``zero_grad``.
    """

    def __init__(
        self,
        model: Transformer,
        comm: Comm,
        *,
        schedule: str | None = None,
        splits: int = 1,
        col_splits: int = 1,
        wgrad_in: str = "joint",
        sp_wgrad_input: str = "keep",
        sp_residual: str = "fold",
        split_sizes: tuple[int, ...] | None = None,
        graphs: bool = False,
        compile: bool = False,
        graph_inflight: int = 8,
        record: bool = False,
        carveout=None,
        graph_scope: str = "segment",
        overlap_gemm=None,
        mb_streams: int = 1,
        lane_comms: tuple | None = None,
        bwd_comm: Comm | None = None,
        overlap: bool | None = None,
        sp: bool | None = None,
    ) -> None:
        if schedule is None:
            schedule = _LEGACY[bool(overlap), bool(sp)]
        self.spec = modes.SCHEDULES[schedule]
        self.schedule = modes.load_schedule(schedule)
        self.model, self.comm = model, comm
        self.splits = splits if self.spec.micro_batched else 1
        self.split_sizes = tuple(split_sizes) if split_sizes and self.spec.micro_batched else None
        if self.split_sizes is not None:
            self.splits = len(self.split_sizes)
        if col_splits > 1 and not self.spec.col_split:
            raise ValueError(f"schedule {schedule!r} takes no column split (col_splits "
                             f"{col_splits})")  # fmt: skip
        if model.cfg.dim % col_splits:
            raise ValueError(f"col_splits {col_splits} does not divide dim {model.cfg.dim}")
        self.col_splits = col_splits
        self.wgrad_in = wgrad_in  # tp_step.AllReduceStep (config.WGRAD_INS)
        for name, value, choices in (("sp_wgrad_input", sp_wgrad_input, SP_WGRAD_INPUTS),
                                     ("sp_residual", sp_residual, SP_RESIDUALS)):
            if value not in choices:
                raise ValueError(f"{name} must be {' or '.join(choices)}, got {value!r}")
        self.sp_wgrad_input = sp_wgrad_input  # sp_step.ShardedStep
        self.sp_residual = sp_residual  # sp_step.ShardedStep
        if mb_streams not in (1, 2):
            raise ValueError(f"mb_streams must be 1 or 2, got {mb_streams}")
        if mb_streams == 2 and (not self.spec.micro_batched or self.spec.sequence_parallel
                                or self.splits != 2):  # fmt: skip
            raise ValueError(f"mb_streams 2 takes a micro-batched all-reduce schedule with 2 "
                             f"micro-batches (schedule {schedule!r}, {self.splits})")  # fmt: skip
        self.mb_streams = mb_streams  # step_base.StepBase.lanes: a stream per micro-batch
        self.sp = self.spec.sequence_parallel
        self.graphs = graphs
        dev = model.tok_embeddings.weight.device
        if dev.type == "cuda":  # the Triton kernels' self-checks (a few tiny launches and a
            U.rope_kernel(dev)  # sync each) run here, once, never inside a graph capture
            U.norm_kernel(dev)
        self.executor = SegmentExecutor(
            comm,
            device=dev,
            graphs=graphs,
            compile=compile,
            # domino-sp: the reduce-scatter -> norm -> all-gather chain on a side stream
            side_stream=self.sp and self.spec.micro_batched,
            graph_inflight=graph_inflight,
            record=record,
            carveout=carveout,  # --sm-carveout: carveout.Carveout, told per segment
            graph_scope=graph_scope,  # --graph-scope: a graph per segment, or per step
            overlap_gemm=overlap_gemm,  # --overlap-gemm: overlap_gemm.OverlapGemm, per segment
            mb_lanes=mb_streams == 2,  # --mb-streams 2: tp_step.py's micro-batch lanes
            lane_comms=lane_comms,  # DOMINO_PROF_LANE_COMM=own: a comm (stream) per lane
            bwd_comm=bwd_comm,  # --comm-ctas-scope bwd: the backward's collectives' comm
        )
        self.layers, self.head = units_of(model)
        self.embedding = Embedding(model, index=-1)
        cfg = model.cfg
        self.vocab_start = comm.rank * (cfg.vocab_size // comm.size)
        blk = model.layers[0]
        self.dims = U.Dims(
            heads=blk.attention.n_heads,
            kv_heads=blk.attention.n_kv_heads,
            head_dim=cfg.head_dim,
            ffn=blk.feed_forward.ffn_dim,
            eps=cfg.norm_eps,
            seq_major=self.sp,
        )
        self.params = list(model.parameters())
        self._grads: list[torch.Tensor] | None = None
        self._rope: dict = {}
        self.sp_norm_grad_flat: torch.Tensor | None = None

    @property
    def host_wait_s(self) -> float:
        """Seconds the host was held back by the graph in-flight cap (not host work)."""
        return self.executor.host_wait_s

    @property
    def graphs_per_step(self) -> int:
        return len(self.executor.graph_store)

    @property
    def events(self) -> list | None:
        return self.executor.events

    def step(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Forward and backward of one batch; gradients into ``.grad`` (overwritten).
        Returns the loss (mean token cross-entropy over the whole batch), detached: an
        inference tensor (read it, e.g. ``float(loss)``; do not update it in place).

        The step runs under ``torch.inference_mode``, not ``no_grad``: it records no
        autograd graph either way (units.py writes every backward out), and inference
        mode also skips the autograd and view-tracking dispatch of every op, the host's
        largest cost per op in an eager step. Measured: ``benchmarks/bench_sp_host.py
        --layers 28`` (CPU, 2-core box) domino 35.9 -> 27.8 ms a step, domino-sp 39.8 ->
        31.4, tp 20.2 -> 16.3. The gradient buffers are made outside it (plain tensors:
        the optimizer updates the weights with them outside the step)."""
        with torch.no_grad():
            self._attach_grads()  # a whole-step replay runs no Python of the step
        key = (tuple(tokens.shape), tokens.device)
        with torch.inference_mode():
            return self.executor.step(key, self._run, tokens, targets)

    def _run(self, tokens, targets) -> torch.Tensor:
        self.model.tok_embeddings.weight.grad.zero_()  # step() attached the buffers
        ops = (ShardedStep if self.sp else AllReduceStep)(
            self, tokens, targets, self._sizes(tokens.shape[0])
        )
        self.schedule(ops, self.splits)
        return ops.finish()

    def _sizes(self, B: int) -> tuple[int, ...]:
        """Sequences per micro-batch: ``split_sizes``, or B split evenly."""
        if self.split_sizes is not None:
            if sum(self.split_sizes) != B:
                raise ValueError(f"split_sizes {self.split_sizes} do not sum to the batch {B}")
            return self.split_sizes
        if B % self.splits:
            raise ValueError(f"batch {B} is not divisible by splits {self.splits}")
        return (B // self.splits,) * self.splits

    def _attach_grads(self) -> None:
        """One gradient buffer per parameter, re-attached if a caller replaced ``.grad``
        (a graph has these addresses baked in). Every buffer is overwritten by the
        step's first micro-batch (``first=True``), except the embedding's, whose rows
        are scattered: that one is zeroed by the step (``_run``)."""
        if self._grads is None:
            self._grads = [torch.empty_like(p) for p in self.params]
            if self.sp:  # SP: norm weights' grads are partial over ranks: one flat buffer
                names = [n for n, _ in self.model.named_parameters()]
                norms = [i for i, n in enumerate(names) if n.endswith("norm.weight")]
                flat = torch.empty(
                    sum(self.params[i].numel() for i in norms),
                    dtype=self.params[0].dtype,
                    device=self.params[0].device,
                )
                off = 0
                for i in norms:
                    n_el = self.params[i].numel()
                    self._grads[i] = flat[off : off + n_el].view_as(self.params[i])
                    off += n_el
                self.sp_norm_grad_flat = flat
        for p, g in zip(self.params, self._grads):
            if p.grad is not g:
                p.grad = g

    def rope_for(self, S: int, device):
        key = (S, device)
        if key not in self._rope:
            cs = U.rope_table(
                rope_tables(self.model.cfg.head_dim, S, self.model.cfg.rope_theta, device)
            )
            cs_conj = cs.clone()
            cs_conj[..., 1].neg_()
            self._rope[key] = (cs, cs_conj)
        return self._rope[key]


def build_runner(cfg, mode: str, *, device, dtype, group=None, comm: Comm | None = None,
                 graph_inflight: int = 8) -> StepRunner:  # fmt: skip
    """The runner of ``mode`` for a ``RunConfig``: its Comm (``comm``, or the mode's
    choice over ``group``; ``cfg.comm == "emulate"``: no group, rank 0 of tp ``cfg.tp``
    with emulated collectives, nocomm skipped), this rank's shard of the model, the
    schedule."""
    m = modes.get(mode)
    if comm is None and getattr(cfg, "emulated", False):
        comm = make_comm(m.comm, size=cfg.tp, rank=0, emulate=cfg.comm_profile or
                         default_profile(cfg.tp), device=device,
                         high_priority=cfg.high_priority_comm,
                         ctas=None if _bwd_ctas(cfg) else getattr(cfg, "comm_ctas", None),
                         engine=getattr(cfg, "comm_engine", "sm"))  # fmt: skip
    if comm is None:
        comm = make_comm(m.comm, group)
    model = shard_model(cfg.model, comm, seed=cfg.seed, device=device, dtype=dtype)
    bwd_comm = _bwd_comm(cfg, comm)
    return StepRunner(
        model,
        comm,
        schedule=m.schedule,
        splits=cfg.splits_for(mode),
        col_splits=cfg.col_splits_for(mode),
        wgrad_in=getattr(cfg, "wgrad_in", "joint"),
        sp_wgrad_input=getattr(cfg, "sp_wgrad_input", "keep"),
        sp_residual=getattr(cfg, "sp_residual", "fold"),
        split_sizes=cfg.split_sizes_for(mode),
        graphs=cfg.cuda_graphs,
        compile=cfg.compile,
        graph_inflight=graph_inflight,
        carveout=carveout_of(cfg, device, spec=m.spec, comm=bwd_comm or comm, dtype=dtype),
        graph_scope=getattr(cfg, "graph_scope", "segment"),
        overlap_gemm=overlap_gemm_of(cfg, device),
        mb_streams=cfg.mb_streams_for(mode),
        lane_comms=_lane_comms(cfg, mode, comm),
        bwd_comm=bwd_comm,
    )


def _bwd_ctas(cfg) -> int | None:
    """--comm-ctas N of the backward's collectives only (``--comm-ctas-scope bwd``), else
    None (then --comm-ctas, if given, is every collective's)."""
    if getattr(cfg, "comm_ctas_scope", "all") == "bwd":
        return cfg.comm_ctas
    return None


def _bwd_comm(cfg, comm: Comm) -> Comm | None:
    """The backward's comm under ``--comm-ctas-scope bwd``: the emulated group on the same
    comm stream with --comm-ctas N CTAs (``EmulatedComm.phase_sibling``; the forward's
    keep the profile's). None otherwise, and for a mode that skips comm (nothing to
    run). RunConfig.validate refuses the scope for real collectives."""
    n = _bwd_ctas(cfg)
    if n is None or not hasattr(comm, "phase_sibling"):
        return None
    return comm.phase_sibling(n)


def _lane_comms(cfg, mode: str, comm: Comm) -> tuple | None:
    """The micro-batch lanes' comms with ``DOMINO_PROF_LANE_COMM=own`` (config.lane_comm):
    ``comm`` for lane 0 and its lane sibling for lane 1 (emulated: a second comm stream on
    the same link, ``EmulatedComm.lane_sibling``; a process group: a second group of the
    same ranks and options, its own NCCL stream; nocomm: the same SkipComm), else None."""
    if cfg.mb_streams_for(mode) != 2 or lane_comm() != "own":
        return None
    if isinstance(comm, ProcessGroupComm):
        opts = pg_options(cfg) if cfg.device == "cuda" else None
        return comm, comm.lane_sibling(pg_options=opts)
    return comm, comm.lane_sibling()
