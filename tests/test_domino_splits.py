"""Issue 34's schedule knobs: Domino's column split of the row-parallel / input-gradient
GEMMs (``--col-splits K``), uneven micro-batches (``--split-sizes``), and the comm knobs'
plumbing (``--comm-ctas``, ``--sm-carveout``).

Gradients against the unsharded model at tp 2 on gloo (the cases run in the shared 2-rank
job, tests/gloo_cases.py ``SPLIT_CASES``), fp32, 1e-5 relative per parameter: the column
split alone (splits 1, K = 2 and 4), with the batch split (K = 2, K = 4 under the CPU
emulation of CUDA graphs), uneven sizes for domino (3+1, 1+3 with graphs, 1+2+1 with K = 2)
and domino-sp. In one process: the executed order of a column-split step against the order
written out here, the tensors each chunk's all-reduce gets, and the config's one-line errors.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
import gloo_cases

from domino_prof.errors import ConfigError
from domino_prof.reference_model.config import RunConfig, tiny

TOL = 1e-5


def test_col_split_and_uneven_micro_batches_match_unsharded_model():
    from domino_prof.reference_model.model import Transformer

    with torch.device("meta"):
        n_params = len(dict(Transformer(tiny()).named_parameters()))
    res = gloo_cases.results(2)
    assert len(res) == 2
    for rank, out in ((r, o["splits"]) for r, o in res.items()):
        assert [name for name, _ in gloo_cases.SPLIT_CASES] == [k for k in out if k != "ref_loss"]
        for name, _ in gloo_cases.SPLIT_CASES:
            loss, worst, worst_name, n = out[name]
            assert n == n_params
            assert abs(loss - out["ref_loss"]) <= TOL * abs(out["ref_loss"]), (rank, name, loss)
            assert worst <= TOL, f"rank {rank} {name}: {worst_name} rel err {worst:.2e}"


# --- the executed order of a column-split step ---------------------------------------------
def declared_events(n: int, K: int, n_layers: int) -> list:
    """domino's order with n micro-batches and K column chunks, written out independently
    of schedules.domino: each chunk's all-reduce launched right after its GEMM, all K
    waited for right before the next unit of the micro-batch."""
    L = H = 2 * n_layers  # sub-layers 0 .. L-1; the head is unit L

    def keys(name, u, b):
        return [(name, u, b)] if K == 1 else [(name, u, b, k) for k in range(K)]

    def waits(name, u, b):
        return [("wait", k) for k in keys(name, u, b)]

    def segment(first, chunk, coll, u, b):  # the first GEMM chunk ends `first`
        ev = [("run", (first, u, b))]
        for k, key in enumerate(keys(coll, u, b)):
            if k:
                ev.append(("run", (chunk, u, b, k)))
            ev.append(("launch", key))
        return ev

    ev = [("run", ("emb", 0, b)) for b in range(n)]
    for u in range(L):
        for b in range(n):
            ev += waits("y", u - 1, b) if u else []
            ev += segment("F", "Y", "y", u, b)
    for b in range(n):
        ev += waits("y", L - 1, b)
        ev += [("run", ("H1", H, b)), ("launch", ("max", H, b)), ("run", ("H2", H, b)),
               ("launch", ("sum", H, b)), ("run", ("H3", H, b))]  # fmt: skip
    for u in range(H, -2, -1):
        for b in reversed(range(n)):
            ev += [] if u == H else waits("dn", u + 1, b)
            if b == n - 1 and u < H:  # the unit above's deferred weight gradients first
                ev.append(("run", ("W", u + 1, 0)))
            if u == -1:
                ev.append(("run", ("E", 0, b)))
            else:
                ev += segment("HD" if u == H else "D", "DN", "dn", u, b)
    return ev


class RecordingComm:
    """SkipComm(2, 1) that keeps (shape, contiguous, same storage as the last) of every
    all-reduce's tensor."""

    def __init__(self):
        from domino_prof.reference_model.comm import SkipComm

        self.inner = SkipComm(2, 1)
        self.size, self.rank, self.label = 2, 1, "skip"
        self.emulated, self.meaningful_numerics = False, False
        self.seen: list = []

    def all_reduce(self, t, *, async_op, op="sum"):
        self.seen.append((tuple(t.shape), t.is_contiguous(), t.untyped_storage().data_ptr()))
        return self.inner.all_reduce(t, async_op=async_op, op=op)

    def all_gather(self, out, t, *, async_op):
        return self.inner.all_gather(out, t, async_op=async_op)

    def reduce_scatter(self, out, t, *, async_op):
        return self.inner.reduce_scatter(out, t, async_op=async_op)


