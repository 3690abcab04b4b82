"""benchmarks/kernel_classes.py (where domino's overlap tax sits, by kernel class): the
classes by name and the per-step sums of a hand-made trace."""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "kernel_classes.py"


def _mod():
    spec = importlib.util.spec_from_file_location("_kernel_classes", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _k(name, dur):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": 0, "dur": dur}


TRACE = {"traceEvents": [
    _k("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NNT", 3000.0),  # gemm
    _k("mm_kernel", 1000.0),  # the Triton tile: gemm
    _k("cudnn_generated_fort_native_sdpa_sm90_flash_fprop", 2000.0),  # attn
    _k("emulated_allreduce_paced", 5000.0),  # comm
    _k("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 1000.0),  # comm
    _k("triton_red_fused__fused_rms_norm_0", 500.0),  # norm
    _k("vectorized_elementwise_kernel", 700.0),  # other
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 9e9},  # not a kernel
]}  # fmt: skip


def test_classes_per_step_by_name():
    m = _mod()
    # two profiled steps: gemm (3000 + 1000) / 2 µs = 2 ms; attn 1; comm 3; norm 0.25;
    # other 0.35 (the cpu op is no kernel)
    assert m.classes(TRACE, 2) == {"gemm": 2.0, "attn": 1.0, "norm": 0.25, "comm": 3.0,
                                   "other": 0.35}  # fmt: skip


def test_cli_reads_the_steps_from_run_json_and_names_a_run_without(tmp_path):
    run = tmp_path / "run"
    (run / "domino").mkdir(parents=True)
    with gzip.open(run / "domino" / "rank0.pt.trace.json.gz", "wt") as f:
        json.dump(TRACE, f)
    (run / "run.json").write_text(json.dumps({"config": {"profile_steps": 4}}))
    p = subprocess.run([sys.executable, str(PATH), str(run)], capture_output=True, text=True,
                       check=False)  # fmt: skip
    assert p.returncode == 0, p.stderr
    # four steps: gemm 4000 / 4 µs = 1.00 ms ... comm 1.50
    (row,) = [ln for ln in p.stdout.splitlines() if ln.split()[:2] == ["run", "domino"]]
    assert row.split()[1:] == ["domino", "1.00", "0.50", "0.12", "1.50", "0.17"]
    (run / "run.json").unlink()
    p = subprocess.run([sys.executable, str(PATH), str(run)], capture_output=True, text=True,
                       check=False)  # fmt: skip
    assert p.returncode != 0 and "no run.json with config.profile_steps" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("name,cls", [("Memcpy DtoD", "other"), ("sm90_xmma_gemm_bf16", "gemm"),
                                      ("flash_bwd_kernel", "attn")])  # fmt: skip
def test_kernel_class(name, cls):
    assert _mod().kernel_class(name) == cls
