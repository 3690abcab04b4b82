"""`run --comm emulate` on CPU (CI has no GPU and no Triton): flag and profile validation
(one line, exit 2, before any process starts), the wiring of RunConfig -> build_runner ->
the Comm of each mode, run.json's comm block, the trace mark, and the label
"emulated comm (profile NAME)" flowing from a marked trace through analyze JSON, check
output (table, markdown, JUnit) and the report banner.

The plumbing test runs ``train.worker`` and ``runs.assemble`` in-process on CPU with a CPU
stand-in for ``emulate.EmulatedComm`` (the real one needs CUDA and Triton): the stand-in
is injected with monkeypatch where ``comm.make_comm`` imports it, so the real code path
decides which mode gets it, shards the model for R and marks the traces."""

from __future__ import annotations

import gzip
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from rundirs import write_run_dir
from typer.testing import CliRunner

from domino_prof.cli import app
from domino_prof.emulation import comm_marker, label, mark_trace_file
from domino_prof.errors import ConfigError
from domino_prof.reference_model.config import (
    MODES,
    RunConfig,
    comm_info,
    default_profile,
    needed_collectives,
    preset,
    tiny,
)

DATA = Path(__file__).parent / "data"
FIXTURE_DOMINO = DATA / "h200_llama3_3b_2layers_tp2" / "domino"
from test_output_errors import _one_line  # the one-line-error check, shared

runner = CliRunner()
LABEL2 = "emulated comm (profile h200-nvlink-tp2)"


def _cuda_cfg(**kw) -> RunConfig:
    d = dict(model=preset("llama3-8b"), tp=8, seq=4096, device="cuda", dtype="bfloat16",
             modes=MODES, comm="emulate")  # fmt: skip
    d.update(kw)
    return RunConfig(**d)


# --------------------------------------------------------------------------- config
def test_comm_default_keeps_todays_backends():
    assert RunConfig(model=tiny()).validate().comm == "gloo"
    c = _cuda_cfg(comm="auto").validate()
    assert (c.comm, c.comm_profile, c.world_size, c.emulated) == ("nccl", "", 8, False)
    # an older run.json's config (no comm key) reads as its backend
    old = RunConfig.from_dict({k: v for k, v in RunConfig(model=tiny()).to_dict().items()
                               if k not in ("comm", "comm_profile")})  # fmt: skip
    assert (old.comm, old.backend) == ("auto", "gloo")


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_emulate_defaults_to_the_shipped_profile_of_R(tp, monkeypatch):
    for v in ("DOMINO_PROF_CE_GBPS", "DOMINO_PROF_CE_PACE", "DOMINO_PROF_EMULATE_KERNEL",
              "DOMINO_PROF_EMULATE_TENSORS"):  # fmt: skip
        monkeypatch.delenv(v, raising=False)
    c = _cuda_cfg(tp=tp).validate()
    assert (c.comm, c.comm_profile, c.world_size) == ("emulate", f"h200-nvlink-tp{tp}", 1)
    info = comm_info(c)
    assert info == {"kind": "emulated", "profile": f"h200-nvlink-tp{tp}", "profile_file": None,
                    "label": f"emulated comm (profile h200-nvlink-tp{tp})", "ranks": tp,
                    "rank": 0, "kernel": "paced", "ctas": None, "ctas_scope": "all",
                    "engine": "sm", "tensors": "held"}  # fmt: skip
    monkeypatch.setenv("DOMINO_PROF_EMULATE_TENSORS", "record_stream")
    assert comm_info(c)["tensors"] == "record_stream"
    monkeypatch.setenv("DOMINO_PROF_EMULATE_TENSORS", "recorded")
    with pytest.raises(ConfigError, match="DOMINO_PROF_EMULATE_TENSORS='recorded': give held "
                                          "or record_stream"):  # fmt: skip
        comm_info(c)
    monkeypatch.delenv("DOMINO_PROF_EMULATE_TENSORS")
    assert info["label"] == label(f"h200-nvlink-tp{tp}")
    ce_info = comm_info(_cuda_cfg(tp=tp, comm_engine="ce").validate())
    assert (ce_info["engine"], ce_info["ce"]["bw_gbps"], ce_info["ce"]["pace"]) == ("ce", 330.0, "phase")


