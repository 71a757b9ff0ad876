"""The live monitor's cost beside its anchors, measured in the same run: CPU share of one core, resident
memory and time to the first frame of `memsight watch` (and the CPU it had used by then, which a shared
machine's load disturbs less than the time), next to bench/minimal_monitor.py (the smallest Textual + psutil
memory monitor) at the same rate, and bpytop / glances where installed (`--others`). Run by hand, not a test:

    .venv/bin/python bench/monitor_cpu.py                                   # 2 Hz, 3 rounds of 60 s
    .venv/bin/python bench/monitor_cpu.py --hz 2 --seconds 30 --rounds 5 --others /tmp/tools/bin
    .venv/bin/python bench/monitor_cpu.py --threads --seconds 30             # per sampling thread, no UI
    .venv/bin/python bench/monitor_cpu.py --starts 25                        # first frames only, 25 pairs

Each program runs in a pseudo-terminal of 160x48, as in a user's terminal, its output drained; CPU is psutil's
cpu_times() of the process (user + system, all threads) over the window, after the first frame and a few
seconds to settle; RSS is read at the end. Before the rounds each program is started once to its first figures
and not counted (--no-warmup: not), so that the first program of the first round does not alone read files
from disk that the others then find in the page cache. The programs take turns within each round (the order
rotating), so a shared machine's load falls on all of them alike; the report gives each figure's median and
range over the rounds, and memsight's ratio to the minimal app per round (median, range). First frame = the
first time the screen's text holds the program's mark (memsight: its headroom gauge; the minimal app: its
first line); first figures = the first time that mark carries a measured figure (memsight draws the Live
screen's skeleton first, and imports the planner and the collectors, starts its monitor and plans after it;
the minimal app's first frame has its figures). memsight's own modules run with their bytecode caches
(__pycache__), as a second run leaves them and `pip install` writes them: the bench compiles them first
(compileall), as bench/cli_cost.py does and says why.
"""

from __future__ import annotations

import argparse
import compileall
import fcntl
import os
import pathlib
import pty
import re
import shutil
import statistics
import struct
import sys
import tempfile
import termios
import threading
import time

import psutil

REPO = pathlib.Path(__file__).resolve().parent.parent
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1b\][^\x07]*\x07")


def spawn(argv: list[str], cols: int, rows: int, env: dict[str, str]) -> tuple[int, int]:
    pid, fd = pty.fork()
    if pid == 0:  # child: the terminal is already ours
        os.chdir(REPO)
        os.execvpe(argv[0], argv, dict(env, TERM="xterm-256color", COLUMNS=str(cols), LINES=str(rows)))
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    return pid, fd


class Drain(threading.Thread):
    """Reads the pty so the program never blocks on a full terminal; notes when the first frame appears, and
    when the first figures do (`figures`: a pattern of the screen's text once it shows measured values)."""

    def __init__(
        self, fd: int, started: float, mark: bytes, figures: re.Pattern[bytes], proc: psutil.Process
    ) -> None:
        super().__init__(daemon=True)
        self.fd, self.started, self.mark, self.figures, self.proc = fd, started, mark, figures, proc
        self.first_frame_s: float | None = None
        self.first_frame_cpu_s: float | None = None  # the program's CPU (user + system) by its first frame
        self.first_figures_s: float | None = None
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
            if self.first_figures_s is None:
                text = ANSI.sub(b"", self._tail + chunk)
                now = time.perf_counter() - self.started
                if self.first_frame_s is None and self.mark in text:
                    self.first_frame_s = now
                    cpu = self.proc.cpu_times()
                    self.first_frame_cpu_s = cpu.user + cpu.system
                if self.first_frame_s is not None and self.figures.search(text):
                    self.first_figures_s = now
                self._tail = text[-64:]


def measure(
    argv: list[str],
    mark: bytes,
    figures: bytes,
    seconds: float,
    cols: int,
    rows: int,
    env: dict[str, str],
    settle_s: float = 3.0,
) -> dict:
    started = time.perf_counter()
    pid, fd = spawn(argv, cols, rows, env)
    proc = psutil.Process(pid)
    drain = Drain(fd, started, mark, re.compile(figures), proc)
    drain.start()
    try:
        deadline = time.perf_counter() + 30
        while drain.first_figures_s is None and time.perf_counter() < deadline:
            time.sleep(0.01)
        if drain.first_figures_s is None:
            raise SystemExit(f"no first frame with figures within 30 s from {' '.join(argv)}")
        time.sleep(settle_s)  # start-up work (imports, first layout) ends before the window
        before = proc.cpu_times()
        t0 = time.perf_counter()
        time.sleep(seconds)
        after = proc.cpu_times()
        elapsed = time.perf_counter() - t0
        rss = proc.memory_info().rss
        busy = (after.user - before.user) + (after.system - before.system)
        return {
            "cpu": 100.0 * busy / elapsed,
            "rss": rss / 2**20,
            "first": drain.first_frame_s,
            "first_cpu": drain.first_frame_cpu_s,
            "figures": drain.first_figures_s,
        }
    finally:
        stop(proc, fd)


