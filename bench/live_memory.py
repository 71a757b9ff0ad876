"""Where the Live screen's resident memory goes (issue 20's target: at most 45 MiB), beside the minimal
app's: `memsight watch` as it starts (the skeleton first, then the monitor and the plan), and
bench/minimal_monitor.py, each under Textual's headless driver at 160x48 in a process of its own, then the
Live screen again with its gap chart drawn as one line of text (what the chart costs: 2.0 MiB when it was
plotext's, about nothing since it draws its own braille). Run by hand, not a test (about a minute):

    .venv/bin/python bench/live_memory.py --seconds 15

Each program runs --seconds at 2 Hz, then reports its resident memory (VmRSS), the bytes pymalloc holds in
allocated blocks (sys._debugmallocstats; the small objects: code, modules, widgets, caches, data), and for
memsight the Textual Strips alive (a screen line as drawn, each with seven caches of its own) by the widget
that holds them (a sample), and the blocks freed when every widget's line cache is emptied (what they hold).
bench/monitor_cpu.py measures the resident size of the real terminal programs side by side; this one says what
it is made of.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def pymalloc_blocks_mib() -> float:
    from replay_app_memory import malloc_stats  # noqa: PLC0415

    found = re.search(r"bytes in allocated blocks\s*=\s*([\d,]+)", malloc_stats())
    return int(found.group(1).replace(",", "")) / 2**20 if found else float("nan")


def live_app(chart: bool):  # noqa: ANN201  (tui.app.MemsightApp)
    from tui import cmd_watch  # noqa: PLC0415
    from tui.app import MemsightApp  # noqa: PLC0415
    from tui.cli import build_parser  # noqa: PLC0415

    if not chart:
        from rich.text import Text  # noqa: PLC0415

        from tui.widgets.gap_chart import GapChart  # noqa: PLC0415

        GapChart.render = lambda self: Text("allocated / reserved / gap: not drawn (bench/live_memory.py)")
    argv = ["watch", "--hz", "2"]
    parser, _ = build_parser(argv)
    args = parser.parse_args(argv)
    config = cmd_watch.resolve_config(args)
    return MemsightApp(None, setup=lambda: cmd_watch.monitor_and_options(args, "watch", config),
                       title="memsight", source_label="this machine (live)",
                       first_status=cmd_watch.first_frame_status("this machine (live)"))  # fmt: skip


async def measure(program: str, seconds: float) -> dict:
    from replay_app_memory import holder, rss_mib  # noqa: PLC0415

    if program == "minimal":
        from minimal_monitor import MinimalMonitor  # noqa: PLC0415

        app = MinimalMonitor(2.0)
    else:
        app = live_app(chart=program == "memsight")
    async with app.run_test(size=(160, 48)):
        await asyncio.sleep(seconds)
        gc.collect()
        out = {"rss": rss_mib(), "blocks": pymalloc_blocks_mib(), "modules": len(sys.modules)}
        if program != "minimal":
            strips = [o for o in gc.get_objects() if type(o).__name__ == "Strip"]
            out["strips"] = len(strips)
            sample = strips[:: max(1, len(strips) // 200)]  # each holder() walks the referrers: slow
            held = collections.Counter(holder(s) for s in sample).most_common(8)
            out["held"] = [(name, round(n * len(strips) / len(sample))) for name, n in held]
            del strips
            for widget in app.screen.walk_children(with_self=True):
                widget._styles_cache.clear()
            gc.collect()
            out["caches"] = out["blocks"] - pymalloc_blocks_mib()
        app.exit()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--program", choices=("memsight", "memsight-no-chart", "minimal"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args()
    if args.program:
        print(json.dumps(asyncio.run(measure(args.program, args.seconds))))
        return 0
    got = {}
    for program in ("minimal", "memsight", "memsight-no-chart"):
        command = [sys.executable, __file__, "--program", program, "--seconds", str(args.seconds)]
        proc = subprocess.run(command, capture_output=True, text=True, check=True, cwd=REPO)
        got[program] = json.loads(next(x for x in reversed(proc.stdout.splitlines()) if x.startswith("{")))
    base = got["minimal"]
    print(f"headless, 160x48, 2 Hz, after {args.seconds:g} s:")
    for program, r in got.items():
        line = (f"  {program:<18} RSS {r['rss']:5.1f} MiB ({r['rss'] - base['rss']:+5.1f}), pymalloc blocks "
                f"{r['blocks']:5.1f} MiB ({r['blocks'] - base['blocks']:+5.1f}), {r['modules']} modules")
        if "strips" in r:
            line += f"; {r['strips']:,} Strips, widgets' line caches {r['caches']:.2f} MiB of the blocks"
        print(line)
    held = ", ".join(f"{name} {n}" for name, n in got["memsight"]["held"])
    print(f"  memsight's Strips by holder (a sample of about 200, scaled): {held}")
    return 0


if __name__ == "__main__":
    from taken import finish  # noqa: PLC0415

    sys.exit(finish(main()))
