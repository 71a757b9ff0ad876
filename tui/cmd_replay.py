"""`memsight replay FILE [--json] [--speed X]`: open a recording (or print its summary as JSON)."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("file", help="a recording made with `memsight run --headless --record FILE`")
    parser.add_argument(
        "--json",
        action="store_true",
        help='print {"sources": [{"id", "kind", "pid", "samples", "start", "end", "fields"}]}',
    )
    parser.add_argument("--speed", type=float, default=1.0, help="playback speed (1 = as recorded)")
    parser.add_argument("--loop", action="store_true", help="start again at the end")


def main(args: argparse.Namespace, name: str) -> int:
    from collectors.recorder import read_recording, summarize  # noqa: PLC0415

    if args.json:
        print(json.dumps(summarize(read_recording(args.file)), indent=1))
        return 0
    from collectors.replay import ReplayMonitor  # noqa: PLC0415
    from tui.app import run_app  # noqa: PLC0415

    monitor = ReplayMonitor(args.file, speed=args.speed, loop=args.loop)
    return int(run_app(monitor, title="memsight replay", source_label=f"replay: {monitor.describe()}") or 0)
