"""What the Triton kernels share (reference_model/triton_launch.py): the kernel-or-aten
choice per device with its self-check, and the launch through a kept launcher, which
takes every kernel parameter in the kernel's order. Fakes stand for Triton here, so
these run without it (CI installs none); the last test holds each real kernel's
parameter list to what its module passes (skipped without Triton)."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")

from domino_prof.reference_model import triton_launch as TL  # noqa: E402

CUDA = types.SimpleNamespace(type="cuda", index=3)  # stands for a CUDA device
CPU = torch.device("cpu")


def _module(available=True, why=None):
    calls = []

    def self_check(device):
        calls.append(device)
        return why

    return types.SimpleNamespace(available=lambda: available, self_check=self_check), calls


def test_choose_by_kind_and_device(capsys):
    """auto: the kernel on CUDA only, after its self-check; triton: anywhere (no check off
    CUDA); aten: never; each device type decided once."""
    mod, calls = _module()
    cache: dict = {}
    assert TL.choose(cache, "auto", CPU, mod, "x", "aten's x") == "aten"
    assert TL.choose(cache, "auto", CUDA, mod, "x", "aten's x") == "triton"
    assert TL.choose(cache, "auto", CUDA, mod, "x", "aten's x") == "triton"
    assert calls == [CUDA]  # checked once
    assert TL.choose({}, "triton", CPU, mod, "x", "aten's x") == "triton"
    assert calls == [CUDA]
    assert TL.choose({}, "aten", CUDA, mod, "x", "aten's x") == "aten"
    nomod, _ = _module(available=False)
    assert TL.choose({}, "triton", CUDA, nomod, "x", "aten's x") == "aten"  # no Triton
    assert capsys.readouterr().err == ""


def test_a_kernel_failing_its_check_falls_back_with_one_warning(capsys):
    mod, calls = _module(why="RuntimeError: no PTX")
    cache: dict = {}
    for _ in range(2):
        assert TL.choose(cache, "auto", CUDA, mod, "norm", "aten's add and norm") == "aten"
    assert len(calls) == 1
    assert capsys.readouterr().err == (
        "warning: the Triton norm kernel cannot serve here (RuntimeError: no PTX); using "
        "aten's add and norm\n")


class _Jit:
    """A stand-in for a @triton.jit kernel: records the JIT call; what it returns can be
    indexed by a grid, as Triton's compiled kernel gives its launcher."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        def call(*pos, **kw):
            self.calls.append((grid, pos, kw))
            return {(7, 1, 1): "launcher"}

        return call


def test_launch_compiles_once_then_uses_the_kept_launcher(monkeypatch):
    """The first call goes through the JIT (constexprs and options as keywords) and keeps
    the launcher, indexed by the grid padded to 3-D, under the key; the next call with the
    key launches it with every parameter positionally, constexprs last in their order, on
    the current stream of the tensors' device. Off CUDA nothing is kept."""
    jit = _Jit()
    launchers: dict = {}
    pos, consts = ("a", "b", 5), {"BLOCK": 64, "ADD": True}
    TL.launch(launchers, lambda: jit, (7,), "k", pos, consts, CUDA, num_warps=4)
    assert jit.calls == [((7,), pos, {"BLOCK": 64, "ADD": True, "num_warps": 4})]
    assert launchers == {"k": "launcher"}
    ran = []
    launchers["k"] = lambda *args, stream: ran.append((args, stream))
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda i: 1000 + i, raising=False)
    TL.launch(launchers, lambda: jit, (7,), "k", pos, consts, CUDA, num_warps=4)
    assert ran == [(("a", "b", 5, 64, True), 1003)] and len(jit.calls) == 1
    cpu_kept: dict = {}
    TL.launch(cpu_kept, lambda: jit, (7,), "k", pos, consts, CPU)
    assert cpu_kept == {} and len(jit.calls) == 2


def test_available_is_whether_the_kernel_builds():
    def broken():
        raise ImportError("No module named 'triton'")

    assert TL.available(broken) is False
    assert TL.available(lambda: object()) is True