def test_no_shipped_profile_for_R_asks_for_comm_profile():
    with pytest.raises(ConfigError, match=r"no shipped comm profile for 16 ranks.*--comm-profile"):
        default_profile(16)


def test_a_profile_file_is_resolved_to_its_absolute_path(tmp_path, monkeypatch):
    src = Path(__file__).parents[1] / "domino_prof/emulation/profiles/h200-nvlink-tp4.json"
    doc = json.loads(src.read_text())
    doc["name"] = "my-cluster"
    (tmp_path / "p.json").write_text(json.dumps(doc))
    monkeypatch.chdir(tmp_path)
    c = _cuda_cfg(tp=4, comm_profile="p.json").validate()
    assert c.comm_profile == str(tmp_path / "p.json")
    info = comm_info(c)
    assert (info["profile"], info["profile_file"], info["label"]) == (
        "my-cluster", str(tmp_path / "p.json"), "emulated comm (profile my-cluster)")


def test_needed_collectives_follow_the_modes():
    c = _cuda_cfg(modes=("tp", "nocomm"))
    assert needed_collectives(c) == [("all_reduce", "bfloat16"), ("all_reduce", "float32")]
    assert needed_collectives(_cuda_cfg(modes=("nocomm",))) == []
    assert set(needed_collectives(_cuda_cfg(modes=("sp",)))) == {
        ("all_reduce", "bfloat16"), ("reduce_scatter", "bfloat16"), ("all_gather", "bfloat16"),
        ("all_reduce", "float32")}  # fmt: skip


def _profile(tmp_path: Path, entries: list[dict], name: str = "p.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"schema": "domino-prof/comm-profile", "version": 1,
                             "name": "t", "entries": entries}))  # fmt: skip
    return p


def _entry(**kw) -> dict:
    e = {"collective": "all_reduce", "ranks": 2, "dtype": "bfloat16", "alpha_us": 10.0,
         "algbw_GBps": 100.0, "ctas": 8, "algorithm": "ring/LL", "source": "test"}  # fmt: skip
    e.update(kw)
    return e


def test_a_profile_missing_a_collective_the_modes_need_is_one_line(tmp_path):
    p = _profile(tmp_path, [_entry(), _entry(dtype="float32")])
    _cuda_cfg(tp=2, modes=("tp", "domino"), comm_profile=str(p)).validate()  # enough
    with pytest.raises(ConfigError, match=r"has no reduce_scatter for R=2 dtype bfloat16"):
        _cuda_cfg(tp=2, modes=("sp",), comm_profile=str(p)).validate()


# --------------------------------------------------------------------------- CLI
@pytest.fixture
def one_gpu(monkeypatch):
    """A machine that says it has one CUDA GPU (nothing starts in these tests: each
    ends in a one-line error before the launcher)."""
    from domino_prof.reference_model import launcher

    monkeypatch.setattr(launcher, "_visible_gpus", lambda torch: 1)


def _cli(args, tmp_path):
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", *args, "--out", str(out)])
    return res, out


def test_fewer_gpus_than_tp_names_comm_emulate(tmp_path, one_gpu):
    res, out = _cli(["--device", "cuda", "--tp", "8"], tmp_path)
    line = _one_line(res)
    assert "--tp 8 needs 8 GPUs but 1 are visible" in line
    assert "--comm emulate" in line
    assert not out.exists()


def test_emulate_on_cpu_is_one_line(tmp_path):
    res, out = _cli(["--device", "cpu", "--comm", "emulate", "--tp", "2"], tmp_path)
    line = _one_line(res)
    assert "--comm emulate" in line and "--device cuda" in line
    assert not out.exists()


BAD = [
    ("missing", None, "no such comm profile file"),
    ("invalid-json", '{"schema": ', "invalid JSON at line 1"),
    ("unknown-collective", [_entry(collective="broadcast")], "unknown collective 'broadcast'"),
    ("zero-bandwidth", [_entry(algbw_GBps=0)], "'algbw_GBps' must be > 0, got 0"),
    ("negative-bandwidth", [_entry(algbw_GBps=-5.0)], "'algbw_GBps' must be > 0, got -5.0"),
    ("R-not-in-profile", [_entry(ranks=4), _entry(ranks=4, dtype="float32")],
     "has no entries for R=2 (it covers R=4)"),
]  # fmt: skip


