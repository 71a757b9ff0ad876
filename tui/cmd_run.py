"""`memsight run [options] [--] CMD ...`: run CMD with the in-process agent injected, and watch it.

The agent gets in through a bootstrap `sitecustomize.py` (collectors/bootstrap) put first on PYTHONPATH,
with MEMSIGHT_AGENT=1; children inherit both, so `memsight run -- vllm serve ...` needs no code change.
memsight forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT to CMD and exits with CMD's status (128+N if a signal N
killed it). With --headless it only records (--record FILE) until CMD exits; otherwise it opens the app.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys

FORWARDED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--headless", action="store_true", help="no UI: sample (and record) until CMD exits")
    parser.add_argument("--record", metavar="FILE", help="record every source (OS, NVML, each agent) to FILE")
    parser.add_argument(
        "--json",
        action="store_true",
        help="after CMD exits, print the recording's summary (as `memsight replay --json`)",
    )
    parser.add_argument("--hz", type=float, default=2.0, help="monitor sampling rate (default 2 Hz)")
    parser.add_argument("--agent-hz", type=float, default=10.0, help="in-process agent rate (default 10 Hz)")
    parser.add_argument("--agent-dir", metavar="DIR", help="where agents write their ring files")
    add_export_arguments(parser)
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the command to run")


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    """--prometheus and --vllm-url (shared by `memsight run` and `memsight watch`)."""
    parser.add_argument(
        "--prometheus",
        metavar="[HOST:]PORT",
        help="serve everything sampled as Prometheus text on http://HOST:PORT/metrics "
        "(HOST defaults to 127.0.0.1; write 0.0.0.0:PORT to listen on every interface)",
    )
    parser.add_argument(
        "--vllm-url",
        metavar="URL",
        help="scrape a vLLM server's Prometheus /metrics (e.g. http://localhost:8000) once a second: "
        "KV cache usage, running/waiting requests, preemptions, prefix cache hits",
    )


def bootstrap_dir() -> pathlib.Path:
    import collectors  # noqa: PLC0415

    return pathlib.Path(collectors.__file__).resolve().parent / "bootstrap"


def child_environment(base: dict[str, str], agent_dir: str, agent_hz: float) -> dict[str, str]:
    """CMD's environment: bootstrap first on PYTHONPATH, then memsight's own packages, then the user's."""
    import collectors  # noqa: PLC0415

    package_root = str(pathlib.Path(collectors.__file__).resolve().parent.parent)
    paths = [str(bootstrap_dir()), package_root]
    if base.get("PYTHONPATH"):
        paths.append(base["PYTHONPATH"])
    env = dict(base)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["MEMSIGHT_AGENT"] = "1"
    env["MEMSIGHT_AGENT_DIR"] = agent_dir
    env["MEMSIGHT_AGENT_HZ"] = str(agent_hz)
    return env


def exit_status(returncode: int) -> int:
    """subprocess's -N (killed by signal N) -> the shell's 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def main(args: argparse.Namespace, name: str) -> int:
    from collectors import agent_format  # noqa: PLC0415
    from collectors.errors import CollectorError  # noqa: PLC0415
    from collectors.monitor import Monitor  # noqa: PLC0415

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise CollectorError(
            "memsight run needs a command: memsight run [--headless --record FILE] -- CMD ..."
        )
    if args.json and not args.record:
        raise CollectorError("--json summarizes the recording: give --record FILE too")
    agent_dir = agent_format.ensure_private_dir(args.agent_dir or agent_format.default_agent_dir())
    monitor = Monitor(
        hz=args.hz,
        agent_dir=agent_dir,
        record_to=args.record,
        discover_interval_s=0.5,
        vllm_url=args.vllm_url,
        prometheus=args.prometheus,
    )
    monitor.start()
    if monitor.exporter is not None and (args.headless or args.json):
        print(f"memsight: serving {monitor.exporter.url}", file=sys.stderr)
    try:
        child = subprocess.Popen(cmd, env=child_environment(dict(os.environ), agent_dir, args.agent_hz))
    except OSError as exc:
        monitor.stop()
        raise CollectorError(f"cannot start {cmd[0]!r}: {exc}") from exc

    def forward(signum, _frame):
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    previous = {}
    for sig_name in FORWARDED_SIGNALS:
        sig = getattr(signal, sig_name, None)
        if sig is not None:
            previous[sig] = signal.signal(sig, forward)
    try:
        if args.headless or args.json:
            returncode = child.wait()
        else:
            from tui.app import run_app  # noqa: PLC0415  (textual only when a UI is wanted)

            run_app(monitor, title=f"memsight run: {' '.join(cmd)[:60]}", source_label=f"pid {child.pid}")
            if child.poll() is None:
                print(
                    f"memsight: monitor closed; waiting for {cmd[0]} (pid {child.pid}); Ctrl-C stops it",
                    file=sys.stderr,
                )
            returncode = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        monitor.sample_once()  # the child's last records and the OS after it exited
        monitor.stop()
    if args.json:
        from collectors.recorder import read_recording, summarize  # noqa: PLC0415

        print(json.dumps(summarize(read_recording(args.record)), indent=1))
    return exit_status(returncode)
