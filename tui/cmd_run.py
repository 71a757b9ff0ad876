"""`memsight run [options] [--] CMD ...`: run CMD with the in-process agent injected, and watch it.

The agent gets in through a bootstrap `sitecustomize.py` (collectors/bootstrap) put first on PYTHONPATH,
with MEMSIGHT_AGENT=1; children inherit both, so `memsight run -- vllm serve ...` needs no code change.
memsight forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT to CMD and exits with CMD's status (128+N if a signal N
killed it); such a signal always ends memsight: if CMD outlives it by STOP_GRACE_S, CMD is killed.
With --headless it only records (--record FILE) until CMD exits, CMD keeping the terminal's stdout/stderr;
with --json stdout is memsight's alone (the summary), so CMD's stdout goes to stderr, or to --log FILE.
Otherwise it opens the app, and CMD's stdout/stderr go to a log file (--log, default
./memsight-run-<memsight's pid>.log) whose last lines the Live screen shows; when CMD exits the app stays open
on the final state with a banner (or closes, with --exit-with-child).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time

from tui.options import add_agent_record_argument, add_export_arguments, argparse_type, parse_size

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from typing import Any

FORWARDED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
STOP_GRACE_S = 10.0  # after a stop signal, how long CMD may take to exit before it is killed


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--headless", action="store_true", help="no UI: sample (and record) until CMD exits")
    parser.add_argument("--record", metavar="FILE", help="record every source (OS, NVML, each agent) to FILE")
    _add_flight_arguments(parser)
    _add_output_arguments(parser)
    _add_agent_arguments(parser)
    _add_vllm_arguments(parser)
    add_export_arguments(parser)
    add_agent_record_argument(parser)
    from tui.cmd_watch import add_display_arguments  # noqa: PLC0415  (one definition of the shared options)

    add_display_arguments(parser)
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the command to run")


def _add_flight_arguments(parser: argparse.ArgumentParser) -> None:
    # the flight recorder's figures imported here, not at the top: `memsight watch` borrows this module's
    # export options, and its first frame does not wait for the recorder's modules (issue 20)
    from collectors.flight import DEFAULT_LIMIT_BYTES, KEEP_RUNS  # noqa: PLC0415

    flight = parser.add_argument_group(
        "flight recorder (on by default: the last minutes of the run stay on disk if the host hangs)"
    )
    flight.add_argument(
        "--no-flight-recorder",
        action="store_true",
        help="do not keep the rolling recording (it is off anyway with --record or --json, whose recording "
        "takes its place)",
    )
    flight.add_argument(
        "--flight-dir",
        metavar="DIR",
        help="where the rolling recording goes (default ~/.local/state/memsight/flight/run-DATE-TIME-PID; "
        f"the last {KEEP_RUNS} runs are kept there)",
    )
    flight.add_argument(
        "--flight-size",
        metavar="SIZE",
        type=argparse_type(parse_size, "--flight-size", unit="MiB", minimum=1),
        default=DEFAULT_LIMIT_BYTES,
        help=f"its size limit (default {DEFAULT_LIMIT_BYTES // 2**20} MiB, in 8 segments: the oldest is "
        "deleted when a new one starts; flushed and fsync'ed to disk every 2 s)",
    )


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the summary and CMD's output go, and whether the UI outlives CMD."""
    parser.add_argument(
        "--json",
        action="store_true",
        help="after CMD exits, print the recording's summary (as `memsight replay --json`) on stdout, "
        "alone: CMD's own stdout then goes to stderr (or to --log FILE); implies --headless",
    )
    parser.add_argument(
        "--log",
        metavar="FILE",
        help="where CMD's stdout and stderr go (with the UI: default ./memsight-run-<pid>.log, whose last "
        "lines the Live screen shows; headless: default the terminal)",
    )
    parser.add_argument(
        "--exit-with-child",
        action="store_true",
        help="close the UI when CMD exits (default: keep it open on the final state)",
    )