@pytest.mark.parametrize("case,content,needle", BAD, ids=[b[0] for b in BAD])
def test_a_bad_profile_is_one_line_before_any_process(tmp_path, one_gpu, case, content, needle):
    p = tmp_path / f"{case}.json"
    if isinstance(content, str):
        p.write_text(content)
    elif content is not None:
        _profile(tmp_path, content, name=p.name)
    res, out = _cli(["--device", "cuda", "--comm", "emulate", "--tp", "2", "--comm-profile",
                     str(p)], tmp_path)  # fmt: skip
    line = _one_line(res)
    assert needle in line
    assert str(p) in line  # names the file
    assert not out.exists()  # nothing claimed, nothing started


def test_shipped_profile_without_R_is_one_line(tmp_path, one_gpu):
    res, _ = _cli(["--device", "cuda", "--comm", "emulate", "--tp", "4", "--comm-profile",
                   "h200-nvlink-tp2"], tmp_path)  # fmt: skip
    assert "comm profile 'h200-nvlink-tp2' has no entries for R=4 (it covers R=2)" in _one_line(res)


def test_an_unknown_profile_name_is_one_line(tmp_path, one_gpu):
    res, _ = _cli(["--device", "cuda", "--comm", "emulate", "--comm-profile", "h100-tp2"],
                  tmp_path)  # fmt: skip
    assert "h100-tp2: no such comm profile; pass a profile file or one of" in _one_line(res)


@pytest.mark.parametrize("args,needle", [
    (["--device", "cpu", "--comm-profile", "h200-nvlink-tp2"], "applies to --comm emulate only"),
    (["--device", "cpu", "--comm", "nccl"], "--comm nccl needs --device cuda"),
    (["--device", "cuda", "--comm", "gloo", "--tp", "1"], "--comm gloo runs on CPU tensors"),
    (["--device", "cpu", "--comm", "mpi"], "unknown --comm 'mpi'"),
    (["--device", "cuda", "--comm", "emulate", "--tp", "1"], "--comm emulate needs --tp >= 2"),
])  # fmt: skip
def test_comm_flag_mistakes_are_one_line(tmp_path, one_gpu, args, needle):
    res, out = _cli(args, tmp_path)
    assert needle in _one_line(res)
    assert not out.exists()


# --------------------------------------------------------------------------- plumbing
class CpuEmulatedComm:
    """CPU stand-in for ``emulate.EmulatedComm``: the same constructor and attributes,
    the collectives of ``SkipComm`` (values as meaningless as the real emulator's),
    except all-gather's slot before rank r, which the real kernel leaves as the buffer
    held it (docs/EMULATION.md section 2): NaN here, the worst such garbage."""

    made: list[CpuEmulatedComm] = []
    emulated = True
    meaningful_numerics = False

    def __init__(self, profile, *, size, rank=0, device=None, stream=None):
        from domino_prof.emulation import load_profile
        from domino_prof.reference_model.comm import SkipComm

        self.profile = load_profile(profile)
        self.size, self.rank, self.label = size, rank, self.profile.label
        self._skip = SkipComm(size, rank)
        self.calls: list[str] = []
        CpuEmulatedComm.made.append(self)

    def all_reduce(self, t, *, async_op, op="sum"):
        self.calls.append("all_reduce")
        return self._skip.all_reduce(t, async_op=async_op, op=op)

    def all_gather(self, out, t, *, async_op):
        self.calls.append("all_gather")
        self._skip.all_gather(out, t, async_op=async_op)
        n = t.shape[0]
        r = (self.rank - 1) % self.size
        out[r * n : (r + 1) * n] = float("nan")
        return None

    def reduce_scatter(self, out, t, *, async_op):
        self.calls.append("reduce_scatter")
        return self._skip.reduce_scatter(out, t, async_op=async_op)


