"""The live monitor's cost: CPU share of one core over a window at 2 Hz and 10 Hz, resident memory, and the
time from launch to the first frame. Run by hand (not a test):

    .venv/bin/python bench/monitor_cpu.py                 # 60 s at 2 Hz and at 10 Hz, `memsight watch`
    .venv/bin/python bench/monitor_cpu.py --seconds 20 --hz 2 --command demo
    .venv/bin/python bench/monitor_cpu.py --threads --seconds 30   # per sampling thread, no UI

It starts the real `memsight` (python -m tui.cli) in a pseudo-terminal of 160x48, as a user's terminal would,
drains its output, and reads psutil's cpu_times() of that process (user + system, all its threads) before and
after the window. First frame = the first time the screen's text contains the Live screen's headroom gauge.
Targets (the issue's): under 3% of one core at 2 Hz; first frame under 1 s. For the split, the same Monitor
is also measured alone (no UI) over the same window ("collectors-only %").
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pathlib
import pty
import re
import struct
import sys
import termios
import threading
import time

import psutil

REPO = pathlib.Path(__file__).resolve().parent.parent
FIRST_FRAME_MARK = b"headroom"  # drawn by the Live screen once the first state reached its widgets
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1b\][^\x07]*\x07")


def spawn(argv: list[str], cols: int, rows: int) -> tuple[int, int]:
    pid, fd = pty.fork()
    if pid == 0:  # child: the terminal is already ours
        os.chdir(REPO)
        env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(cols), LINES=str(rows))
        os.execvpe(argv[0], argv, env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    return pid, fd


class Drain(threading.Thread):
    """Reads the pty so the app never blocks on a full terminal; notes when the first frame appears."""

    def __init__(self, fd: int, started: float) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.started = started
        self.first_frame_s: float | None = None
        self.bytes_read = 0
        self._tail = b""

    def run(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.bytes_read += len(chunk)
            if self.first_frame_s is None:
                text = ANSI.sub(b"", self._tail + chunk)
                if FIRST_FRAME_MARK in text:
                    self.first_frame_s = time.perf_counter() - self.started
                self._tail = text[-64:]


def measure(command: str, hz: float, seconds: float, cols: int, rows: int) -> dict[str, float | None]:
    argv = [sys.executable, "-m", "tui.cli", command, "--hz", str(hz)]
    started = time.perf_counter()
    pid, fd = spawn(argv, cols, rows)
    drain = Drain(fd, started)
    drain.start()
    proc = psutil.Process(pid)
    try:
        deadline = time.perf_counter() + 15
        while drain.first_frame_s is None and time.perf_counter() < deadline:
            time.sleep(0.01)
        if drain.first_frame_s is None:
            raise SystemExit(f"no first frame within 15 s from {' '.join(argv)}")
        time.sleep(2.0)  # let start-up work (imports, first layout) finish before the window
        before = proc.cpu_times()
        t0 = time.perf_counter()
        bytes0 = drain.bytes_read
        time.sleep(seconds)
        after = proc.cpu_times()
        elapsed = time.perf_counter() - t0
        rss = proc.memory_info().rss
        busy = (after.user - before.user) + (after.system - before.system)
        return {
            "hz": hz,
            "window_s": elapsed,
            "cpu_s": busy,
            "cpu_percent_of_one_core": 100.0 * busy / elapsed,
            "rss_mib": rss / 2**20,
            "first_frame_s": drain.first_frame_s,
            "terminal_bytes_per_s": (drain.bytes_read - bytes0) / elapsed,
            "threads": proc.num_threads(),
        }
    finally:
        try:
            os.write(fd, b"q")
            proc.wait(timeout=5)
        except (OSError, psutil.Error):
            proc.kill()
        os.close(fd)


COLLECTORS_ONLY = (
    "import sys, time; from collectors.monitor import Monitor; "
    "m = Monitor(hz=float(sys.argv[1])); m.start(); print('headroom', flush=True); time.sleep(3600)"
)


def measure_collectors(hz: float, seconds: float) -> float:
    """The same Monitor without any UI, for the split between sampling and drawing (% of one core)."""
    argv = [sys.executable, "-c", COLLECTORS_ONLY, str(hz)]
    pid, fd = spawn(argv, 80, 24)
    drain = Drain(fd, time.perf_counter())
    drain.start()
    proc = psutil.Process(pid)
    try:
        while drain.first_frame_s is None:
            time.sleep(0.01)
        time.sleep(2.0)
        before = proc.cpu_times()
        t0 = time.perf_counter()
        time.sleep(seconds)
        after = proc.cpu_times()
        busy = (after.user - before.user) + (after.system - before.system)
        return 100.0 * busy / (time.perf_counter() - t0)
    finally:
        proc.kill()
        proc.wait(timeout=5)
        os.close(fd)


def measure_threads(hz: float, seconds: float) -> dict[str, float]:
    """Per sampling thread, % of one core, measured in this process with each thread's own CPU clock
    (pthread_getcpuclockid): which thread costs what, with no UI and no interpreter start-up in the figure."""
    sys.path.insert(0, str(REPO))
    from collectors.monitor import Monitor  # noqa: PLC0415

    monitor = Monitor(hz=hz).start()
    try:
        time.sleep(2.0)
        threads = [t for t in threading.enumerate() if t.name.startswith("memsight-") and t.ident]
        clocks = {t.name: time.pthread_getcpuclockid(t.ident) for t in threads}
        before = {name: time.clock_gettime(c) for name, c in clocks.items()}
        t0 = time.perf_counter()
        time.sleep(seconds)
        after = {name: time.clock_gettime(c) for name, c in clocks.items()}
        elapsed = time.perf_counter() - t0
    finally:
        monitor.stop()
    return {name: 100.0 * (after[name] - before[name]) / elapsed for name in clocks}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--hz", type=float, nargs="+", default=[2.0, 10.0])
    parser.add_argument("--command", default="watch", choices=["watch", "demo"])
    parser.add_argument("--size", default="160x48", help="terminal COLSxROWS")
    parser.add_argument(
        "--threads", action="store_true", help="only the per-thread split of the Monitor's sampling threads"
    )
    args = parser.parse_args(argv)
    if args.threads:
        for hz in args.hz:
            split = measure_threads(hz, args.seconds)
            cells = ", ".join(f"{name} {pct:.2f}%" for name, pct in sorted(split.items()))
            print(f"{hz:g} Hz: {cells}; all sampling threads {sum(split.values()):.2f}% of one core")
        return 0
    cols, rows = (int(x) for x in args.size.split("x"))
    cpus = os.cpu_count()
    print(f"memsight {args.command}, terminal {cols}x{rows}, {args.seconds:.0f} s per rate, {cpus} CPUs")
    header = ("Hz", "CPU % of 1 core", "CPU s", "RSS MiB", "first frame s", "tty B/s", "collectors-only %")
    widths = (5, 16, 7, 8, 14, 8, 18)
    print(" ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True)))
    for hz in args.hz:
        r = measure(args.command, hz, args.seconds, cols, rows)
        alone = measure_collectors(hz, args.seconds) if args.command == "watch" else float("nan")
        print(
            f"{r['hz']:>5g} {r['cpu_percent_of_one_core']:>16.2f} {r['cpu_s']:>7.2f} {r['rss_mib']:>8.1f} "
            f"{r['first_frame_s']:>14.3f} {r['terminal_bytes_per_s']:>8.0f} {alone:>18.2f}"
        )
    return 0


if __name__ == "__main__":
    from taken import finish  # bench/taken.py: the date and machine, for the README

    sys.exit(finish(main()))
