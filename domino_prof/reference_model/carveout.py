"""``--sm-carveout N``: the GEMMs that run beside a collective leave N SMs free for it
(without it, ``--carveout-auto`` picks one for domino-sp alone: :func:`auto_carveout`).

Why: cuBLAS's large GEMMs at the headline shape launch a one-wave grid of 120-132 CTAs
(``nvjet_sm90_*`` with grid 132 on the H200's 132 SMs). A collective kernel holding 24
SMs leaves them 108, so the last CTAs run as a second wave and the GEMM takes 1.6-1.9x
as long (emulated TP 8, reports/emulator-fidelity/; the real 2xH200 fixture's GEMMs lose
the same beside NCCL's kernel). A GEMM told to target 132 − N SMs runs one wave on the
SMs left and loses only the SMs' share.

How, in torch: ``torch._C._set_sm_carveout_experimental(N)`` is read on the **cuBLASLt**
path only (``CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET``); torch's default BLAS path for a
bf16 ``mm`` is cuBLAS, which ignores it. That is why the first measurement of this knob
(2026-12-03, reports/emulated-h200-fidelity-2026-12-03/tune/) changed nothing: so the
carveout here always comes with ``torch.backends.cuda.preferred_blas_library("cublaslt")``,
and the library torch had is restored wherever the carveout is off.

Scope (``--carveout-scope``):

* ``overlap`` (default): only the segments issued while an async collective is in flight
  (launched, not yet waited for: domino's overlapped compute). A synchronous schedule (tp)
  never has one in flight, so its GEMMs are untouched, and a GEMM that runs alone keeps
  every SM. The segment is the unit: a segment that starts beside a collective keeps the
  carveout for its later GEMMs too, although the collective may have ended by then.
* ``fwd``: as ``overlap``, in the forward only (the segments a schedule issues in its
  forward phase, ``StepBase.at``); the backward's GEMMs keep every SM. Built to test
  whether domino-sp's compute-bound backward loses more to the narrower GEMMs than its
  side-stream chain gains; measured (one H100, emulated TP 8, copy engines, 16 SMs,
  reports/emulated-h100-2026-12-06c): no, domino-sp 78.8-79.2 ms against 76.1 with
  ``overlap``; domino 83.4-84.2 against 86.0 (and about 82 with no carveout).
* ``bwd``: as ``overlap``, in the backward only; the forward's GEMMs keep every SM. Built
  for domino-sp with ``--sp-residual fold`` (one H100, emulated TP 8, 24 SMs,
  reports/emulated-h100-2026-12-07c/call1): the carveout took its backward from 49.8 to
  48.9-49.2 ms a profiled step and its forward from 27.4 to 27.7-28.0 (the forward's
  two streams are both full; its chain waited longer for the narrower GEMMs).
* ``all``: every GEMM of the process, set once before any runner is built.

Under CUDA graphs the carveout of a segment is the one in force when it was captured
(the kernel and its grid are in the graph); eager, when its GEMMs are issued.

Measured (reports/emulated-h200-2026-12-03b): it does not pay, domino 84.2 -> 86.2 ms.
That README's reasons "cuBLASLt's kernels are slower alone" and the half-M GEMM figures
were host time of the events method; kernel timing (benchmarks/bench_carveout.py
--timing kernel, reports/emulated-h200-2026-12-04) shows cuBLASLt and cuBLAS run the
same kernels at the same speed alone. What costs beside the collective is that cuBLAS's
persistent kernels run in clusters, which must fit in one GPC's free SMs (triton_mm.py).
"""

from __future__ import annotations

SCOPES = ("overlap", "fwd", "bwd", "all")


class TorchBlas:
    """The two torch knobs, set together (the carveout is read on the cuBLASLt path)."""

    def __init__(self, torch_module=None) -> None:
        if torch_module is None:
            import torch as torch_module
        self.torch = torch_module
        self.default = torch_module.backends.cuda.preferred_blas_library()

    def set(self, sms: int | None) -> None:
        t = self.torch
        if sms is None:
            t._C._set_sm_carveout_experimental(None)
            t.backends.cuda.preferred_blas_library(self.default)
        else:
            t.backends.cuda.preferred_blas_library("cublaslt")
            t._C._set_sm_carveout_experimental(sms)