@pytest.fixture(scope="module")
def emulated_run(tmp_path_factory):
    """``train.worker`` + ``runs.assemble`` of an emulated tp-2 run of every mode, on CPU
    with :class:`CpuEmulatedComm` in place of the GPU emulator (module doc)."""
    pytest.importorskip("torch")
    import torch.distributed as dist

    from domino_prof import runs
    from domino_prof.reference_model import emulate, schedule, train
    from domino_prof.reference_model.comm import SkipComm

    out = tmp_path_factory.mktemp("emu") / "run"
    out.mkdir()
    # validated as on CUDA, then run on CPU (validate refuses emulate on CPU)
    # (no high-priority stream: the CPU stand-in has no CUDA stream to give a priority)
    cfg = replace(RunConfig(model=tiny(), tp=2, modes=MODES, comm="emulate", device="cuda",
                            dtype="bfloat16", high_priority_comm=False).validate(),
                  device="cpu", dtype="float32",
                  warmup_steps=1, timed_steps=4, block_steps=2, profile_steps=1)  # fmt: skip
    mp = pytest.MonkeyPatch()
    CpuEmulatedComm.made = []
    mp.setattr(emulate, "EmulatedComm", CpuEmulatedComm)
    built: dict[str, object] = {}
    real_build = schedule.build_runner

    shapes: dict[str, tuple] = {}

    def spy(cfg_, mode, **kw):
        r = real_build(cfg_, mode, **kw)
        built[mode] = r.comm
        blk = r.model.layers[0]
        shapes[mode] = (tuple(blk.feed_forward.w2.weight.shape), blk.attention.n_heads,
                        tuple(r.model.output.weight.shape))  # fmt: skip
        return r

    mp.setattr(train, "build_runner", spy)
    try:
        code = train.worker(cfg, out)
        initialised = dist.is_initialized()
        run = runs.assemble(cfg, out, analyze=False)
    finally:
        mp.undo()
    assert code == 0
    return {"cfg": cfg, "out": out, "run": run, "built": built, "dist": initialised,
            "SkipComm": SkipComm, "shapes": shapes}  # fmt: skip


def test_each_mode_gets_its_emulated_comm(emulated_run):
    built = emulated_run["built"]
    assert set(built) == set(MODES)
    for mode, comm in built.items():
        if mode in ("nocomm", "domino-nocomm", "domino-sp-nocomm"):  # every collective skipped
            assert type(comm) is emulated_run["SkipComm"]
        else:
            assert isinstance(comm, CpuEmulatedComm)
            assert comm.profile.name == "h200-nvlink-tp2"
            assert comm.calls  # the schedule's collectives went through it
        assert (comm.size, comm.rank) == (2, 0)  # rank 0's shard of tp 2
    assert {"reduce_scatter", "all_gather"} <= set(built["sp"].calls)
    assert not emulated_run["dist"]  # one process, no process group


def test_the_model_is_rank_0s_shard_of_tp_R(emulated_run):
    # tiny (dim 256, ffn 512, 16 heads, vocab 512) at tp 2: w2 [256, 512 / 2], 8 heads,
    # the vocab-parallel head [512 / 2, 256], in every mode
    for mode in MODES:
        assert emulated_run["shapes"][mode] == ((256, 256), 8, (256, 256)), mode


def test_run_json_has_the_comm_block_and_meaningless_losses(emulated_run):
    run = emulated_run["run"]
    assert run["comm"] == {"kind": "emulated", "profile": "h200-nvlink-tp2",
                           "profile_file": None, "label": LABEL2, "ranks": 2, "rank": 0,
                           "kernel": "paced", "ctas": None, "ctas_scope": "all",
                           "engine": "sm", "tensors": "held"}  # fmt: skip
    assert run["backend"] == "emulated"
    assert run["config"]["comm_profile"] == "h200-nvlink-tp2"
    for mode, r in run["modes"].items():
        assert r["numerics"] == f"meaningless ({LABEL2})", mode
    # SP's all-gathers left a NaN slot: those losses are null (run.json holds no NaN);
    # the all-reduce modes' losses are finite
    for mode in ("sp", "domino-sp"):
        assert run["modes"][mode]["losses"] and set(run["modes"][mode]["losses"]) == {None}
    # (on CPU a skipped gather copies: domino-sp-nocomm's losses are finite too)
    for mode in ("tp", "nocomm", "domino", "domino-nocomm", "domino-sp-nocomm"):
        assert all(isinstance(x, float) for x in run["modes"][mode]["losses"]), mode
    doc = json.loads((emulated_run["out"] / "run.json").read_text())
    assert doc["comm"]["label"] == LABEL2


