"""The files git tracks must leave room under the device tool's 64 MiB limit on the
working tree that travels to a GPU machine (tracked and untracked-not-ignored files,
/work/.library/device/README.md): over it, every GPU call of a session is refused. 60 MiB
leaves 4 MiB for what a session writes before its call. 55.5 MiB on 2026-12-06; the
report.html files of 2026-12-02 (6 MB each) were removed on 2026-12-03 for this; on
2026-12-07 the 2026-12-02 emulated tp-2 traces (2.8 MB, an emulator since replaced; their
analyses stay), and new reports keep run.json written compact and at most one trace."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUDGET_MIB = 60.0


def test_tracked_files_leave_room_under_the_device_limit():
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout, or no git")
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True,
                         check=True).stdout  # fmt: skip
    files = [ROOT / p for p in out.decode().split("\0") if p]
    sizes = {p: p.stat().st_size for p in files if p.is_file()}
    total = sum(sizes.values()) / 2**20
    biggest = sorted(sizes, key=sizes.get, reverse=True)[:5]
    assert total <= BUDGET_MIB, (
        f"tracked files {total:.1f} MiB > {BUDGET_MIB} MiB: prune the largest "
        + ", ".join(f"{p.relative_to(ROOT)} ({sizes[p] / 2**20:.1f} MiB)" for p in biggest))
    assert len(sizes) > 100  # the listing worked: a checkout has hundreds of files
