"""CPU of the short commands beside their anchors, measured in the same run: `memsight --help` and `memsight
plan --help` next to the bare interpreter (`python -c pass`) and to argparse alone; `memsight plan` of a
4,096-layer config (Llama 3.1 8B's config with num_hidden_layers = 4096, written to --dir) next to `memsight
plan llama-3.1-8b`. Run by hand, not a test:

    .venv/bin/python bench/cli_cost.py                # 15 rounds
    .venv/bin/python bench/cli_cost.py --rounds 31

Each figure is the CPU (user + system) of one fresh process, from os.wait4; the commands take turns within
each round (the order rotating), and the report gives each one's median and range, and the ratios per round.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def cpu(argv: list[str]) -> float:
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode()
    proc.stderr.close()
    if status != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {err[-1000:]}")
    return usage.ru_utime + usage.ru_stime


def spread(values: list[float], scale: float = 1000.0, fmt: str = ".1f") -> str:
    v = [x * scale for x in values]
    return f"{statistics.median(v):{fmt}} ({min(v):{fmt}}-{max(v):{fmt}})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--dir", default="/tmp")
    args = parser.parse_args()
    from planner.catalog import catalog_config  # noqa: PLC0415

    deep = pathlib.Path(args.dir, "memsight-bench-4096-layers.json")
    deep.write_text(json.dumps(dict(catalog_config("llama-3.1-8b"), num_hidden_layers=4096)))
    py = sys.executable
    commands = {
        "python -c pass": [py, "-c", "pass"],
        "python -c 'import argparse'": [py, "-c", "import argparse"],
        "memsight --help": [py, "-m", "tui.cli", "--help"],
        "memsight plan --help": [py, "-m", "tui.cli", "plan", "--help"],
        "memsight plan llama-3.1-8b --json": [py, "-m", "tui.cli", "plan", "llama-3.1-8b", "--json"],
        "memsight plan 4096-layer --json": [py, "-m", "tui.cli", "plan", str(deep), "--json"],
    }
    names = list(commands)
    results: dict[str, list[float]] = {name: [] for name in names}
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs, {args.rounds} rounds, load average before: {load}")
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            results[name].append(cpu(commands[name]))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'command':<36} {'CPU ms, median (range)':>26}")
    for name in names:
        print(f"{name:<36} {spread(results[name]):>26}")
    deep_ratio = [d / s for d, s in zip(results[names[5]], results[names[4]], strict=True)]
    print(f"plan of 4,096 layers / plan of Llama 3.1 8B, CPU: {spread(deep_ratio, 1.0, '.2f')} (per round)")
    for name in names[2:4]:
        over = [c - p for c, p in zip(results[name], results[names[0]], strict=True)]
        print(f"{name} beyond the bare interpreter: {spread(over)} ms (per round)")
    return 0


if __name__ == "__main__":
    from taken import finish  # bench/taken.py: the date and machine, for the README

    sys.exit(finish(main()))