def test_every_trace_of_an_emulated_run_is_marked(emulated_run):
    out = emulated_run["out"]
    files = sorted(out.glob("*/rank*.pt.trace.json.gz"))
    assert [f.parent.name for f in files] == sorted(MODES)
    assert [f.name for f in files] == ["rank0.pt.trace.json.gz"] * len(MODES)  # one process
    for f in files:
        mark = json.loads(gzip.decompress(f.read_bytes()))["domino_prof"]
        assert mark == comm_marker("h200-nvlink-tp2", ranks=2, rank=0, kernel="paced")
        assert mark["kernel"] == "paced" and "ctas" not in mark
    # the trace loader reads it back (the key the run writes first in the file)
    from domino_prof.trace import load_trace

    assert load_trace(out / "domino", progress=False).ranks[0].emulation == LABEL2


def test_the_run_table_and_verdict_carry_the_label(emulated_run, capsys):
    from domino_prof.commands.run import print_comparison

    print_comparison(emulated_run["run"])
    cap = capsys.readouterr()
    assert LABEL2 in cap.out.splitlines()[0] or LABEL2 in cap.out.split("┏")[0]
    verdict = [ln for ln in cap.out.splitlines() if ln.startswith("verdict")]
    assert verdict and LABEL2 in verdict[0]
    assert f"{LABEL2}: one GPU ran rank 0's shard; losses meaningless" in cap.err


def test_the_run_says_when_the_hosts_speed_moved(emulated_run, capsys):
    """print_comparison's "host:" line (rundata.host_speed_note), on a CUDA run whose
    probes spread 2x; none on the same run with steady probes."""
    from domino_prof.commands.run import print_comparison
    from domino_prof.rundata import host_speed_note

    run = json.loads(json.dumps(emulated_run["run"]))
    run["config"]["device"] = "cuda"
    for m in run["modes"].values():
        m["host_probe_times_ms"] = [0.6, 1.2] * 2
    print_comparison(run)
    host = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("host: ")]
    assert host == [f"host: {host_speed_note(run)}"] and "moved 2.0x" in host[0]
    for m in run["modes"].values():
        m["host_probe_times_ms"] = [0.6] * 4
    print_comparison(run)
    assert "host: " not in capsys.readouterr().out


def test_a_real_run_table_has_no_label(emulated_run, capsys):
    from domino_prof.commands.run import print_comparison

    run = {k: v for k, v in emulated_run["run"].items() if k != "comm"}
    print_comparison(run)
    cap = capsys.readouterr()
    assert "emulated" not in cap.out and "emulated" not in cap.err


# --------------------------------------------------------------------------- labels
@pytest.fixture(scope="module")
def marked(tmp_path_factory) -> Path:
    """The fixture's real domino traces with the emulation mark added (as a run writes it)."""
    d = tmp_path_factory.mktemp("marked") / "domino"
    shutil.copytree(FIXTURE_DOMINO, d)
    for f in d.glob("*.gz"):
        mark_trace_file(f, comm_marker("h200-nvlink-tp2", ranks=2))
    return d


