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
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time

import psutil
from monitor_cpu import Drain, compile_memsight, load, programs, spawn, stop

MARKS_MIN = (1, 5, 10, 20, 30, 60, 120)


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB), in MiB an hour."""
    ts, vs = [t for t, _ in points], [v for _, v in points]
    return statistics.linear_regression(ts, vs).slope * 3600


def churn(every_s: float, stop: threading.Event) -> int:
    """Start a short-lived child every `every_s` seconds until `stop`; the number started."""
    rng, children, started = random.Random(20), [], 0
    while not stop.wait(every_s):
        started += 1
        held, lasts = rng.randint(1, 80), rng.uniform(0.5, 4.0)
        code = f"import time; held = bytearray({held} * 2**20); time.sleep({lasts:.2f})  # job {started}"
        children.append(subprocess.Popen([sys.executable, "-c", code]))
        children = [c for c in children if c.poll() is None]
    for child in children:
        child.wait()
    return started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=30.0, help="seconds between readings")
    parser.add_argument("--hz", type=float, default=2.0)
    parser.add_argument("--churn", type=float, help="start a short-lived process every CHURN seconds")
    args = parser.parse_args(argv)
    if args.minutes * 60 < 2 * args.every:
        parser.error("--minutes must hold at least two readings (--every seconds apart)")
    if args.churn is not None and not args.churn > 0:
        parser.error("--churn must be a positive number of seconds")
    cols, rows = 160, 48
    compile_memsight()
    progs = programs(args.hz, None, "")  # no others: their home folder is not used
    running: dict[str, tuple[psutil.Process, int]] = {}
    readings: dict[str, list[tuple[float, float]]] = {name: [] for name in progs}
    churned = f", a process started every {args.churn:g} s" if args.churn else ""
    print(f"{args.hz:g} Hz, terminal {cols}x{rows}, {args.minutes:g} min, RSS every {args.every:g} s"
          f"{churned}, {os.cpu_count()} CPUs, load average before: {load()}")  # fmt: skip
    started = time.perf_counter()
    stop_churn, churn_result = threading.Event(), []
    if args.churn:
        churner = threading.Thread(target=lambda: churn_result.append(churn(args.churn, stop_churn)))
        churner.start()
    try:
        for name, (argv_, mark, figures, env) in progs.items():
            pid, fd = spawn(argv_, cols, rows, env)
            proc = psutil.Process(pid)
            Drain(fd, time.perf_counter(), mark, re.compile(figures), proc).start()
            running[name] = (proc, fd)
        end = started + args.minutes * 60
        next_at = started + args.every
        while next_at <= end + 1e-6:
            time.sleep(max(0.0, next_at - time.perf_counter()))
            for name, (proc, _) in running.items():
                readings[name].append((next_at - started, proc.memory_info().rss / 2**20))
            next_at += args.every
    finally:
        stop_churn.set()
        if args.churn:
            churner.join()
        for proc, fd in running.values():
            stop(proc, fd)
    started_line = f"; {churn_result[0]} processes started" if churn_result else ""
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
    return 0


if __name__ == "__main__":
    from taken import finish  # bench/taken.py: the date and machine, for the README

    sys.exit(finish(main()))