@pytest.mark.parametrize(("sizes", "K"), [((1, 1), 1), ((1,), 2), ((1, 1), 4), ((3, 1), 2)])
def test_column_split_runs_in_declared_order_on_contiguous_chunks(sizes, K):
    from domino_prof.reference_model.parallel import shard_model
    from domino_prof.reference_model.schedule import StepRunner
    from domino_prof.reference_model.verify import batch

    cfg, S = tiny(), 8
    inp, tgt = batch(cfg, mbs=sum(sizes), seq=S, seed=1, device="cpu")
    comm = RecordingComm()
    runner = StepRunner(shard_model(cfg, comm, seed=1), comm, schedule="domino",
                        splits=len(sizes), split_sizes=sizes, col_splits=K, record=True)  # fmt: skip
    runner.step(inp, tgt)
    want = declared_events(len(sizes), K, cfg.n_layers)
    assert runner.events == want
    # per micro-batch b: 4 sub-layers forward + 4 and the head backward, K chunks each,
    # and the cross-entropy's two [T] / [2, T] all-reduces
    n = len(sizes)
    assert len(comm.seen) == n * (9 * K + 2)
    big = [(s, c, p) for s, c, p in comm.seen if len(s) == 2 and s[1] == cfg.dim // K]
    assert len(big) == n * 9 * K
    assert all(c for _, c, _ in big)  # every chunk's tensor contiguous, as all-reduce needs
    assert sorted({s[0] for s, _, _ in big}) == sorted({b * S for b in sizes})
    if K > 1:  # the K chunks of one partial sum are slots of one buffer, not K copies
        for i in range(0, len(big), K):
            assert len({p for _, _, p in big[i : i + K]}) == 1


def test_col_split_refused_where_it_does_not_apply():
    from domino_prof.reference_model.comm import SkipComm
    from domino_prof.reference_model.parallel import shard_model
    from domino_prof.reference_model.schedule import StepRunner

    comm = SkipComm(2, 0)
    model = shard_model(tiny(), comm, seed=1)
    with pytest.raises(ValueError, match="takes no column split"):
        StepRunner(model, comm, schedule="domino-sp", splits=2, col_splits=2)
    with pytest.raises(ValueError, match="does not divide dim 256"):
        StepRunner(model, comm, schedule="domino", splits=2, col_splits=3)


# --- the config ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"col_splits": 0}, "--col-splits must be >= 1, got 0"),
        ({"col_splits": 3}, "--col-splits 3 does not divide the tiny model's dim (256)"),
        ({"col_splits": 2, "modes": ("tp", "sp")}, "--col-splits 2 applies to the modes of the "
         "domino schedule (domino, domino-nocomm); --mode tp, sp takes none"),
        ({"splits": 1, "modes": ("domino",)}, "--splits must be >= 2 for domino (1 micro-batch "
         "cannot overlap, unless --col-splits >= 2)"),
        ({"splits": 1, "col_splits": 2, "modes": ("domino", "domino-sp")},
         "--splits must be >= 2 for domino-sp"),
        ({"mbs": 4, "split_sizes": (2, 1)}, "--split-sizes 2,1 sums to 3 sequences but --mbs is 4"),
        ({"mbs": 4, "split_sizes": (4, 0)}, "--split-sizes 4,0: every micro-batch needs >= 1"),
        ({"mbs": 4, "splits": 3, "split_sizes": (3, 1)}, "--split-sizes 3,1 gives 2 "
         "micro-batches but --splits is 3; drop --splits"),
        ({"mbs": 4, "split_sizes": (3, 1), "modes": ("tp", "sp")}, "--split-sizes applies to the "
         "micro-batched modes (domino, domino-nocomm, domino-sp, domino-sp-nocomm); --mode "
         "tp, sp takes one "
         "micro-batch"),
        ({"comm_ctas": 8}, "--comm-ctas sets the CTAs of NCCL's (or the emulated) collectives; "
         "--comm gloo has none"),
        ({"device": "cuda", "comm_ctas": 0}, "--comm-ctas must be >= 1, got 0"),
        ({"sm_carveout": 16}, "--sm-carveout needs --device cuda"),
        ({"device": "cuda", "sm_carveout": -1}, "--sm-carveout must be >= 0 SMs, got -1"),
        ({"device": "cuda", "sm_carveout": 8, "carveout_scope": "gemms"},
         "--carveout-scope must be one of overlap, fwd, bwd, all, got 'gemms'"),
    ],
)  # fmt: skip
def test_config_errors(kw, needle):
    import re

    with pytest.raises(ConfigError, match=re.escape(needle)):
        RunConfig(model=tiny(), **kw).validate()