class Carveout:
    """The carveout of one runner: ``segment(in_flight, phase)`` before each segment is
    issued (eager or captured) turns it on for a segment issued beside a collective, off
    otherwise (scope ``overlap``; ``fwd`` / ``bwd``: and only in that phase); scope ``all``
    is on for every segment. The first segment sets the state explicitly, so a runner
    starts from its own scope whatever the previous mode's runner left.
    ``counts`` = (segments issued with it on, segments issued), for the run's record and
    the tests. ``blas``: anything with ``set(sms | None)`` (tests: a recorder)."""

    def __init__(self, sms: int, scope: str = "overlap", blas=None) -> None:
        if scope not in SCOPES:
            raise ValueError(f"carveout scope {scope!r}: one of {', '.join(SCOPES)}")
        if sms < 0:
            raise ValueError(f"carveout {sms} SMs: must be >= 0")
        self.sms, self.scope = sms, scope
        self._blas = blas
        self._on: bool | None = None  # None: not set by this object yet
        self.on_segments = 0
        self.segments = 0
        self.auto = False  # set by auto_carveout (--carveout-auto), for the run's record

    @property
    def blas(self):
        if self._blas is None:
            self._blas = TorchBlas()
        return self._blas

    def _turn(self, on: bool) -> None:
        if on != self._on:
            self.blas.set(self.sms if on else None)
            self._on = on

    def segment(self, in_flight: bool, phase: str | None = None) -> None:
        """A segment is about to be issued; ``in_flight``: a collective runs beside it;
        ``phase``: the schedule's phase it belongs to ("fwd", "bwd"; None: not known)."""
        if self.scope == "all":
            on = True
        else:
            on = bool(in_flight) and (self.scope == "overlap" or phase == self.scope)
        self.segments += 1
        self.on_segments += on
        self._turn(on)

    def off(self) -> None:
        """Torch's state back to no carveout (the end of a step), if this object set one."""
        if self._on:
            self._turn(False)

    @property
    def counts(self) -> tuple[int, int]:
        return self.on_segments, self.segments


def carveout_of(cfg, device, *, spec=None, comm=None, dtype=None) -> Carveout | None:
    """The runner's carveout for a ``RunConfig`` (None: not CUDA, where the config refuses
    ``--sm-carveout`` and a test's CPU runner has none). ``--sm-carveout N``: N SMs in
    ``--carveout-scope`` for every mode. Without it, :func:`auto_carveout` for the mode's
    schedule ``spec``, its backward's ``comm`` and the model's ``dtype``."""
    if getattr(device, "type", str(device)) != "cuda":
        return None
    sms = getattr(cfg, "sm_carveout", None)
    if sms is not None:
        return Carveout(sms, getattr(cfg, "carveout_scope", "overlap"))
    return auto_carveout(cfg, spec, comm, dtype)


# --carveout-auto's scope: the backward's GEMMs beside a collective (module doc, ``bwd``)
AUTO_SCOPE = "bwd"


def auto_carveout(cfg, spec, comm, dtype, blas=None) -> Carveout | None:
    """``--carveout-auto`` (the default; ``--sm-carveout N`` overrides it): a micro-batched
    sequence-parallel schedule (domino-sp) whose backward's collectives are the emulated SM
    stand-in gets a carveout of the stand-in's CTAs (``EmulatedComm.sm_ctas``: the
    profile's 24 at TP 8, or ``--comm-ctas``) in scope ``bwd``; every other case none.

    Why only there (one H100, emulated TP 8, headline shape, --cuda-graphs,
    reports/emulated-h100-2026-12-07c/call2, two runs each): domino-sp 77.17 / 76.74 ->
    75.82 / 75.46 ms with 24 SMs in ``bwd`` (76.25 in ``overlap``), while domino lost
    88.5 -> 91.1 ms to it (as to every scope before: 2.6-3.9 ms). It costs llama3-8b's
    domino-sp (call4: 130.5-132.0 -> 133.6-134.6 ms): the default is the headline's, and
    ``tune --grid carveout_auto=on,off`` weighs it for a model. Not for real collectives:
    NCCL picks its channels per call, and no multi-GPU machine has measured a carveout
    (kinds with 2+ GPUs withheld); not for copy engines (no CTA held while data moves) nor
    for a mode that skips its collectives (nothing beside the GEMMs).

    And with CUDA graphs only (``cfg.cuda_graphs``): an eager step issues every GEMM's host
    path each step, and the carveout's cuBLASLt path and its switches at segment edges
    cost an eager domino-sp more host time than its GEMMs gain. One H100, headline,
    eager, the same runner with and without it alternating step by step
    (benchmarks/bench_carveout_eager.py, 14 pairs, reports/emulated-h100-2026-12-07f):
    wall 81.14 -> 79.84 ms without (pair ratio 0.959 / 0.987 / 1.021), host issue
    75.88 -> 72.66 (0.969); eager domino-sp is host-bound there."""
    if not getattr(cfg, "carveout_auto", False) or spec is None:
        return None
    if not getattr(cfg, "cuda_graphs", False):
        return None
    if not (spec.micro_batched and spec.sequence_parallel):
        return None
    ctas = getattr(comm, "sm_ctas", None)
    n = ctas(dtype) if ctas is not None else None
    if not n:
        return None
    if blas is None:
        import torch

        if not hasattr(torch._C, "_set_sm_carveout_experimental"):
            return None  # this torch has no carveout (--sm-carveout N says so in one line)
    c = Carveout(n, AUTO_SCOPE, blas=blas)
    c.auto = True
    return c
