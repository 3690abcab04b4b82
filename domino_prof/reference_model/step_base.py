"""What the operations of every step share (``tp_step.AllReduceStep``,
``sp_step.ShardedStep``): the batch in the step's token order and micro-batches (of
``sizes`` sequences each: even, or ``--split-sizes``' uneven ones), the
rotary tables, the head's forward (the cross-entropy's two small synchronous vocab
all-reduces) and backward to dn, profiler ranges, the weight gradient deferred into the
next segment, and which gradients a micro-batch writes first (overwrite) or not (add).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from domino_prof.reference_model import segments as S
from domino_prof.reference_model.executor import _NULL, Deferred, _profiling
from domino_prof.reference_model.layers import Head, Layer, Unit
from domino_prof.reference_model.config import lane_lock, lane_phases


@dataclass(slots=True)
class HeadActs:
    e: torch.Tensor  # [T, Vl] exp(logits − max)
    r: torch.Tensor  # [T] 1 / (denom · Σexp)
    idx: torch.Tensor  # [T] target index in this rank's vocab slice
    in_shard: torch.Tensor  # [T] target in this rank's slice
    h: torch.Tensor  # [T, d] the head's input (SP: its gathered norm output)
    rstd: torch.Tensor | None


class StepBase:
    """What every step's operations share: the batch in the step's token order, the
    head's forward and backward, profiler ranges, the deferred weight gradient."""

    def __init__(self, runner, tokens: torch.Tensor, targets: torch.Tensor,
                 sizes: tuple[int, ...], *, seq_major: bool = False) -> None:  # fmt: skip
        ex = self.ex = runner.executor
        n = len(sizes)
        self.model, self.dims, self.n = runner.model, runner.dims, n
        self.layers: list[Layer] = runner.layers
        self.head: Head = runner.head
        self.embedding: Unit = runner.embedding
        self.vocab_start = runner.vocab_start
        B, S_ = tokens.shape
        assert sum(sizes) == B, (sizes, B)
        self.b_mb: list[int] = list(sizes)  # b -> sequences of micro-batch b
        self.T: list[int] = [s * S_ for s in sizes]  # b -> its tokens
        # b -> its rows of the [ΣT, ·] buffers every micro-batch shares (None: one
        # micro-batch, no buffer; segments._mb_slot): (first row, ΣT)
        first = [sum(self.T[:b]) for b in range(n)]
        self.rows: list = [None] if n == 1 else [(f, B * S_) for f in first]
        self.rope, self.rope_conj = runner.rope_for(S_, tokens.device)
        self.denom = float(B * S_)

        def order(t):  # [b, S] -> flat tokens; SP: [S, b] -> flat (sequence-major)
            return (t.t() if seq_major else t).reshape(-1)

        parts = list(sizes)
        self.tok = [ex.static("tok", b, order(t)) for b, t in enumerate(tokens.split(parts, 0))]
        self.tgt = [ex.static("tgt", b, order(t)) for b, t in enumerate(targets.split(parts, 0))]
        self.xs: dict[int, tuple] = {}  # unit -> its [N, T, ·] forward buffers
        self.gs: dict[int, object] = {}  # unit -> its [N, T, ·] backward buffers
        self.head_acts: dict[int, HeadActs] = {}  # b
        self.head_n: dict[int, torch.Tensor] = {}  # b -> [1, T, d] head input (SP)
        self._seen: set = set()
        self.pre: Deferred | None = None  # the weight gradient deferred into the next segment
        self.losses: list[torch.Tensor] = []
        # --mb-streams 2 (tp_step.AllReduceStep): each micro-batch on a lane of its own
        self.lanes: bool = bool(getattr(runner, "mb_streams", 1) == 2 and n == 2)
        # the phases whose two micro-batches take a lane each (the other: the lead lane)
        self.lane_phases: tuple[str, ...] = lane_phases() if self.lanes else ()
        # DOMINO_PROF_LANE_LOCK (tp_step.py): "dgrad" holds the backward lanes apart
        self.lane_lock: str = lane_lock() if self.lanes else "off"
        self._phase: str | None = None

    def at(self, phase: str, u: Unit, b: int):
        """The profiler range of (phase, unit, micro-batch) (its name is formatted only
        while a profiler runs); with micro-batch lanes, entered on b's lane (the leading
        micro-batch of the phase on lane 0: forward 0, backward n − 1), and the first
        backward block waits for both lanes' forward (the micro-batches change lanes)."""
        rng = self.ex.range(u.range_name(phase, b)) if _profiling() else _NULL
        self.ex.phase = phase
        if not self.lanes:
            return rng
        if phase != self._phase:
            if self._phase is not None:
                self.ex.lanes_barrier()
            self._phase = phase
        split = phase in self.lane_phases
        return self.ex.lane(int(split and self._lead_b(phase) != b), rng)

    def _lead_b(self, phase: str) -> int:
        """The micro-batch a phase issues first: forward 0, backward the last."""
        return 0 if phase == "fwd" else self.n - 1

    def _take_pre(self, b: int = 0) -> Deferred | None:
        """The deferred weight gradient, for micro-batch ``b``'s segment. With lanes only
        micro-batch 0's segments take it (backward's following lane, which has waited for
        the leading one's segments of the unit: the gradient reads both's rows)."""
        if self.lanes and b != 0:
            return None
        pre, self.pre = self.pre, None
        return pre

    def _first(self, what) -> bool:
        """True the first time ``what`` (a gradient buffer's owner) is written this step:
        the first micro-batch overwrites a gradient, later ones accumulate."""
        first = what not in self._seen
        self._seen.add(what)
        return first

    def _head_forward(self, b, h, y, *, sp: bool = False):
        """Head forward of one micro-batch: (norm,) logits, the two small synchronous
        vocab all-reduces of the cross-entropy, the loss (kept). SP: ``h`` is the
        gathered norm output (the norm ran on the shard). Returns the loss."""
        ex, hu, i = self.ex, self.head, self.head.index
        w_norm, w_out = hu.weights
        m, logits, n_all, hh, rstd = ex.run(
            ("H1", i, b), S.seg_head_logits, h, y, w_norm, w_out, self.dims.eps, sp,
            None if sp else self.rows[b], None if sp else self.xs.get(i),
        )  # fmt: skip
        ex.launch(("max", i, b), "all_reduce", m, async_op=False, op="max")
        stats, e, idx, ins = ex.run(
            ("H2", i, b), S.seg_head_stats, logits, m, self.tgt[b], self.vocab_start
        )
        ex.launch(("sum", i, b), "all_reduce", stats, async_op=False)
        loss, r = ex.run(("H3", i, b), S.seg_head_loss, stats, self.denom)
        self.head_acts[b] = HeadActs(e=e, r=r, idx=idx, in_shard=ins, h=hh, rstd=rstd)
        if sp:
            self.head_n[b] = n_all
        else:
            self.xs[i] = n_all
        return loss

    def _head_dgrad(self, b: int, *, sp: bool = False, cols: int = 1):
        """Cross-entropy and LM-head backward to dn (kept; partial over ranks; ``cols``
        K > 1: its column chunks, chunk 0 computed), after the deferred weight gradient.
        Returns (dn, dl_all) (see segments.seg_head_dgrad)."""
        a = self.head_acts[b]
        i = self.head.index
        return self.ex.run(
            ("HD", i, b), S.seg_head_dgrad, a.e, a.r, a.idx, a.in_shard, self.head.weights[1],
            self.denom, None if sp else self.rows[b], None if sp else self.gs.get(i), cols,
            pre=self._take_pre(b),
        )  # fmt: skip

    def finish(self) -> torch.Tensor:
        if self.lanes:
            self.ex.join_lanes()
        return torch.stack(self.losses).sum()
