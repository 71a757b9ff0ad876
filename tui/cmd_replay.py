"""`memsight replay FILE [--json] [--speed X]`: open a recording (or print its summary as JSON), with the same
display options (refresh rate, thresholds, plan inputs, --config) as `memsight watch`."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    from tui.cmd_watch import add_display_arguments  # noqa: PLC0415

    parser.add_argument(
        "file",
        help="a recording made with `memsight run --headless --record FILE`, or the directory of a flight "
        "recording (`memsight run` keeps one by default: it says where)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help='print {"sources": [{"id", "kind", "pid", "samples", "start", "end", "fields", ...}], "alerts": '
        '[...], "summary": {...}} (see the README)',
    )
    parser.add_argument("--speed", type=float, default=1.0, help="playback speed (1 = as recorded)")
    parser.add_argument("--loop", action="store_true", help="start again at the end")
    add_display_arguments(parser)


def app_arguments(args: argparse.Namespace) -> tuple:
    """(ReplayMonitor, run_app keyword arguments); the monitor is not started yet."""
    from collectors.replay import ReplayMonitor  # noqa: PLC0415
    from tui.cmd_watch import display_options, resolve_config  # noqa: PLC0415
    from tui.config import ConfigError  # noqa: PLC0415

    if args.speed <= 0:
        raise ConfigError(f"--speed must be positive, got {args.speed}")
    config = resolve_config(args)
    path, ends = read_any(args.file)
    monitor = ReplayMonitor(path, speed=args.speed, loop=args.loop, alert_options=config.thresholds)
    label = f"replay: {monitor.describe()}"
    options = {
        "title": "memsight replay",
        "source_label": label if ends is None else f"{label} · flight recording: {ends.sentence()}",
        **display_options(config),
    }
    return monitor, options


def read_any(path: str):
    """(a recording file to stream, FlightEnd or None): the file itself, or a flight recording's directory
    joined into one file (collectors/flight.py)."""
    import os  # noqa: PLC0415

    if os.path.isdir(path):
        from collectors.flight import flight_end, joined_file  # noqa: PLC0415

        return str(joined_file(path)), flight_end(path)
    return path, None


def main(args: argparse.Namespace, name: str) -> int:
    from collectors.recording import RecordingReader  # noqa: PLC0415
    from collectors.recording_summary import summarize  # noqa: PLC0415

    if args.json:
        path, ends = read_any(args.file)
        with RecordingReader(path) as reader:  # one pass, memory independent of the file's length
            doc = summarize(reader)
        if ends is not None:
            doc["flight"] = {"ends": ends.sentence(), "last_t": ends.last_t, "closed": ends.closed}
        doc["summary_from"] = "recorded"
        if doc["summary"] is None:  # a recording made before summaries were recorded (or cut): replay it once
            from collectors.replay import ReplayMonitor  # noqa: PLC0415
            from collectors.summary import summary_to_json  # noqa: PLC0415

            scanned = ReplayMonitor(path).scan()
            doc["summary"] = None if scanned is None else summary_to_json(scanned)
            doc["summary_from"] = "replayed with the default thresholds"
        json.dump(doc, sys.stdout, indent=1)  # written as it is made: a day's document is a string of 2 MB
        print()
        return 0
    from tui.config import ConfigError  # noqa: PLC0415  (the config file is read by the screen's path only)

    try:
        monitor, options = app_arguments(args)
    except ConfigError as exc:
        print(f"memsight: {exc}", file=sys.stderr)
        return 2
    from tui.app import run_app  # noqa: PLC0415

    return int(run_app(monitor, **options) or 0)
