#!/usr/bin/env bash
# Install everything the test suite needs and run it, then gate the project on its
# own overlap figures. This is THE test command (README; .ci/run calls it as is).
# Safe to re-run: installs are idempotent. Needs no root: pip installs into the Python
# it runs (use a venv as a non-root user), the browser goes into a cache under $HOME.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# torch pinned: on the project machines 2.13.0 is the CPU wheel on disk (find-links);
# elsewhere export PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu first.
"$PY" -m pip install -q -e '.[model,test,hta,dask,perfetto]' 'torch==2.13.0'
# the console scripts just installed (domino-prof, for the gates below): a venv's bin/ is
# not on PATH when its python is given by path (PYTHON=venv/bin/python, not activated)
PATH="$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
export PATH
# a real headless browser for the report tests, without root: a Chromium on PATH, or
# Debian's unpacked into ~/.cache/domino-prof (scripts/get_chromium.sh says what it fetches)
DOMINO_PROF_CHROMIUM="$(bash scripts/get_chromium.sh)"
export DOMINO_PROF_CHROMIUM
mkdir -p test-artifacts
cpu_tmp="$(mktemp -d)"
trap 'rm -rf "$cpu_tmp"' EXIT   # removed however the script ends (pass, fail, Ctrl-C)
cpu_run="$cpu_tmp/cpu-run"
# 2 workers (CI has 2 cores): the in-process tests on both, then the tests that start
# rank processes one after the other, alone, as in a serial run (tests/conftest.py says
# why). Measured on the shared 2-core box: this script 6 min 55 s, against 11 min 6 s
# for the serial pytest alone earlier (+ ~30 s of gates); CPU 484 s against ~550 s.
# 2026-12-07: 4 min 37 s for the whole script, install included (1349 tests, pytest 265 s).
# `-n 0` after it runs the suite in one process.
# The suite's default-flags run (test_run_cli) is made in $cpu_run, fresh, for the gate.
# --basetemp: the tests' tmp paths as long as a serial run's (/tmp/pytest-of-USER/pytest-N/
# there; +popen-gwN/ under xdist), and removed with the rest at the end
DOMINO_PROF_TEST_CPU_RUN="$cpu_run" \
  "$PY" -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup --no-loadscope-reorder \
  --basetemp "$cpu_tmp/t" "$@"
# Self-gates (issue #6): the committed real H200 traces against their committed
# baseline, and a fresh CPU run against a floor.
domino-prof check tests/data/h200_llama3_3b_2layers_tp2 --mode domino \
  --baseline tests/data/h200_llama3_3b_2layers_tp2/overlap-baseline.json --max-drop 0.5 \
  --junit test-artifacts/overlap-gpu.xml
if [ ! -f "$cpu_run/run.json" ]; then
  # that test did not run (a -k or a file given): a run of our own. Every mode; 2 timed
  # blocks of 2 steps, the fewest: the gate reads the hidden % of the profiled steps
  # (default warm-up and profiled steps), never the timed steps
  domino-prof run --device cpu --tp 2 --out "$cpu_run" --no-analyze --steps 4 --block-steps 2
fi
# check of a run directory gates the modes that overlap by design, domino and domino-sp
# (tp and sp hide 0 % by design, nocomm has no comm). On CPU they hide 14–53 % and
# 15–34 % per rank; 5 % flags "overlap gone" without flaking
domino-prof check "$cpu_run" --min-hidden 5 --junit test-artifacts/overlap-cpu.xml
