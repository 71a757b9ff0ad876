"""The Live screen's resident memory over a long run, beside the minimal app's: what a monitor kept open all
day costs once its start-up is behind it (issue 20's 45 MiB target), and whether it still grows. A 60 s
window (bench/monitor_cpu.py) cannot show growth that a chart history filling, a minute of alert states or a
table of processes that come and go add over the first minutes. Run by hand, not a test:

    .venv/bin/python bench/live_rss_trend.py --minutes 30          # both programs at once, RSS every 30 s
    .venv/bin/python bench/live_rss_trend.py --minutes 30 --churn 2   # and a process started every 2 s

`memsight watch` and bench/minimal_monitor.py run at the same time, each in a pseudo-terminal of 160x48 whose
output is drained (bench/monitor_cpu.py's spawn and Drain), at 2 Hz; their resident size (VmRSS) is read every
`--every` seconds. The report gives each one's RSS at a few marks, its peak, and its growth per hour over the
second half of the run (a least-squares slope: a monitor whose memory still grows shows it there).

--churn S starts a short-lived process every S seconds while they run (a Python child holding 1-80 MiB for
0.5-4 s, each with a command line of its own, from a fixed seed), as a machine running experiments starts and
ends them: both monitors list them, and what a monitor keeps per process it has seen shows as growth.

--agents S starts an experiment's process with memsight's agent every S seconds, each running 0.75 S seconds
(AGENT_RUN: the real agent, its allocator counters served by a GPU's stand-in and moving as a run's do): the
Live screen shows its agents table and the gap chart of its allocator, as it does beside a real experiment,
and runs come and go as in a day of them. memsight watches an agent directory of this run's own
(MEMSIGHT_AGENT_DIR), with or without --agents: the machine's other agents (a test suite's, another
experiment's) are not in its figures.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import psutil
from monitor_cpu import REPO, Drain, compile_memsight, load, programs, spawn, stop

MARKS_MIN = (1, 5, 10, 20, 30, 60, 120)


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB), in MiB an hour."""
    ts, vs = [t for t, _ in points], [v for _, v in points]
    return statistics.linear_regression(ts, vs).slope * 3600


def start_every(every_s: float, stop: threading.Event, argv_of) -> int:
    """Start the process argv_of(n) names (n: 1, 2, ...) every `every_s` seconds until `stop`, then wait for
    those still running; the number started."""
    children, started = [], 0
    while not stop.wait(every_s):
        started += 1
        children.append(subprocess.Popen(argv_of(started), cwd=REPO))
        children = [c for c in children if c.poll() is None]
    for child in children:
        child.wait()
    return started


def churn_argv(rng: random.Random):
    """argv_of for --churn: a Python child holding 1-80 MiB for 0.5-4 s, drawn from `rng`."""

    def argv_of(n: int) -> list[str]:
        held, lasts = rng.randint(1, 80), rng.uniform(0.5, 4.0)
        code = f"import time; held = bytearray({held} * 2**20); time.sleep({lasts:.2f})  # job {n}"
        return [sys.executable, "-c", code]

    return argv_of


# an experiment's process with memsight's agent (collectors/agent.py, at its default 10 Hz) on "cuda:0": the
# allocator's counters come from collectors/torch_stats.py's RecordedCuda, the stand-in for a GPU that this
# machine may lack, and move as a run's do (a model loaded, a KV cache filling, activations coming and going)
AGENT_RUN = """
import random, sys, time
from collectors.agent import Agent
from collectors.torch_stats import RecordedCuda
seed, lasts, directory = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
rng, GiB = random.Random(seed), 2**30
weights = rng.randint(2, 40) * GiB
stats = {"allocated_bytes.all.current": weights, "reserved_bytes.all.current": weights + GiB,
         "allocated_bytes.all.peak": weights, "active_bytes.all.current": weights,
         "inactive_split_bytes.all.current": 0, "num_alloc_retries": 0, "num_ooms": 0,
         "segment.all.current": 40}
cuda = RecordedCuda({0: stats}, mem_info={0: (80 * GiB - weights, 80 * GiB)})
stats = cuda.memory_stats(0)  # (its own copy: the one it serves)
agent = Agent(directory=directory, cuda=cuda)
agent.open()
end = time.monotonic() + lasts
while time.monotonic() < end:
    allocated = weights + rng.randint(0, 12 * GiB)
    reserved = max(stats["reserved_bytes.all.current"], allocated + rng.randint(0, 2 * GiB))
    stats.update({"allocated_bytes.all.current": allocated, "reserved_bytes.all.current": reserved,
                  "allocated_bytes.all.peak": max(stats["allocated_bytes.all.peak"], allocated),
                  "active_bytes.all.current": allocated,
                  "inactive_split_bytes.all.current": reserved - allocated,
                  "segment.all.current": 40 + (reserved - weights) // GiB})
    agent.tick()
    time.sleep(0.1)
agent.stop()
"""


