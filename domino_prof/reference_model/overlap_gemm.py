"""``--overlap-gemm``: which GEMM kernels the segments issued beside a collective use.

``cublas`` (the default): torch's, everywhere. ``triton``: the segments issued while an
async collective is in flight (the same rule as ``--sm-carveout``'s ``overlap`` scope,
carveout.py) run the GEMMs that ``triton_mm.CONFIGS`` has a tile for as that module's
non-persistent Triton kernel; every other GEMM, and every GEMM of a segment issued with
nothing in flight, stays on cuBLAS. Why: triton_mm.py's docstring (cuBLAS's clustered
persistent kernels run a second wave on the SMs a collective leaves).

``triton-covered``: the same tiles, but only for the GEMMs the collectives in flight are
expected to still cover. ``triton`` measured (reports/emulated-h200-2026-12-04): the tax
fell 5.1 ms a step, but the tiles' alone penalty rose 4.5 ms, because a segment issued
beside a collective usually outlasts it (a backward segment is ~2x its all-reduce) and
its later GEMMs run alone, on the slower tile. Here each launched collective brings its
expected duration (the comm's ``expected_ns``: the emulator's own time model; a comm
without one, e.g. real NCCL, counts as covering its whole wait, which is ``triton``),
every GEMM issued while one is open spends its expected time from it (``2MNK`` at
``BESIDE_FLOPS``, whether it runs on a tile or on cuBLAS: both take the comm's time), and
a GEMM takes its tile only while at least half of its expected time is still covered.
The model counts GEMMs only (attention and the element-wise kernels between them take
comm time too, so it errs toward a tile); decided on the host at issue (a captured
graph keeps what was decided at capture).

CUDA only, eager or with CUDA graphs (a captured segment keeps the kernels chosen at
capture); not with ``--compile``, where inductor owns the GEMMs (the config refuses it).
"""

from __future__ import annotations

import os

from domino_prof.reference_model.config import OVERLAP_GEMMS as KINDS  # noqa: F401


# The expected rate of a GEMM beside the emulated all-reduce, FLOP/s: cuBLAS at the
# headline shard's shapes, bench_overlap_gemm.json of 2026-12-04 (one H200): qkv 375,
# wo 333, w13 404, w2 437, w13.wgrad 466 TFLOP/s (the head's 750 is an outlier of size).
BESIDE_FLOPS = 4.0e14


class OverlapGemm:
    """One runner's switch: ``segment(in_flight)`` before each issued segment (eager or
    captured) puts ``gemm`` in force for a segment beside a collective and torch's
    otherwise; the first segment sets the state explicitly. ``counts`` = (segments issued
    with it on, segments issued). ``gemm``: a callable as ``units.set_gemm_beside``
    takes (default: ``triton_mm.beside``); ``setter``: where it is put in force
    (default: ``units.set_gemm_beside``; tests: a recorder)."""

    def __init__(self, gemm=None, setter=None, covered: bool = False,
                 flops: float = BESIDE_FLOPS) -> None:  # fmt: skip
        self._gemm, self._setter = gemm, setter
        self._on: bool | None = None
        self.on_segments = 0
        self.segments = 0
        # triton-covered (module doc): per open collective (its handle's id), the ns it
        # is still expected to run, in launch order (they run one after another on the
        # comm stream); None: unknown, covers until waited for
        self.covered, self._flops = covered, flops
        self._left: dict[int, float | None] = {}
        self.tiled = 0  # covered mode: GEMMs put on a tile / seen while covered
        self.seen = 0

    def _turn(self, on: bool) -> None:
        if on == self._on:
            return
        if self._setter is None:
            from domino_prof.reference_model import units

            self._setter = units.set_gemm_beside
        if on and self._gemm is None:
            from domino_prof.reference_model import triton_mm

            self._gemm = triton_mm.beside
        self._setter((self._covered_gemm if self.covered else self._gemm) if on else None)
        self._on = on

    # -- triton-covered: the collectives' expected time --------------------------------
    def launched(self, key, ns: float | None) -> None:
        """A collective was launched async (``key``: its handle's id), expected to take
        ``ns`` (None: unknown)."""
        if self.covered:
            self._left[key] = None if ns is None else float(ns)

    def waited(self, key) -> None:
        self._left.pop(key, None)

    def reset(self) -> None:
        """A step starts: nothing is in flight."""
        self._left.clear()

    def cover(self) -> float:
        """ns the open collectives are still expected to run (inf: one is unknown)."""
        left = self._left.values()
        return float("inf") if None in left else sum(left)

    def _spend(self, ns: float) -> None:
        for k, v in self._left.items():  # the earliest launched runs first
            if v is None or ns <= 0:
                return
            used = min(v, ns)
            self._left[k] = v - used
            ns -= used

    def _covered_gemm(self, a, b, out, accumulate):
        cover = self.cover()
        if cover <= 0:
            return None
        cost = 2.0 * a.shape[0] * a.shape[1] * b.shape[1] / self._flops * 1e9  # ns
        self.seen += 1
        r = self._gemm(a, b, out, accumulate) if cover >= cost / 2 else None
        self.tiled += r is not None
        self._spend(cost)
        return r

    def segment(self, in_flight: bool) -> None:
        on = bool(in_flight) and (not self.covered or self.cover() > 0)
        self.segments += 1
        self.on_segments += on
        self._turn(on)

    def off(self) -> None:
        """torch's GEMM again (a runner that is done: the next mode's starts clean)."""
        self._turn(False)

    @property
    def counts(self) -> tuple[int, int]:
        return self.on_segments, self.segments


def overlap_gemm_of(cfg, device) -> OverlapGemm | None:
    """The runner's switch for a ``RunConfig`` (None: ``cublas``, or not CUDA)."""
    kind = getattr(cfg, "overlap_gemm", "cublas")
    if kind == "cublas" or getattr(device, "type", str(device)) != "cuda":
        return None
    # DOMINO_PROF_BESIDE_FLOPS: a diagnostic for A/B runs of triton-covered's time model
    # (as DOMINO_PROF_EMULATE_LAUNCH is for the emulator's launch path), not a knob
    flops = float(os.environ.get("DOMINO_PROF_BESIDE_FLOPS", BESIDE_FLOPS))
    return OverlapGemm(covered=kind == "triton-covered", flops=flops)