def _add_agent_arguments(parser: argparse.ArgumentParser) -> None:
    """The injected agent's rate, directory and automatic tracking."""
    parser.add_argument("--agent-hz", type=float, default=10.0, help="in-process agent rate (default 10 Hz)")
    parser.add_argument("--agent-dir", metavar="DIR", help="where agents write their ring files")
    parser.add_argument(
        "--no-autotrack",
        action="store_true",
        help="do not track the models and KV caches transformers builds (sets MEMSIGHT_AUTOTRACK=0 for CMD); "
        "agent.track_model / track_kv in the script still work",
    )


def _add_vllm_arguments(parser: argparse.ArgumentParser) -> None:
    """What vLLM's plan needs when CMD's log does not say it."""
    parser.add_argument(
        "--vllm-version",
        metavar="V",
        help="a vLLM CMD: its version, for vLLM's plan on the Live screen when its log does not say it",
    )
    parser.add_argument(
        "--vllm-gpu",
        metavar="NAME",
        help="a vLLM CMD: the GPU whose recorded mem_get_info total its plan uses when NVML is not here and "
        "the log states none (the names `memsight explain --gpu` knows)",
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


class RunChild:
    """CMD as the app sees it (tui.app.ChildLike): its command line, pid, log file and exit status."""

    def __init__(
        self,
        process: subprocess.Popen,
        command: str,
        log_path: pathlib.Path | None,
        signals: StopSignals | None = None,
    ) -> None:
        self.process = process
        self.command = command
        self.pid = process.pid
        self.log_path = log_path
        self.signals = signals
        self._own: dict[int, bool] = {}  # pid -> CMD's own? (decided once: an exited agent stays counted)

    def family(self, pids) -> frozenset[int]:
        """CMD and those of `pids` in its session (CMD leads a session of its own with the UI: its children,
        e.g. vLLM's engine cores, stay in it) or descended from it (headless: CMD shares memsight's
        session); other agents in the same directory are someone else's. Each pid is decided the first
        time it is seen and remembered, so an agent that exited (its /proc gone) stays in the family."""
        own = {self.pid}
        for pid in pids:
            known = self._own.get(pid)
            if known is None:
                known = pid == self.pid or session_of(pid) == self.pid or descends_from(pid, self.pid)
                if len(self._own) < 65536:
                    self._own[pid] = known
            if known:
                own.add(pid)
        return frozenset(own)

    def stop(self) -> None:
        """Ctrl-C in the app: the same path as a SIGINT sent to memsight (forwarded, remembered for the
        grace, the app closed)."""
        if self.signals is not None:
            self.signals.interrupt()
        elif self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)

    def poll(self) -> int | None:
        code = self.process.poll()
        return None if code is None else exit_status(code)


def session_of(pid: int) -> int | None:
    """Field 6 (session id) of /proc/<pid>/stat; None when the process is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[3])
    except (OSError, IndexError, ValueError):
        return None


def descends_from(pid: int, ancestor: int, max_depth: int = 64) -> bool:
    """Whether `ancestor` is on pid's parent chain (field 4 of /proc/<pid>/stat, bounded)."""
    for _ in range(max_depth):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return False


class StopSignals:
    """While installed: SIGINT/SIGTERM/SIGHUP/SIGQUIT are forwarded to CMD (while it runs), remembered, and
    close the app if one is open. Python handlers run in the main thread, which is the app's event loop:
    `app.exit_soon` schedules the exit on that loop."""

    def __init__(self, child: subprocess.Popen) -> None:
        self.child = child
        self.app = None
        self.received: int | None = None
        self.received_at: float | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        for sig_name in FORWARDED_SIGNALS:
            sig = getattr(signal, sig_name, None)
            if sig is not None:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum, _frame) -> None:
        if self.child.poll() is None:
            try:
                self.child.send_signal(signum)
            except ProcessLookupError:
                pass
        if self.received is None:
            self.received, self.received_at = signum, time.monotonic()
        if self.app is not None:
            self.app.exit_soon(128 + signum)

    def interrupt(self) -> None:
        """Ctrl-C typed in the app (which reads the terminal raw, so no SIGINT is raised): handled as one."""
        self._handle(signal.SIGINT, None)

    def wait(self, grace_s: float = STOP_GRACE_S) -> int:
        """CMD's exit status; once a stop signal came, CMD gets grace_s to exit, then it is killed."""
        while True:
            try:
                return exit_status(self.child.wait(timeout=0.2))
            except subprocess.TimeoutExpired:
                pass
            if self.received_at is not None and time.monotonic() - self.received_at > grace_s:
                print(
                    f"memsight: pid {self.child.pid} still running {grace_s:g} s after "
                    f"{signal.Signals(self.received).name}; killing it",
                    file=sys.stderr,
                )
                self.child.kill()


