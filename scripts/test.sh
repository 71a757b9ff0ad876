#!/usr/bin/env bash
# The README's test command: install memsight with its test extras into .venv, lint, run the tests.
# torch is pinned to the CPU build (a bare `torch` pulls a multi-GB CUDA build); the agent tests use it.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q 'torch==2.13.0' -e '.[dev,agent]'
# memsight's own bytecode, as a regular `pip install` writes it: many tests start memsight in a process of
# its own, and where PYTHONDONTWRITEBYTECODE is set (this project's VM) each would compile it again
.venv/bin/python -m compileall -q -j 0 collectors planner tui scripts bench > /dev/null
.venv/bin/ruff check .
# three pytest-xdist workers, on CI's 2 cores too: many tests spend seconds waiting on a real command (a
# sleeping child, agent ticks, a 10 s window), and the third worker runs while they wait. --dist loadgroup hands
# out the tests one at a time, the longest first (RUN_FIRST in tests/conftest.py), and keeps the tests that share
# one expensive module fixture (their xdist_group) on one worker. `bash scripts/test.sh -n 0`: one process.
.venv/bin/python -m pytest -q -n 3 --dist loadgroup "$@"
