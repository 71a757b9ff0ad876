"""The interactive replay's seeks ahead, before and after scan() (the replay keys a and p start it) has made
its index, on bench/day_recording.py's recording (made once, as bench/replay_cost.py makes it). Run by hand,
not a test (a 6 h recording: about 3 minutes here):

    .venv/bin/python bench/replay_seek.py --hours 6

The replay is opened as the app opens it (advance_to(0): the first tick's state built). Each figure is the
CPU time (this thread's: time.thread_time) and the resident memory after it:
  walk        a seek from the start to --to of the recording with no index: a state built at every tick
  scan        scan(): the whole recording walked once on its own thread (as the keys do), the index kept
  ahead       seeks ahead after the scan, each from the start again (a seek back to 0 first, not counted),
              to 25%, 50% and --to: from the index's latest checkpoint before the target
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def timed(action) -> float:
    started = time.thread_time()
    action()
    return time.thread_time() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=6.0)
    parser.add_argument("--to", type=float, default=0.9, help="the far seek's share of the recording")
    parser.add_argument("--dir", default="/tmp")
    args = parser.parse_args()
    from replay_app_memory import rss_mib  # noqa: PLC0415
    from replay_cost import recording  # noqa: PLC0415

    from collectors.replay import ReplayMonitor  # noqa: PLC0415

    path = recording(args.hours, args.dir)
    replay = ReplayMonitor(path)
    replay.advance_to(0.0)
    far = replay.duration_s * args.to
    walk = timed(lambda: replay.seek(far))
    print(f"{args.hours:g} h recording: walk to {args.to:.0%} with no index: {walk:.2f} s CPU, "
          f"RSS {rss_mib():.1f} MiB")  # fmt: skip
    replay.seek(0.0)
    started = time.process_time()
    while replay.scan_progress() is not None:
        time.sleep(0.05)
    scan = time.process_time() - started
    print(f"scan (its thread): {scan:.2f} s CPU, index of {len(replay._ahead)} checkpoints, "
          f"RSS {rss_mib():.1f} MiB")  # fmt: skip
    for share in (0.25, 0.5, args.to):
        replay.seek(0.0)
        cost = timed(lambda share=share: replay.seek(replay.duration_s * share))
        print(f"seek ahead to {share:.0%} from the start after the scan: {cost:.2f} s CPU "
              f"({cost / walk:.3f} of the walk to {args.to:.0%}), RSS {rss_mib():.1f} MiB")  # fmt: skip
    replay.close()
    return 0


if __name__ == "__main__":
    from taken import finish  # noqa: PLC0415

    sys.exit(finish(main()))
