"""What the schedules' Triton kernels (rope_kernel.py, norm_kernel.py) share: whether
Triton imports, the choice of kernel or aten per device with its self-check, and the
launch through a kept launcher.

Launch cost: the first call of each argument signature launches through Triton's JIT
(compiling once) and keeps the compiled kernel's launcher; later calls with the same
signature launch it on the current stream's handle directly (no argument binding or
specialisation per call: the pattern of emulate.py's collectives). The signature (the
caller's ``key``) must hold everything Triton specialises on: the integer arguments'
values, the tensors' dtypes and their pointers' 16-byte alignment, and the grid. The kept
launcher takes every kernel parameter positionally, the constexprs too, in the kernel's
order: ``pos`` then ``consts`` (a launcher given fewer refused the call on an H100,
reports/emulated-h100-2026-12-08).
"""

from __future__ import annotations

import sys
from typing import Any, Callable


def available(kernel: Callable[[], Any]) -> bool:
    """Whether Triton imports here: ``kernel()`` (the module's cached maker) builds it."""
    try:
        kernel()
    except ImportError:
        return False
    return True


class Switch:
    """One kernel's process-wide setting (``units.set_rope`` / ``set_norm`` set it): the
    kind set, else its environment knob's (``env()``, read until one is set), and per
    device type whether the kernel serves (:func:`choose`). ``module``: the kernel's
    module's dotted name, imported when first asked (it imports Triton only to build)."""

    def __init__(self, kinds: tuple[str, ...], env: Callable[[], str], module: str,
                 what: str, instead: str) -> None:  # fmt: skip
        self.kinds, self.env, self.module = kinds, env, module
        self.what, self.instead = what, instead
        self.kind: str | None = None
        self.ok: dict[str, bool] = {}  # device type -> the kernel serves it

    def set(self, kind: str | None) -> None:
        """``kind`` from now on (None: the environment's again); a kind not in ``kinds`` is
        a ValueError naming them."""
        if kind is not None and kind not in self.kinds:
            raise ValueError(f"{self.what} kernel must be one of {self.kinds}, got {kind!r}")
        self.kind = kind
        self.ok.clear()

    def kernel(self, device) -> str:
        """``triton`` or ``aten`` on ``device``. Asked once per rotation or norm a step
        issues: after the first answer for a device type it is one dict lookup (no
        environment read, no import)."""
        ok = self.ok.get(device.type)
        if ok is None:
            import importlib

            kind = self.kind if self.kind is not None else self.env()
            return choose(self.ok, kind, device, importlib.import_module(self.module),
                          self.what, self.instead)  # fmt: skip
        return "triton" if ok else "aten"


def choose(cache: dict[str, bool], kind: str, device, module, what: str, instead: str) -> str:
    """``triton`` or ``aten`` for ``device``, decided once per device type into ``cache``:
    ``kind`` auto takes the kernel on CUDA, triton anywhere, aten nowhere; on CUDA the
    kernel must also pass ``module.self_check``, else one warning line (naming ``what``
    and the ``instead`` used) and aten."""
    key = device.type
    if key not in cache:
        want = kind == "triton" or (kind == "auto" and key == "cuda")
        if want:
            want = module.available()
            why = module.self_check(device) if want and key == "cuda" else None
            if why is not None:
                print(f"warning: the Triton {what} kernel cannot serve here ({why}); "
                      f"using {instead}", file=sys.stderr, flush=True)  # fmt: skip
                want = False
        cache[key] = want
    return "triton" if cache[key] else "aten"


def launch(launchers: dict, kernel: Callable[[], Any], grid: tuple, key: tuple, pos: tuple,
           consts: dict, device, **jit_options) -> None:  # fmt: skip
    """Run ``kernel()`` over ``grid`` with the positional arguments ``pos`` and the
    constexprs ``consts`` (in the kernel's order): through the launcher kept under ``key``
    in ``launchers`` where there is one, else through the JIT (``jit_options``: num_warps
    and the like), keeping its launcher on CUDA."""
    run = launchers.get(key)
    if run is not None:
        import torch

        run(*pos, *consts.values(), stream=torch._C._cuda_getCurrentRawStream(device.index))
        return
    compiled = kernel()[grid](*pos, **consts, **jit_options)
    if device.type == "cuda" and hasattr(compiled, "__getitem__"):
        try:
            launchers[key] = compiled[tuple(grid) + (1,) * (3 - len(grid))]
        except (TypeError, AttributeError, KeyError):  # another Triton's launcher: JIT always
            pass