@pytest.mark.parametrize("name", ["rope_kernel", "norm_kernel"])
def test_each_kernel_passes_its_parameters_in_the_kernel_order(name, monkeypatch):
    """The positional arguments and constexprs a module hands to launch() are the real
    kernel's parameters, in order: so the kept launcher gets them all (a launcher given
    fewer refused the call on the H100 of 2026-12-08: "takes exactly 30 arguments (27
    given)")."""
    pytest.importorskip("triton")
    import importlib

    mod = importlib.import_module(f"domino_prof.reference_model.{name}")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    mod._kernel.cache_clear()
    names = list(mod._kernel().arg_names)
    mod._kernel.cache_clear()
    seen = {}

    def fake_launch(launchers, kernel, grid, key, pos, consts, device, **jit):
        seen.update(n=len(pos), consts=list(consts))

    monkeypatch.setattr(TL, "launch", fake_launch)
    if name == "rope_kernel":
        x = torch.randn(1, 4, 3, 8)
        mod.rotate(x, None, torch.randn(4, 4, 2), torch.empty_like(x))
    else:
        h = torch.randn(3, 24)
        mod.add_rms_norm(h, torch.randn(3, 24), torch.randn(24), 1e-5)
    assert seen["n"] + len(seen["consts"]) == len(names)
    assert seen["consts"] == names[seen["n"]:]


def test_switch_reads_its_knob_until_set(monkeypatch):
    """A Switch follows its environment reader until a kind is set, drops its per-device
    decisions whenever the kind changes, and refuses a kind it does not know. Once a
    device type is decided, asking again reads no environment (a step asks per norm)."""
    env, reads, chosen = ["aten"], [], []

    def read():
        reads.append(1)
        return env[0]

    def fake_choose(cache, kind, device, *a):
        chosen.append(kind)
        cache[device.type] = kind != "aten"
        return "triton" if cache[device.type] else "aten"

    sw = TL.Switch(("auto", "aten", "triton"), read, "types", "x", "aten's x")
    monkeypatch.setattr(TL, "choose", fake_choose)
    assert sw.kernel(CPU) == "aten"
    env[0] = "triton"
    assert sw.kernel(CPU) == "aten"  # decided once per device type
    assert (chosen, len(reads)) == (["aten"], 1)
    sw.set("auto")
    assert sw.kernel(CPU) == "triton" and chosen[-1] == "auto"
    sw.set(None)
    assert sw.kernel(CPU) == "triton" and chosen[-1] == "triton"  # the environment's again
    assert len(reads) == 2
    with pytest.raises(ValueError, match=r"x kernel must be one of \('auto', 'aten', 'triton'\)"):
        sw.set("fused")


@pytest.mark.parametrize("knob", ["ROPE", "NORM"])
def test_environment_knob(knob, monkeypatch):
    """DOMINO_PROF_ROPE and DOMINO_PROF_NORM are read until set_rope / set_norm is called
    (and again after set(None)); a bad value is one line at validation
    (config._env_choice, as the other knobs), not a rank's traceback."""
    from domino_prof.errors import ConfigError
    from domino_prof.reference_model import units
    from domino_prof.reference_model.config import RunConfig, tiny

    set_kind = {"ROPE": units.set_rope, "NORM": units.set_norm}[knob]
    kernel = {"ROPE": units.rope_kernel, "NORM": units.norm_kernel}[knob]
    set_kind("triton")
    set_kind(None)
    try:
        monkeypatch.setenv(f"DOMINO_PROF_{knob}", "aten")
        assert kernel(torch.device("cuda")) == "aten"  # no kernel, no check made
        monkeypatch.setenv(f"DOMINO_PROF_{knob}", "fused")
        with pytest.raises(ConfigError, match=rf"^DOMINO_PROF_{knob}='fused': give auto or "
                                              r"aten or triton$"):  # fmt: skip
            RunConfig(model=tiny()).validate()
    finally:
        set_kind(None)
