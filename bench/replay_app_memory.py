"""How the interactive replay's resident memory moves over a long play: the whole app (`memsight replay FILE`
on the Live screen, 160x48, Textual's headless driver) playing bench/day_recording.py's recording at --speed,
one frame per refresh at 2 Hz as the player and the app's timer would make them, without waiting for the
wall clock. Run by hand, not a test (5 h of a 6 h recording at 64x: about 2 minutes):

    .venv/bin/python bench/replay_app_memory.py --hours 6 --play 5 --speed 64

Every --every frames it prints the process's resident memory (VmRSS), the memory pymalloc holds in arenas,
and with --trace (slower) the memory tracemalloc traces; at the end, how much of it the replay's
checkpoints held (with --trace), the objects that grew most in number since the first frame
(gc.get_objects()) and, for the kind the screen holds most (Textual's Strip), which widgets hold them. The
recording is made once (and reused) as bench/replay_cost.py makes it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import pathlib
import re
import sys
import time
import tracemalloc

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def arenas() -> str:
    """What pymalloc holds in arenas now (sys._debugmallocstats, which writes to the C stderr; under
    tracemalloc it leaves the arenas out)."""
    found = re.search(r"arenas \* \d+ bytes/arena\s*=\s*([\d,]+)", malloc_stats())
    if found is None:
        return "pymalloc arenas not shown"
    return f"pymalloc arenas {int(found.group(1).replace(',', '')) / 2**20:.1f} MiB"


def malloc_stats() -> str:
    """sys._debugmallocstats()'s report (pymalloc's arenas, pools, blocks): it writes to C's stderr."""
    import ctypes  # noqa: PLC0415
    import os  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    flush = ctypes.CDLL(None).fflush
    with tempfile.TemporaryFile() as out:
        flush(None)
        saved = os.dup(2)
        os.dup2(out.fileno(), 2)
        try:
            sys._debugmallocstats()
            flush(None)  # C stdio's stderr: written before it points back at the terminal
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        return out.read().decode(errors="replace")


def checkpoints_mib(monitor) -> float:
    """The traced memory the replay's checkpoints alone held (dropped: at the end only)."""
    gc.collect()
    with_them = tracemalloc.get_traced_memory()[0]
    monitor._checkpoints = []
    monitor._recent.clear()
    gc.collect()
    return (with_them - tracemalloc.get_traced_memory()[0]) / 2**20


def holder(obj, depth: int = 6) -> str:
    """The widget (class name and attribute) an object is reached from, walking its referrers."""
    from textual.dom import DOMNode  # noqa: PLC0415

    frontier, seen = [obj], set()
    for _ in range(depth):
        found = []
        for o in frontier:
            for r in gc.get_referrers(o):
                if id(r) in seen or type(r).__name__ in ("frame", "function", "cell", "list_iterator"):
                    continue
                seen.add(id(r))
                if isinstance(r, DOMNode):
                    return type(r).__name__
                if type(r) is dict:
                    for owner in gc.get_referrers(r):
                        if getattr(owner, "__dict__", None) is r and isinstance(owner, DOMNode):
                            key = next((k for k, v in r.items() if v is o), "?")
                            return f"{type(owner).__name__}.{key}"
                found.append(r)
        frontier = found[:100]
    return "(no widget)"


async def play(path: str, hours: float, speed: float, every: int, trace: bool) -> None:
    from collectors.replay import ReplayMonitor  # noqa: PLC0415
    from tui.app import MemsightApp  # noqa: PLC0415

    monitor = ReplayMonitor(path, speed=speed)
    app = MemsightApp(monitor, manage_monitor=False, title="memsight replay", source_label="replay")
    step = speed / app.refresh_hz  # recording seconds per frame
    end = min(monitor.duration_s, hours * 3600)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        if trace:
            tracemalloc.start()
        before = collections.Counter(type(o).__name__ for o in gc.get_objects())
        print(f"first frame: RSS {rss_mib():.1f} MiB, {arenas()}", flush=True)
        offset, frames, started = 0.0, 0, time.perf_counter()
        while offset < end:
            offset = min(offset + step, end)
            monitor.advance_to(offset)
            app.refresh_data()
            await pilot.pause()
            frames += 1
            if frames % every == 0 or offset >= end:
                wall = time.perf_counter() - started
                line = (f"{offset / 3600:5.2f} h played ({frames} frames, {wall:.0f} s): RSS {rss_mib():.1f} "
                        f"MiB, {arenas()}, {len(monitor._checkpoints)} "
                        f"checkpoints {monitor._checkpoint_every:.0f} s apart")  # fmt: skip
                if trace:
                    line += f"; traced {tracemalloc.get_traced_memory()[0] / 2**20:.1f} MiB"
                print(line, flush=True)
        after = collections.Counter(type(o).__name__ for o in gc.get_objects())
        grew = sorted(((after[k] - before.get(k, 0), k) for k in after), reverse=True)[:12]
        print("objects that grew most in number:", ", ".join(f"{k} +{n}" for n, k in grew))
        strips = [o for o in gc.get_objects() if type(o).__name__ == "Strip"]
        held = collections.Counter(holder(s) for s in strips[:: max(1, len(strips) // 200)])
        print(f"{len(strips)} Textual Strips, held (a sample of {sum(held.values())}) by:",
              ", ".join(f"{k} {n}" for k, n in held.most_common(6)))  # fmt: skip
        del strips
        if trace:
            print(f"the replay's checkpoints held {checkpoints_mib(monitor):.1f} MiB of the traced memory")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=6.0, help="the recording's length")
    parser.add_argument("--play", type=float, default=5.0, help="hours of it to play")
    parser.add_argument("--speed", type=float, default=64.0)
    parser.add_argument("--every", type=int, default=75, help="frames between reports")
    parser.add_argument("--trace", action="store_true", help="tracemalloc: the checkpoints' share (slower)")
    parser.add_argument("--dir", default="/tmp")
    args = parser.parse_args()
    from replay_cost import recording  # noqa: PLC0415  (bench/replay_cost.py makes and caches it)

    path = recording(args.hours, args.dir)
    asyncio.run(play(str(path), args.play, args.speed, args.every, args.trace))
    return 0


if __name__ == "__main__":
    from taken import finish  # bench/taken.py: the date and machine, for the README

    sys.exit(finish(main()))