def stop(proc: psutil.Process, fd: int) -> None:
    """Kills a program started by spawn() and closes its terminal."""
    try:
        proc.kill()
        proc.wait(timeout=5)
    except psutil.Error:
        pass
    os.close(fd)


def compile_memsight() -> None:
    """memsight's bytecode caches, as a second run or `pip install` leaves them (the docstring says why)."""
    for package in ("planner", "collectors", "tui"):
        compileall.compile_dir(REPO / package, quiet=1)


Program = tuple[list[str], bytes, bytes, dict[str, str]]  # argv, first-frame mark, first-figures pattern, env


def programs(hz: float, others: str | None, home: str) -> dict[str, Program]:
    env = dict(os.environ)
    # memsight's first frame may come before its first sample ("headroom: waiting for the first sample…"):
    # its first figures are the headroom gauge's figure; the minimal app's first frame has its figures
    out = {
        "memsight": ([sys.executable, "-m", "tui.cli", "watch", "--hz", str(hz)], b"headroom",
                     rb"headroom \d", env),  # fmt: skip
        "minimal": ([sys.executable, "bench/minimal_monitor.py", "--hz", str(hz)], b"available",
                    rb"available \d", env),  # fmt: skip
    }
    if others:
        bpytop, glances = os.path.join(others, "bpytop"), os.path.join(others, "glances")
        if os.path.exists(bpytop):
            conf = pathlib.Path(home, ".config", "bpytop")
            conf.mkdir(parents=True, exist_ok=True)
            (conf / "bpytop.conf").write_text(f"update_ms={round(1000 / hz)}\nshow_init=False\n")
            out["bpytop"] = ([bpytop], b"mem", rb"mem", dict(env, HOME=home))
        if os.path.exists(glances):
            # glances refreshes at most once a second (-t 1): its figure is at 1 Hz whatever --hz is
            out["glances"] = ([glances, "-t", str(max(1.0, 1 / hz))], b"MEM", rb"MEM", env)
    return out


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def spread(values: list[float], fmt: str = ".2f") -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def side_by_side(
    hz: float, seconds: float, rounds: int, cols: int, rows: int, others: str | None, warmup: bool = True
) -> int:
    compile_memsight()
    with tempfile.TemporaryDirectory() as home:
        progs = programs(hz, others, home)
        names = list(progs)
        results: dict[str, list[dict]] = {name: [] for name in names}
        print(f"{hz:g} Hz, terminal {cols}x{rows}, {seconds:.0f} s windows, {rounds} rounds, "
              f"{os.cpu_count()} CPUs, load average before: {load()}")  # fmt: skip
        if warmup:
            # not counted: each program once to its first figures, the same for all, so that the first
            # program of the first round does not alone pay for files not yet in the page cache
            for name in names:
                argv, mark, figures, env = progs[name]
                measure(argv, mark, figures, 0.0, cols, rows, env, settle_s=0.0)
            print("warm-up: each program started once to its first figures, not counted")
        for r in range(rounds):
            order = names[r % len(names):] + names[: r % len(names)]
            for name in order:
                argv, mark, figures, env = progs[name]
                results[name].append(measure(argv, mark, figures, seconds, cols, rows, env))
            last = {n: results[n][-1] for n in order}
            cells = [f"{n} {x['cpu']:.2f}% {x['rss']:.0f} MiB" for n, x in last.items()]
            print(f"round {r + 1}: " + ", ".join(cells))
        print(f"load average after: {load()}")
    heads = ("CPU % of one core", "RSS MiB", "first frame s", "its CPU s", "first figures s")
    print(f"{'program':<10} {heads[0]:>24} {heads[1]:>22} {heads[2]:>22} {heads[3]:>22} {heads[4]:>22}")
    for name in names:
        rs = results[name]
        timed = name in ("memsight", "minimal")
        first = spread([x["first"] for x in rs], ".3f") if timed else "-"
        first_cpu = spread([x["first_cpu"] for x in rs], ".2f") if timed else "-"
        figures = spread([x["figures"] for x in rs], ".3f") if timed else "-"
        print(f"{name:<10} {spread([x['cpu'] for x in rs]):>24} {spread([x['rss'] for x in rs], '.1f'):>22} "
              f"{first:>22} {first_cpu:>22} {figures:>22}")  # fmt: skip
    mine, base = results["memsight"], results["minimal"]
    ratios = (("cpu", "CPU"), ("rss", "RSS"), ("first", "first frame"),
              ("first_cpu", "CPU by the first frame"), ("figures", "first figures"))  # fmt: skip
    for key, what in ratios:
        ratios = [m[key] / b[key] for m, b in zip(mine, base, strict=True)]
        print(f"memsight / minimal app, {what}: {spread(ratios)} (per round)")
    return 0