def test_config_knobs_resolve_and_round_trip_through_run_json():
    from domino_prof.reference_model.config import parse_split_sizes

    # defaults: today's behaviour
    c = RunConfig(model=tiny()).validate()
    assert (c.splits, c.col_splits, c.split_sizes, c.comm_ctas, c.sm_carveout) == (
        2, 1, None, None, None)  # fmt: skip
    assert [c.col_splits_for(m) for m in c.modes] == [1] * len(c.modes)
    # the sizes set the micro-batches; col splits apply to domino only; --splits 1 with K
    c = RunConfig(model=tiny(), mbs=4, split_sizes=[1, 2, 1], col_splits=4).validate()
    assert (c.splits, c.split_sizes) == (3, (1, 2, 1))
    assert {m: (c.splits_for(m), c.col_splits_for(m), c.split_sizes_for(m)) for m in c.modes} == {
        "tp": (1, 1, None), "nocomm": (1, 1, None), "domino": (3, 4, (1, 2, 1)),
        "domino-nocomm": (3, 4, (1, 2, 1)), "sp": (1, 1, None), "domino-sp": (3, 1, (1, 2, 1)),
        "domino-sp-nocomm": (3, 1, (1, 2, 1))}  # fmt: skip
    assert RunConfig(model=tiny(), splits=1, col_splits=2, modes=("domino",)).validate()
    d = RunConfig(model=tiny(), device="cuda", comm="nccl", comm_ctas=8, sm_carveout=16,
                  mbs=4, split_sizes=(3, 1), col_splits=2).validate().to_dict()  # fmt: skip
    assert (d["comm_ctas"], d["sm_carveout"], d["split_sizes"], d["col_splits"]) == (
        8, 16, (3, 1), 2)  # fmt: skip
    import json

    back = RunConfig.from_dict(json.loads(json.dumps(d)))  # as run.json holds it
    assert back.split_sizes == (3, 1) and back.to_dict() == d
    old = {k: v for k, v in d.items()  # a run.json from before these knobs
           if k not in ("col_splits", "split_sizes", "comm_ctas", "sm_carveout")}  # fmt: skip
    assert RunConfig.from_dict(old).col_splits == 1
    assert parse_split_sizes("3,1") == (3, 1) and parse_split_sizes("") is None
    with pytest.raises(ConfigError, match=r"--split-sizes 3;1: not a comma-separated list"):
        parse_split_sizes("3;1")


def test_run_cli_knob_errors_are_one_line():
    from typer.testing import CliRunner

    from domino_prof.cli import app

    for args, needle in (
        (["--col-splits", "3"], "--col-splits 3 does not divide"),
        (["--split-sizes", "3,x", "--mbs", "4"], "--split-sizes 3,x: not a comma-separated"),
        (["--comm-ctas", "4"], "--comm gloo has none"),
        (["--sm-carveout", "4"], "--sm-carveout needs --device cuda"),
    ):
        r = CliRunner().invoke(app, ["run", "--device", "cpu", *args])
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and needle in lines[0], (args, r.stderr)