def flight_recorder(args: argparse.Namespace, record: str | None, hz: float):
    """The rolling recording `memsight run` keeps by default (collectors/flight.py); None when it is turned
    off or a full recording (--record, --json's) takes its place."""
    if args.no_flight_recorder or record is not None:
        return None
    from collectors.flight import FlightRecorder, flight_root, new_run_dir  # noqa: PLC0415

    directory = pathlib.Path(args.flight_dir) if args.flight_dir else new_run_dir(flight_root())
    return FlightRecorder(directory, hz=hz, limit_bytes=args.flight_size)


def default_log_path() -> pathlib.Path:
    return pathlib.Path(f"memsight-run-{os.getpid()}.log")


def copy_output(source, log_file) -> threading.Thread:  # noqa: ANN001  (a pipe; an open binary file)
    """Copy CMD's output to memsight's stdout and to `log_file` as it comes (headless --record: the log is
    followed for an engine's figures, the user still sees the output). Never raises into the run."""

    def copy() -> None:
        out = sys.stdout.buffer
        try:
            for chunk in iter(lambda: source.read1(65536), b""):
                for sink in (out, log_file):
                    try:
                        sink.write(chunk)
                        sink.flush()
                    except (OSError, ValueError):
                        pass  # a closed stdout or a full disk: the other copy goes on
        finally:
            log_file.close()

    thread = threading.Thread(target=copy, name="memsight-output", daemon=True)
    thread.start()
    return thread


def main(args: argparse.Namespace, name: str) -> int:
    from collectors.errors import CollectorError  # noqa: PLC0415

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise CollectorError(
            "memsight run needs a command: memsight run [--headless --record FILE] -- CMD ..."
        )
    headless = args.headless or args.json
    record = args.record
    if args.json and not record:  # the summary is read from a recording: a temporary one, removed after
        fd, record = tempfile.mkstemp(prefix="memsight-run-", suffix=".jsonl")
        os.close(fd)
        temporary_record = record
    else:
        temporary_record = None
    try:
        return _run(args, cmd, headless, record)
    finally:
        if temporary_record is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary_record)


def _run(args: argparse.Namespace, cmd: list[str], headless: bool, record: str | None) -> int:
    from collectors import agent_format  # noqa: PLC0415
    from tui.cmd_watch import resolve_config  # noqa: PLC0415
    from tui.config import ConfigError  # noqa: PLC0415

    try:
        config = resolve_config(args)
    except ConfigError as exc:
        print(f"memsight: {exc}", file=sys.stderr)
        return 2
    agent_dir = agent_format.ensure_private_dir(args.agent_dir or agent_format.default_agent_dir())
    monitor, flight = _start_monitor(args, config, agent_dir, record, headless)
    env = child_environment(dict(os.environ), agent_dir, args.agent_hz)
    if args.no_autotrack:
        env["MEMSIGHT_AUTOTRACK"] = "0"
    child, log_path, tee_to = _start_child(args, cmd, env, headless, record, monitor)
    tee = copy_output(child.stdout, tee_to) if tee_to is not None else None
    command = " ".join(cmd)
    run_child = RunChild(child, command, log_path if not headless else None)
    monitor.set_scope(run_child.family)  # the summary's peaks: this command's agents, not other runs'
    opened: list = []  # the app, once open (its summary froze when CMD ended)
    try:
        with StopSignals(child) as signals:
            run_child.signals = signals
            if not headless:
                _watch_in_app(args, cmd, config, monitor, run_child, signals, opened)
            returncode = signals.wait()
    finally:
        if child.poll() is None:  # memsight itself failed: do not leave CMD behind
            child.kill()
            child.wait()
        if tee is not None:
            tee.join(timeout=5)
        monitor.sample_once()  # the child's last records and the OS after it exited
        monitor.stop()  # a recording gets the summary as its last line
        if monitor.recording_failed is not None:  # disk full: said on exit too; CMD's status still counts
            print(f"memsight: {monitor.recording_failed}", file=sys.stderr)
        if flight is not None:
            print(f"memsight: flight recording in {flight.directory} (memsight replay it)", file=sys.stderr)
    summary = getattr(opened[0], "run_summary", None) if opened else None
    if summary is None:
        summary = monitor.state().summary
    if summary is not None:
        from tui.screens.run_summary import summary_lines  # noqa: PLC0415

        print("\n".join(f"memsight: {line}" for line in summary_lines(summary)), file=sys.stderr)
    if args.json:
        print(json.dumps(run_json(record, monitor.recording_failed, monitor.state()), indent=1))
    return returncode


