"""The anchor the monitor benches measure memsight against: the smallest memory monitor one would write with
Textual and psutil. At `--hz` it reads psutil.virtual_memory() and swap_memory() and lists the 12 processes
holding the most resident memory (psutil.process_iter), then shows them in one Static. Nothing else: no
charts, no history, no plan. Run by hand (bench/monitor_cpu.py starts it in a pseudo-terminal):

    python bench/minimal_monitor.py --hz 2
"""

from __future__ import annotations

import argparse

import psutil
from textual.app import App, ComposeResult
from textual.widgets import Static

FIRST_FRAME_MARK = "available"  # bench/monitor_cpu.py: the first frame is drawn once this is on screen
TOP = 12
GIB = 2**30


def snapshot() -> str:
    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    procs = []
    for p in psutil.process_iter(["pid", "name", "memory_info"]):
        mem = p.info["memory_info"]
        if mem is not None:
            procs.append((mem.rss, p.info["pid"], p.info["name"] or "?"))
    procs.sort(reverse=True)
    lines = [
        f"memory {vm.total / GIB:.2f} GiB, used {vm.used / GIB:.2f}, "
        f"{FIRST_FRAME_MARK} {vm.available / GIB:.2f}; swap used {swap.used / GIB:.2f} GiB",
        "",
        f"{'pid':>8}  {'RSS GiB':>8}  name",
    ]
    lines += [f"{pid:>8}  {rss / GIB:>8.2f}  {name}" for rss, pid, name in procs[:TOP]]
    return "\n".join(lines)


class MinimalMonitor(App):
    BINDINGS = [("q", "quit", "Quit")]

    def __init__(self, hz: float) -> None:
        super().__init__()
        self.hz = hz

    def compose(self) -> ComposeResult:
        yield Static(id="memory")

    def on_mount(self) -> None:
        self.poll()
        self.set_interval(1.0 / self.hz, self.poll)

    def poll(self) -> None:
        self.query_one("#memory", Static).update(snapshot())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hz", type=float, default=2.0)
    MinimalMonitor(parser.parse_args().hz).run()


if __name__ == "__main__":
    main()