def first_frames(hz: float, starts: int, cols: int, rows: int) -> int:
    """The first frame alone, `starts` times for each of memsight and the minimal app, taking turns (who goes
    first alternating): three rounds of the CPU bench give three start-ups, too few for a figure whose spread
    on a shared VM (0.25-0.50 s for the same minimal app) is as wide as the difference measured."""
    compile_memsight()
    keys = (("first", "first frame s", ".3f"), ("first_cpu", "its CPU s", ".2f"),
            ("figures", "first figures s", ".3f"))  # fmt: skip
    progs = programs(hz, None, "")  # no others: their home folder is not used
    results: dict[str, list[dict]] = {name: [] for name in progs}
    print(f"first frames: {hz:g} Hz, terminal {cols}x{rows}, {starts} starts each, taking turns, "
          f"{os.cpu_count()} CPUs, load average before: {load()}")  # fmt: skip
    for i in range(starts + 1):  # the first pair warms the page cache and is not counted
        for name in list(progs)[:: 1 if i % 2 else -1]:
            argv, mark, figures, env = progs[name]
            taken = measure(argv, mark, figures, 0.0, cols, rows, env, settle_s=0.0)
            if i:
                results[name].append(taken)
    print(f"load average after: {load()}")
    heads = " ".join(f"{head:>30}" for _, head, _ in keys)
    print(f"{'program':<10} {heads}   (median (min-max) [quartiles])")
    for name in results:
        cells = [f"{quartiles([x[key] for x in results[name]], fmt):>30}" for key, _, fmt in keys]
        print(f"{name:<10} " + " ".join(cells))
    for key, what, _ in keys:
        pairs = zip(results["memsight"], results["minimal"], strict=True)
        ratios = quartiles([m[key] / b[key] for m, b in pairs])
        print(f"memsight / minimal app, {what[:-2]}: {ratios} (per pair)")
    return 0


def quartiles(values: list[float], fmt: str = ".2f") -> str:
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"{spread(values, fmt)} [{q1:{fmt}}-{q3:{fmt}}]"


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
    parser.add_argument("--hz", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", default="160x48", help="terminal COLSxROWS")
    parser.add_argument("--others", metavar="BINDIR", help="a folder with bpytop and/or glances (a venv bin)")
    parser.add_argument(
        "--threads", action="store_true", help="only the per-thread split of the Monitor's sampling threads"
    )
    parser.add_argument(
        "--starts", type=int, metavar="N", help="first frames only: N starts of memsight and the minimal app"
    )
    parser.add_argument(
        "--no-warmup", action="store_true", help="no uncounted start of each program before the rounds"
    )
    args = parser.parse_args(argv)
    if args.threads:
        split = measure_threads(args.hz, args.seconds)
        cells = ", ".join(f"{name} {pct:.2f}%" for name, pct in sorted(split.items()))
        print(f"{args.hz:g} Hz: {cells}; all sampling threads {sum(split.values()):.2f}% of one core")
        return 0
    cols, rows = (int(x) for x in args.size.split("x"))
    if args.starts is not None:
        if args.starts < 2:
            parser.error("--starts needs at least 2 start-ups (their quartiles are reported)")
        return first_frames(args.hz, args.starts, cols, rows)
    others = args.others or (os.path.dirname(shutil.which("bpytop") or "") or None)
    return side_by_side(args.hz, args.seconds, args.rounds, cols, rows, others, not args.no_warmup)


if __name__ == "__main__":
    from taken import finish  # bench/taken.py: the date and machine, for the README

    sys.exit(finish(main()))
