"""CPU of the short commands beside their anchors, measured in the same run: `memsight --help` and `memsight
plan --help` next to the bare interpreter (`python -c pass`) and to argparse alone; `memsight plan` of a
4,096-layer config (Llama 3.1 8B's config with num_hidden_layers = 4096, written to --dir) next to `memsight
plan llama-3.1-8b`. Run by hand, not a test:

    .venv/bin/python bench/cli_cost.py                # 15 rounds
    .venv/bin/python bench/cli_cost.py --rounds 31

Each figure is the CPU (user + system) of one fresh process, from os.wait4; the commands take turns within
each round (the order rotating), and the report gives each one's median and range, and the ratios per round.
With --instructions, the bare interpreter, argparse alone, `memsight --help` and `memsight plan --help` also
run once each under valgrind (bench/instructions.py): counts that the load and the VM's speed of the day do
not move (this VM's bare interpreter cost 13.9 ms one day and 20.5 another).

`memsight` is the console script the README's install puts beside this python (`pip install -e .`, an
editable install: its .pth only adds the checkout to sys.path), run as a user runs it; `python -m tui.cli` is
shown beside it. memsight's own modules are measured with their bytecode caches (__pycache__), as a second
run leaves them and `pip install` writes them: the bench compiles them first (compileall). An environment
with PYTHONDONTWRITEBYTECODE=1 never writes them, and every run then compiles memsight's sources again; the
`no bytecode caches` row measures that case (a copy of the packages without __pycache__, first on
PYTHONPATH, with PYTHONDONTWRITEBYTECODE=1; the standard library keeps its caches).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("planner", "collectors", "tui")  # memsight's own, as pyproject.toml's wheel lists them
sys.path.insert(0, str(REPO))


def cpu(argv: list[str], env: dict[str, str] | None = None) -> float:
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
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
    parser.add_argument("--instructions", action="store_true", help="also count instructions (valgrind)")
    args = parser.parse_args()
    from instructions import available, instructions  # noqa: PLC0415  (bench/instructions.py)

    if args.instructions and not available():
        parser.error("--instructions needs valgrind on PATH")
    from planner.catalog import catalog_config  # noqa: PLC0415

    deep = pathlib.Path(args.dir, "memsight-bench-4096-layers.json")
    deep.write_text(json.dumps(dict(catalog_config("llama-3.1-8b"), num_hidden_layers=4096)))
    py = sys.executable
    script = pathlib.Path(py).parent / "memsight"
    if not script.exists():
        raise SystemExit(f"no console script {script}: install memsight into this python (pip install -e .)")
    memsight = [py, str(script)]  # the script's own #! names this python; run it so, whatever the #! says
    uncached = tempfile.mkdtemp(prefix="memsight-bench-nopyc-")
    for package in PACKAGES:
        compileall.compile_dir(REPO / package, quiet=1)
        no_caches = shutil.ignore_patterns("__pycache__")
        shutil.copytree(REPO / package, pathlib.Path(uncached, package), ignore=no_caches)
    no_bytecode = dict(os.environ, PYTHONPATH=uncached, PYTHONDONTWRITEBYTECODE="1")
    commands = {
        "python -c pass": ([py, "-c", "pass"], None),
        "python -c 'import argparse'": ([py, "-c", "import argparse"], None),
        "memsight --help": ([*memsight, "--help"], None),
        "memsight plan --help": ([*memsight, "plan", "--help"], None),
        "python -m tui.cli plan --help": ([py, "-m", "tui.cli", "plan", "--help"], None),
        "plan --help, no bytecode caches": ([*memsight, "plan", "--help"], no_bytecode),
        "memsight plan llama-3.1-8b --json": ([*memsight, "plan", "llama-3.1-8b", "--json"], None),
        "memsight plan 4096-layer --json": ([*memsight, "plan", str(deep), "--json"], None),
    }
    names = list(commands)
    results: dict[str, list[float]] = {name: [] for name in names}
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs, {args.rounds} rounds, load average before: {load}")
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            results[name].append(cpu(*commands[name]))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'command':<36} {'CPU ms, median (range)':>26}")
    for name in names:
        print(f"{name:<36} {spread(results[name]):>26}")
    deep_ratio = [d / s for d, s in zip(results[names[7]], results[names[6]], strict=True)]
    print(f"plan of 4,096 layers / plan of Llama 3.1 8B, CPU: {spread(deep_ratio, 1.0, '.2f')} (per round)")
    for name in names[2:6]:
        over = [c - p for c, p in zip(results[name], results[names[0]], strict=True)]
        print(f"{name} beyond the bare interpreter: {spread(over)} ms (per round)")
    if args.instructions:
        print("instructions (valgrind), one run each:")
        for name in names[:4]:
            print(f"{name:<36} {instructions(commands[name][0], REPO) / 1e6:>14,.1f} million")
    shutil.rmtree(uncached)
    return 0


if __name__ == "__main__":
    from taken import finish  # bench/taken.py: the date and machine, for the README

    sys.exit(finish(main()))