def _start_monitor(
    args: argparse.Namespace, config: Any, agent_dir: str, record: str | None, headless: bool
) -> tuple[Any, Any]:
    """The monitor, started before CMD (a --prometheus port in use ends here, before any terminal change),
    scoped to no agent until CMD has a pid; and the flight recorder, if on."""
    from collectors.errors import CollectorError  # noqa: PLC0415
    from collectors.monitor import Monitor  # noqa: PLC0415

    flight = flight_recorder(args, record, config.refresh_hz)
    monitor = Monitor(
        hz=config.refresh_hz,
        agent_dir=agent_dir,
        record_to=record,
        recorder=flight,
        peers=args.peer,
        discover_interval_s=0.5,
        keep_dead_s=math.inf,  # agents stay after they exit: the Live screen keeps their last figures

        vllm_url=args.vllm_url,
        engine_url=args.engine_url,
        prometheus=args.prometheus,
        alert_options=config.thresholds,
        agent_record_hz=args.agent_record_hz,
    )
    monitor.set_scope(lambda pids: frozenset())  # until CMD has a pid, no agent is this run's
    monitor.start()
    if not headless:
        from tui.cli import require_terminal  # noqa: PLC0415

        try:
            require_terminal()  # before CMD starts: no command left running behind a refusal
        except CollectorError:
            monitor.stop()
            raise
    if monitor.exporter is not None:
        print(f"memsight: serving {monitor.exporter.url}", file=sys.stderr)
    if flight is not None:
        print(
            f"memsight: flight recording (the last {flight.limit_bytes / 2**20:.0f} MiB of this run, on disk "
            f"every {flight.sync_interval_s:g} s) in {flight.directory}; --no-flight-recorder turns it off",
            file=sys.stderr,
        )
    return monitor, flight


def _open_for_child(path: Any, monitor: Any) -> Any:
    from collectors.errors import CollectorError  # noqa: PLC0415

    try:
        return open(path, "wb")  # noqa: SIM115  (closed once Popen has its copy, or when the tee ends)
    except OSError as exc:
        monitor.stop()
        raise CollectorError(f"cannot write the log file {path}: {exc}") from exc


