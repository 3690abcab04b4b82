"""``--overlap-gemm``: which GEMM kernels the segments issued beside a collective use.

``cublas`` (the default): torch's, everywhere. ``triton``: the segments issued while an
async collective is in flight (the same rule as ``--sm-carveout``'s ``overlap`` scope,
carveout.py) run the GEMMs that ``triton_mm.CONFIGS`` has a tile for as that module's
non-persistent Triton kernel; every other GEMM, and every GEMM of a segment issued with
nothing in flight, stays on cuBLAS. Why: triton_mm.py's docstring (cuBLAS's clustered
persistent kernels run a second wave on the SMs a collective leaves).

CUDA only, eager or with CUDA graphs (a captured segment keeps the kernels chosen at
capture); not with ``--compile``, where inductor owns the GEMMs (the config refuses it).
"""

from __future__ import annotations

from domino_prof.reference_model.config import OVERLAP_GEMMS as KINDS  # noqa: F401


class OverlapGemm:
    """One runner's switch: ``segment(in_flight)`` before each issued segment (eager or
    captured) puts ``gemm`` in force for a segment beside a collective and torch's
    otherwise; the first segment sets the state explicitly. ``counts`` = (segments issued
    with it on, segments issued). ``gemm``: a callable as ``units.set_gemm_beside``
    takes (default: ``triton_mm.beside``); ``setter``: where it is put in force
    (default: ``units.set_gemm_beside``; tests: a recorder)."""

    def __init__(self, gemm=None, setter=None) -> None:
        self._gemm, self._setter = gemm, setter
        self._on: bool | None = None
        self.on_segments = 0
        self.segments = 0

    def _turn(self, on: bool) -> None:
        if on == self._on:
            return
        if self._setter is None:
            from domino_prof.reference_model import units

            self._setter = units.set_gemm_beside
        if on and self._gemm is None:
            from domino_prof.reference_model import triton_mm

            self._gemm = triton_mm.beside
        self._setter(self._gemm if on else None)
        self._on = on

    def segment(self, in_flight: bool) -> None:
        on = bool(in_flight)
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
    return OverlapGemm()
