"""`memsight replay --json` and the interactive replay on recordings of 1, 6 and 24 hours, beside the cost of
parsing the same files' lines with json.loads, in the same run. Run by hand, not a test:

    .venv/bin/python bench/replay_cost.py                    # 1 h, 6 h, 24 h; 3 rounds
    .venv/bin/python bench/replay_cost.py --hours 1 24 --rounds 2 --play 1

The recordings are made once by bench/day_recording.py (the real Recorder, 2 Hz, one agent, a GPU) into
--dir (default /tmp, outside the repository) and reused while the writer is the same: the file's name carries
a digest of bench/day_recording.py and collectors/recorder.py, so a recording made by other code (an older
branch) is never measured again. Each measurement is a fresh process (CPU = user +
system of that process, peak RSS = its ru_maxrss), the programs taking turns within each round:
  parse   python -c: json.loads of every line, nothing kept (the anchor)
  json    memsight replay FILE --json > /dev/null (the console script beside this python)
  before  with --against DIR: the same console script, another checkout's code first on its path (main's, as
          `git archive main | tar -x -C DIR` leaves it), in the same rounds
  play    the interactive replay's engine played through the whole recording, a state built at every recorded
          OS tick as the screen sees them (ReplayMonitor.scan), then a seek back to the middle (--play: only
          for recordings of at most that many hours; it builds 172,800 states for a day)
The report gives each figure's median and range, and json / parse per round. With --instructions, each of
parse and json also runs once under valgrind (callgrind) and the report gives their instructions and its
ratio: a count that the machine's load and speed do not move (the CPU ratio moves with both: a busy
machine's caches slow the replay's larger working set more than the anchor's). Slow: 50-100x the CPU figure
(about 3 minutes for 1 h and 6 h; 12 for the day).
"""

from __future__ import annotations

import argparse
import compileall
import hashlib
import os
import pathlib
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PARSE = "import json, sys\nfor line in open(sys.argv[1], 'rb'):\n    json.loads(line)\n"
PLAY = (
    "import sys, time\nfrom collectors.replay import ReplayMonitor\n"
    "replay = ReplayMonitor(sys.argv[1])\nreplay.seek(replay.duration_s)\n"
    "middle = time.perf_counter()\nreplay.seek(replay.duration_s / 2)\n"
    "print(f'then a seek back to the middle {time.perf_counter() - middle:.2f} s', file=sys.stderr)\n"
)


def run(argv: list[str], path: str | None = None) -> dict[str, float]:
    """CPU seconds (user + system), peak RSS (MiB) and wall seconds of one process (`path`: PYTHONPATH)."""
    started = time.perf_counter()
    env = None if path is None else {**os.environ, "PYTHONPATH": path}
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode()
    proc.stderr.close()
    if status != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({status}): {err[-2000:]}")
    return {
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss": usage.ru_maxrss / 1024,
        "wall": time.perf_counter() - started,
        "note": err.strip().splitlines()[-1] if err.strip() else "",
    }


def recording(hours: float, folder: str) -> pathlib.Path:
    from bench.day_recording import make  # noqa: PLC0415

    writer = hashlib.sha256()
    for part in ("bench/day_recording.py", "collectors/recorder.py"):
        writer.update((REPO / part).read_bytes())
    path = pathlib.Path(folder, f"memsight-bench-day-{hours:g}h-{writer.hexdigest()[:10]}.jsonl")
    if not path.exists():
        started = time.perf_counter()
        made = make(path, hours)
        print(f"made {path}: {made['bytes']:,} bytes ({made['bytes_per_s']:.0f} B/s of recording) in "
              f"{time.perf_counter() - started:.0f} s")  # fmt: skip
    return path


def spread(values: list[float], fmt: str = ".2f") -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, nargs="+", default=[1.0, 6.0, 24.0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default="/tmp")
    parser.add_argument("--play", type=float, default=24.0, help="play recordings of at most this many hours")
    parser.add_argument("--against", help="another checkout whose replay --json runs in the same rounds")
    parser.add_argument(
        "--instructions", action="store_true", help="also count parse's and json's instructions (valgrind)"
    )
    args = parser.parse_args()
    from instructions import available, instructions  # noqa: PLC0415  (bench/instructions.py)

    if args.instructions and not available():
        parser.error("--instructions needs valgrind on PATH")
    py = sys.executable
    memsight = pathlib.Path(py).parent / "memsight"  # the console script, as a user runs it
    roots = [REPO] + ([pathlib.Path(args.against).resolve()] if args.against else [])
    for root in roots:
        for package in ("planner", "collectors", "tui"):  # bytecode caches, as bench/cli_cost.py says why
            compileall.compile_dir(root / package, quiet=1)
    print(f"{os.cpu_count()} CPUs, load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for hours in args.hours:
        path = recording(hours, args.dir)
        programs = {
            "parse": [py, "-c", PARSE, str(path)],
            "json": [py, str(memsight), "replay", str(path), "--json"],
        }
        paths = {}
        if args.against:
            programs["before"] = programs["json"]
            paths["before"] = str(roots[1])
        if hours <= args.play:
            programs["play"] = [py, "-c", PLAY, str(path)]
        results: dict[str, list[dict]] = {name: [] for name in programs}
        names = list(programs)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                results[name].append(run(programs[name], paths.get(name)))
        size = path.stat().st_size
        rate = size / (hours * 3600)
        print(f"{hours:g} h recording ({size / 2**20:.1f} MiB, {rate:.0f} B/s), {args.rounds} rounds:")
        for name in names:
            rs = results[name]
            note = f"; {rs[-1]['note']}" if rs[-1]["note"] else ""
            cpu, wall = spread([x["cpu"] for x in rs]), spread([x["wall"] for x in rs])
            rss = spread([x["rss"] for x in rs], ".0f")
            print(f"  {name:<6} CPU s {cpu:>22}  wall s {wall:>22}  peak RSS MiB {rss:>14}{note}")
        ratios = [j["cpu"] / p["cpu"] for j, p in zip(results["json"], results["parse"], strict=True)]
        print(f"  replay --json / parsing its lines, CPU: {spread(ratios)} (per round)")
        if args.against:
            before = [b["cpu"] / p["cpu"] for b, p in zip(results["before"], results["parse"], strict=True)]
            print(f"  {args.against}'s replay --json / parsing its lines, CPU: {spread(before)} (per round)")
        if args.instructions:
            counted = {name: instructions(programs[name], REPO) for name in ("parse", "json")}
            print(f"  instructions (valgrind): parse {counted['parse']:,}, json {counted['json']:,}: "
                  f"replay --json / parsing its lines {counted['json'] / counted['parse']:.2f}")  # fmt: skip
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    from taken import finish  # bench/taken.py: the date and machine, for the README

    sys.exit(finish(main()))