def _start_child(
    args: argparse.Namespace, cmd: list[str], env: dict, headless: bool, record: str | None, monitor: Any
) -> tuple[subprocess.Popen, pathlib.Path | None, Any]:
    """CMD started with its output where the mode wants it; the log memsight follows (an engine's own
    figures from it: SGLang, llama.cpp, Ollama), and the file a headless --record copies CMD's output to."""
    from collectors.errors import CollectorError  # noqa: PLC0415

    log_path = None
    log_file = None
    popen_kwargs: dict = {}
    tee_to = None  # headless --record without --log: CMD's output is copied to a log memsight follows
    if headless and record and not (args.log or args.json):
        log_path = default_log_path()
        tee_to = _open_for_child(log_path, monitor)
        popen_kwargs = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    if headless and (args.log or args.json):
        # --json: stdout carries the summary alone, so CMD's stdout joins its stderr (or the --log file)
        log_file = _open_for_child(args.log, monitor) if args.log else None
        popen_kwargs = {
            "stdout": log_file if log_file is not None else sys.stderr.fileno(),
            "stderr": subprocess.STDOUT if log_file is not None else None,
        }
    if not headless:
        # The app owns the terminal: CMD's output goes to a file (the Live screen tails it), its stdin is
        # closed, and it gets its own session so terminal-generated signals reach it only through memsight.
        log_path = pathlib.Path(args.log) if args.log else default_log_path()
        log_file = _open_for_child(log_path, monitor)
        env.setdefault("PYTHONUNBUFFERED", "1")  # a Python CMD's lines reach the log as they are printed
        popen_kwargs = {
            "stdin": subprocess.DEVNULL,
            "stdout": log_file,
            "stderr": subprocess.STDOUT,
            "start_new_session": True,
        }
    try:
        child = subprocess.Popen(cmd, env=env, **popen_kwargs)
    except OSError as exc:
        monitor.stop()
        raise CollectorError(f"cannot start {cmd[0]!r}: {exc}") from exc
    finally:
        if popen_kwargs and log_file is not None:
            log_file.close()
    followed = log_path
    if followed is None and headless and args.log:
        followed = pathlib.Path(args.log)
    if followed is not None:
        monitor.follow_log(followed)
    return child, log_path, tee_to


def _watch_in_app(
    args: argparse.Namespace,
    cmd: list[str],
    config: Any,
    monitor: Any,
    run_child: RunChild,
    signals: Any,
    opened: list,
) -> None:
    """The Live screen while CMD runs; after it closes, what happens to CMD is said (the caller waits)."""
    from tui.app import run_app  # noqa: PLC0415  (textual only when a UI is wanted)
    from tui.cmd_watch import display_options  # noqa: PLC0415

    child = run_child.process

    def ready(app) -> None:
        signals.app = app
        opened.append(app)

    run_app(
        monitor,
        title=f"memsight run: {run_child.command[:60]}",
        source_label=f"pid {child.pid}",
        manage_monitor=False,
        child=run_child,
        vllm_hints={"version": args.vllm_version, "gpu": args.vllm_gpu},
        exit_with_child=args.exit_with_child,
        app_ready=ready,
        **display_options(config),
    )
    signals.app = None
    print(f"memsight: the output of {cmd[0]} is in {run_child.log_path}", file=sys.stderr)
    if child.poll() is None and signals.received is not None:
        print(
            f"memsight: {signal.Signals(signals.received).name} passed to {cmd[0]} "
            f"(pid {child.pid}); it is killed if still running in {STOP_GRACE_S:g} s",
            file=sys.stderr,
        )
    if child.poll() is None and signals.received is None:
        print(
            f"memsight: monitor closed; waiting for {cmd[0]} (pid {child.pid}); Ctrl-C stops it",
            file=sys.stderr,
        )


def run_json(record: str, recording_failed: str | None, state) -> dict:  # noqa: ANN001  (MonitorState)
    """`run --json`'s document: the recording's summary (as `memsight replay --json`). When recording stopped
    (disk full), the cause is in it ("recording_failed"), the sources and alerts are what reached the file
    (none when nothing did: then the monitor's last alerts), and the summary is the monitor's own, which the
    file lost."""
    from collectors.errors import CollectorError  # noqa: PLC0415
    from collectors.recording import read_recording  # noqa: PLC0415
    from collectors.recording_summary import summarize  # noqa: PLC0415
    from collectors.summary import alert_to_json, summary_to_json  # noqa: PLC0415

    if recording_failed is None:
        return summarize(read_recording(record))
    try:
        doc = summarize(read_recording(record))
    except CollectorError as exc:
        doc = {"unreadable": str(exc), "sources": [], "alerts": [alert_to_json(a) for a in state.alerts]}
    doc["recording_failed"] = recording_failed
    doc["summary"] = None if state.summary is None else summary_to_json(state.summary)
    doc["summary_from"] = "the monitor (the recording stopped before its end)"
    return doc