# --- the comm knobs' plumbing ----------------------------------------------------------------
def test_comm_ctas_and_sm_carveout_plumbing(monkeypatch):
    """NCCL: the options the group is created with; emulated: ``ctas=`` to EmulatedComm,
    only when set; the carveout call; each missing in this torch: one ConfigError line."""
    from domino_prof.reference_model import comm as comm_mod
    from domino_prof.reference_model import emulate, launcher, train

    class Options:  # ProcessGroupNCCL.Options' shape in torch 2.13 (its .pyi)
        def __init__(self):
            self.is_high_priority_stream = False
            self.config = SimpleNamespace(min_ctas=-1, max_ctas=-1, cga_cluster_size=-1)

    fake_dist = SimpleNamespace(ProcessGroupNCCL=SimpleNamespace(Options=Options))
    cfg = RunConfig(model=tiny(), device="cuda", comm="nccl", comm_ctas=8).validate()
    o = train.pg_options(cfg, fake_dist)
    assert (o.config.min_ctas, o.config.max_ctas, o.is_high_priority_stream) == (8, 8, True)
    base = RunConfig(model=tiny(), device="cuda", comm="nccl",
                     high_priority_comm=False).validate()  # fmt: skip
    assert train.pg_options(base, fake_dist) is None  # the library's defaults
    hp = RunConfig(model=tiny(), device="cuda", comm="nccl").validate()  # on by default on CUDA
    o = train.pg_options(hp, fake_dist)
    assert o.is_high_priority_stream and o.config.max_ctas == -1
    assert RunConfig(model=tiny(), device="cpu").validate().high_priority_comm is False

    from domino_prof.reference_model.carveout import carveout_of

    assert carveout_of(base, torch.device("cuda")) is None  # no --sm-carveout: none
    c = carveout_of(RunConfig(model=tiny(), device="cuda", sm_carveout=12,
                              carveout_scope="all").validate(), torch.device("cuda"))  # fmt: skip
    assert (c.sms, c.scope) == (12, "all")

    got = []

    def fake_emulated(profile, **kw):
        got.append(kw)
        return SimpleNamespace()

    monkeypatch.setattr(emulate, "EmulatedComm", fake_emulated)
    comm_mod.make_comm("process-group", size=2, emulate="p", device="cpu")
    comm_mod.make_comm("process-group", size=2, emulate="p", device="cpu", ctas=4)
    assert ["ctas" in g for g in got] == [False, True] and got[1]["ctas"] == 4

    # this torch (CPU) has no NCCL: --comm-ctas with nccl is one line
    with pytest.raises(ConfigError, match=r"--comm-ctas: torch .* offers no NCCL process-group "):
        if hasattr(torch.distributed, "ProcessGroupNCCL"):
            monkeypatch.delattr(torch.distributed, "ProcessGroupNCCL")
        launcher.check_torch_knobs(cfg)
    # an EmulatedComm without ctas (before its keyword lands): one line
    monkeypatch.setattr(emulate, "EmulatedComm", lambda profile, *, size, rank, device: None)
    em = SimpleNamespace(comm_ctas=4, emulated=True, sm_carveout=None)
    with pytest.raises(ConfigError, match=r"EmulatedComm has no ctas\); drop --comm-ctas"):
        launcher.check_torch_knobs(em)
    launcher.check_torch_knobs(SimpleNamespace(comm_ctas=None, emulated=False, sm_carveout=8))
    monkeypatch.delattr(torch._C, "_set_sm_carveout_experimental")
    with pytest.raises(ConfigError, match=r"has no torch._C._set_sm_carveout_experimental"):
        launcher.check_torch_knobs(SimpleNamespace(comm_ctas=None, emulated=False, sm_carveout=8))
