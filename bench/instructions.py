"""Instructions one run of a command executes, counted by valgrind's callgrind: a figure the machine's load
and speed do not move, for the benches' ratios where the CPU time's noise is as large as the difference
(bench/replay_cost.py and bench/cli_cost.py, --instructions). About 50-100x slower than the command."""

from __future__ import annotations

import re
import shutil
import subprocess


def available() -> bool:
    return shutil.which("valgrind") is not None


def instructions(argv: list[str], cwd: object = None, env: dict[str, str] | None = None) -> int:
    """The instructions one run of `argv` executes (its stdout thrown away)."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False,
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"valgrind {' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return int(found.group(1))