def agent_run_argv(every_s: float, directory: str):
    """argv_of for --agents: AGENT_RUN for 0.75 every_s seconds, writing into `directory`."""
    return lambda n: [sys.executable, "-c", AGENT_RUN, str(n), f"{0.75 * every_s:.1f}", directory]


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=30.0, help="seconds between readings")
    parser.add_argument("--hz", type=float, default=2.0)
    parser.add_argument("--churn", type=float, help="start a short-lived process every CHURN seconds")
    parser.add_argument("--agents", type=float, help="start an experiment with an agent every AGENTS seconds")
    args = parser.parse_args(argv)
    if args.minutes * 60 < 2 * args.every:
        parser.error("--minutes must hold at least two readings (--every seconds apart)")
    for name in ("churn", "agents"):
        if getattr(args, name) is not None and not getattr(args, name) > 0:
            parser.error(f"--{name} must be a positive number of seconds")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    cols, rows = 160, 48
    compile_memsight()
    agent_dir = tempfile.mkdtemp(prefix="memsight-rss-trend-agents-")
    progs = programs(args.hz, None, "")  # no others: their home folder is not used
    argv_, mark, figures, env = progs["memsight"]
    progs["memsight"] = (argv_, mark, figures, dict(env, MEMSIGHT_AGENT_DIR=agent_dir))
    running: dict[str, tuple[psutil.Process, int]] = {}
    readings: dict[str, list[tuple[float, float]]] = {name: [] for name in progs}
    churned = f", a process started every {args.churn:g} s" if args.churn else ""
    churned += f", an agent's run every {args.agents:g} s" if args.agents else ""
    print(f"{args.hz:g} Hz, terminal {cols}x{rows}, {args.minutes:g} min, RSS every {args.every:g} s"
          f"{churned}, {os.cpu_count()} CPUs, load average before: {load()}", flush=True)  # fmt: skip
    started = time.perf_counter()
    stop_starting, churn_result, runs_result = threading.Event(), [], []
    starters = _starters(args, agent_dir, stop_starting, churn_result, runs_result)
    for starter in starters:
        starter.start()
    try:
        for name, (argv_, mark, figures, env) in progs.items():
            pid, fd = spawn(argv_, cols, rows, env)
            proc = psutil.Process(pid)
            Drain(fd, time.perf_counter(), mark, re.compile(figures), proc).start()
            running[name] = (proc, fd)
        _read_rss(args, running, readings, started)
    finally:
        stop_starting.set()
        for starter in starters:
            starter.join()
        for proc, fd in running.values():
            stop(proc, fd)
        shutil.rmtree(agent_dir, ignore_errors=True)
    _print_report(args, readings, churn_result, runs_result)
    return 0


def _starters(
    args: argparse.Namespace,
    agent_dir: str,
    stop_starting: threading.Event,
    churn_result: list,
    runs_result: list,
) -> list[threading.Thread]:
    """The threads (not started) that start --churn's processes and --agents' runs until `stop_starting`,
    each appending how many it started to its result list."""
    starters = []
    for every_s, argv_of, result in (
        (args.churn, churn_argv(random.Random(20)), churn_result),
        (args.agents, agent_run_argv(args.agents or 0.0, agent_dir), runs_result),
    ):
        if every_s:
            starters.append(threading.Thread(
                target=lambda e=every_s, a=argv_of, r=result: r.append(start_every(e, stop_starting, a))
            ))  # fmt: skip
    return starters


def _read_rss(
    args: argparse.Namespace,
    running: dict[str, tuple[psutil.Process, int]],
    readings: dict[str, list[tuple[float, float]]],
    started: float,
) -> None:
    """Each program's RSS in MiB every --every seconds until --minutes, added to `readings` and printed."""
    end = started + args.minutes * 60
    next_at = started + args.every
    while next_at <= end + 1e-6:
        time.sleep(max(0.0, next_at - time.perf_counter()))
        for name, (proc, _) in running.items():
            readings[name].append((next_at - started, proc.memory_info().rss / 2**20))
        now = ", ".join(f"{name} {points[-1][1]:.2f}" for name, points in readings.items())
        print(f"  {(next_at - started) / 60:6.1f} min: {now} MiB, load {load()}", flush=True)
        next_at += args.every


def _print_report(
    args: argparse.Namespace,
    readings: dict[str, list[tuple[float, float]]],
    churn_result: list,
    runs_result: list,
) -> None:
    started_line = f"; {churn_result[0]} processes started" if churn_result else ""
    started_line += f"; {runs_result[0]} agents' runs started" if runs_result else ""
    print(f"load average after: {load()}{started_line}")
    marks = [m for m in MARKS_MIN if m * 60 <= args.minutes * 60 + 1e-6]
    for name, points in readings.items():
        at = {m: min(points, key=lambda p, m=m: abs(p[0] - m * 60))[1] for m in marks}
        second_half = [p for p in points if p[0] >= args.minutes * 30]
        growth = slope_per_hour(second_half) if len(second_half) >= 2 else float("nan")
        last_t, last = points[-1]
        cells = ", ".join(f"{at[m]:.1f} at {m} min" for m in marks) or f"{last:.1f} at {last_t:.0f} s"
        print(f"{name:<9} RSS MiB: {cells}; peak {max(v for _, v in points):.1f}; "
              f"second half {growth:+.2f} MiB/h")  # fmt: skip
    mine, base = readings["memsight"][-1][1], readings["minimal"][-1][1]
    print(f"memsight / minimal app, RSS at the end: {mine / base:.2f} ({mine:.1f} / {base:.1f} MiB)")


if __name__ == "__main__":
    from taken import finish  # bench/taken.py: the date and machine, for the README

    sys.exit(finish(main()))