def test_analyze_json_and_headline_carry_the_mark(marked, tmp_path):
    res = runner.invoke(app, ["analyze", str(marked), "-o", str(tmp_path / "a.json")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["emulation"] == {"comm": "emulated", "label": LABEL2}
    assert doc["notes"][0].startswith(f"{LABEL2}: the collectives of these traces were emulated")
    res = runner.invoke(app, ["analyze", str(marked)])
    assert res.stdout.splitlines()[1] == f"{LABEL2}: one GPU, rank 0's shard; collectives emulated"


def test_an_unmarked_trace_has_no_label(tmp_path):
    res = runner.invoke(app, ["analyze", str(FIXTURE_DOMINO), "-o", str(tmp_path / "a.json")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "a.json").read_text())
    assert "emulation" not in doc
    assert not any("emulated" in n for n in doc["notes"])
    res = runner.invoke(app, ["check", str(FIXTURE_DOMINO), "--min-hidden", "1"])
    assert "emulated" not in res.stdout


def test_check_output_markdown_and_junit_carry_the_mark(marked, tmp_path):
    junit, md = tmp_path / "j.xml", tmp_path / "m.md"
    res = runner.invoke(app, ["check", str(marked), "--min-hidden", "1", "--junit", str(junit),
                              "--markdown", str(md)])  # fmt: skip
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[1] == f"{LABEL2}: one GPU, rank 0's shard; collectives emulated"
    assert lines[-1] == f"PASS: all 2 checks hold — {LABEL2}"
    assert md.read_text().splitlines()[0] == f"### ✅ domino-prof check: PASS: all 2 checks hold — {LABEL2}"
    import xml.etree.ElementTree as ET

    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("name") == f"domino-prof check ({LABEL2})"
    prop = suite.find("properties/property")
    assert (prop.get("name"), prop.get("value")) == ("comm", LABEL2)


def test_report_banner_on_the_first_screen(marked, tmp_path):
    pytest.importorskip("plotly")
    out = tmp_path / "r.html"
    res = runner.invoke(app, ["report", str(marked), "-o", str(out)])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    head, _, rest = html.partition("</header>")
    assert rest.lstrip().startswith(f'<div class="emulated-banner" id="emulated-comm">{LABEL2}: ')
    plain = tmp_path / "p.html"
    runner.invoke(app, ["report", str(FIXTURE_DOMINO), "-o", str(plain)])
    assert "emulated-banner\" id" not in plain.read_text()


def test_run_report_banner_from_run_json(marked, emulated_run):
    pytest.importorskip("plotly")
    from domino_prof.analysis import AnalysisConfig
    from domino_prof.engine import analyze
    from domino_prof.report.page import render_run_report
    from domino_prof.trace import load_trace

    a = analyze(load_trace(FIXTURE_DOMINO, progress=False), AnalysisConfig())  # unmarked
    html = render_run_report({"domino": a}, run=emulated_run["run"])
    assert f'id="emulated-comm">{LABEL2}: ' in html


def test_a_mark_without_a_profile_is_one_line(tmp_path):
    d = tmp_path / "bad"
    shutil.copytree(FIXTURE_DOMINO, d)
    for f in d.glob("*.gz"):
        mark_trace_file(f, {"comm": "emulated"})
    res = runner.invoke(app, ["analyze", str(d)])
    assert "'domino_prof.comm' is 'emulated' but names no profile" in _one_line(res)


# --------------------------------------------------------------------------- GPU scripts
def _bench(name: str):
    from script_module import load

    return load(f"benchmarks/{name}.py", f"bench_{name}")


def _fake_run(d: Path, *, dom_ms: float, vs_tp: float, of_nc: float, hidden=None) -> None:
    write_run_dir(d, {"domino": {"hidden_pct": hidden}}, config={"model": {"n_layers": 8}},
                  status="complete", comm={"kind": "emulated", "label": LABEL2},
                  comparison=[{"mode": "domino", "step_ms": dom_ms, "speedup_vs_tp": vs_tp,
                               "frac_of_nocomm": of_nc},
                              {"mode": "nocomm", "speedup_vs_tp": 1.25}])  # fmt: skip


def test_the_emulated_table_summariser_takes_medians_and_ranges(tmp_path):
    checks = _bench("emulate_checks")
    root = tmp_path / "table"
    for rep, (ms, r, f, h) in enumerate([(50.0, 1.10, 0.90, 80.0), (54.0, 1.20, 0.95, None),
                                         (52.0, 1.05, 0.93, 90.0)], 1):  # fmt: skip
        _fake_run(root / f"llama3-8b-tp8-graphs-r{rep}", dom_ms=ms, vs_tp=r, of_nc=f, hidden=h)
    _fake_run(root / "llama3-3b-tp2-eager-r1", dom_ms=30.0, vs_tp=0.98, of_nc=0.97, hidden=10.0)
    (root / "_times").mkdir()
    text, rows = checks.table(sorted(root.iterdir()))
    lines = text.splitlines()
    assert lines[0] == f"### Emulated: one H200, rank 0's shard of TP R, {LABEL2}"
    assert lines[-2] == ("| llama3-3b (8) | 2 | eager | 1 | 30.0 | 0.980 | 0.970 | 1.250 | "
                         "10.0 (1) |")  # fmt: skip
    assert lines[-1] == ("| llama3-8b (8) | 8 | graphs | 3 | 52.0 [50.0–54.0] | "
                         "1.100 [1.050–1.200] | 0.930 [0.900–0.950] | 1.250 [1.250–1.250] | "
                         "85.0 [80.0–90.0] (2) |")  # fmt: skip
    assert [r["n"] for r in rows] == [1, 3]


def test_pack_runs_caps_the_trace_tarballs_and_lists_what_did_not_fit(tmp_path, monkeypatch):
    import os
    import sys
    import tarfile

    pack = _bench("pack_runs")
    root = tmp_path / "runs"
    for name in ("a-r1", "b-r1", "a-r2"):
        for mode in ("tp", "domino"):
            (root / name / mode).mkdir(parents=True)
            (root / name / mode / "rank0.pt.trace.json.gz").write_bytes(os.urandom(40_000))
        (root / name / "run.json").write_text("{}")
    out = tmp_path / "o"
    out.mkdir()
    monkeypatch.setattr(sys, "argv", ["pack", "--root", str(root), "--out", str(out / "s.tgz"),
                                      "--traces", str(out / "t-{i}.tgz"), "--cap-mib", "0.1",
                                      "--max-tarballs", "1", "--traces-for", "*-r1"])  # fmt: skip
    assert pack.main() == 0
    with tarfile.open(out / "s.tgz") as t:
        names = set(t.getnames())
        manifest = json.loads(t.extractfile("MANIFEST.json").read())
    assert {"a-r1/run.json", "b-r1/run.json", "a-r2/run.json"} <= names
    assert not any(n.endswith(".gz") for n in names)
    # 0.1 MiB holds two 40 kB traces: the domino ones first (mode priority), then tp
    assert [t["file"] for t in manifest["traces"]] == [
        "a-r1/domino/rank0.pt.trace.json.gz", "b-r1/domino/rank0.pt.trace.json.gz"]
    assert [t["file"] for t in manifest["omitted"]] == [
        "a-r1/tp/rank0.pt.trace.json.gz", "b-r1/tp/rank0.pt.trace.json.gz"]
    with tarfile.open(out / "t-1.tgz") as t:
        assert sorted(t.getnames()) == sorted(x["file"] for x in manifest["traces"])
    assert not (out / "t-2.tgz").exists()


# --- a collective's tensors until it is done (emulate.hold, EmulatedWork) ----------------
class _Comm:
    """What hold() and EmulatedWork read of an EmulatedComm."""

    def __init__(self, record: bool):
        self.record_streams, self.stream, self.waited = record, "comm-stream", []

    def _wait(self, slot, gen):
        self.waited.append((slot, gen))


class _Tensor:
    """A tensor's record_stream, counted; weak-referenceable like a torch tensor."""

    def __init__(self):
        self.recorded = []

    def record_stream(self, stream):
        self.recorded.append(stream)


def test_the_work_holds_its_tensors_until_wait():
    # the default (c10d since PyTorch 2.7): no record_stream; the Work holds t and out and
    # lets go of them once the current stream waits for the collective
    import gc
    import weakref

    from domino_prof.reference_model.emulate import EmulatedWork, hold

    comm, t, out = _Comm(record=False), _Tensor(), _Tensor()
    refs = weakref.ref(t), weakref.ref(out)
    work = EmulatedWork(comm, 3, 7, hold(comm, t, out))
    del t, out
    gc.collect()
    assert all(r() is not None for r in refs)  # held by the Work alone
    assert refs[0]().recorded == refs[1]().recorded == []
    work.wait()
    gc.collect()
    assert comm.waited == [(3, 7)] and all(r() is None for r in refs)


def test_record_stream_when_asked_and_never_under_capture(monkeypatch):
    import torch

    from domino_prof.reference_model.emulate import hold

    comm, t, out = _Comm(record=True), _Tensor(), _Tensor()
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    assert hold(comm, t, out) is None and t.recorded == out.recorded == ["comm-stream"]
    assert hold(comm, t, t) is None and t.recorded == ["comm-stream"] * 2  # in place: once
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert hold(comm, t, out) is None and out.recorded == ["comm-stream"]  # unchanged
