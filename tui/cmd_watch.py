"""`memsight` / `memsight watch` (this machine, every agent found, NVML if present) and `memsight demo`
(the same app fed by the bundled real recording, labelled with where and how it was made).

`add_display_arguments` and `display_options` are shared with `memsight run` and `memsight replay`, so refresh
rate, thresholds, plan inputs and the config file mean the same thing everywhere. The options need only
tui/options.py: the config file's reader (with the collectors' alert options) is imported by the functions
that read it, so `memsight replay FILE --json` and the --help of these commands do not pay for it.
"""

from __future__ import annotations

import argparse
import sys

from tui.options import (
    DEFAULT_MODEL,
    add_plan_input_arguments,
    argparse_type,
    parse_number,
    parse_refresh_hz,
    parse_size,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    import pathlib
    from typing import Any

    from tui.config import Config, PlanDefaults

ALL_PROCESSES = 10_000  # "every process" on any ordinary machine


def add_display_arguments(parser: argparse.ArgumentParser) -> None:
    """Options every memsight screen shares: refresh rate, thresholds, plan inputs, config file."""
    parser.add_argument(
        "--config", metavar="FILE", help="config file (default ~/.config/memsight/config.toml)"
    )
    parser.add_argument(
        "--hz",
        type=argparse_type(parse_refresh_hz, "--hz"),
        metavar="HZ",
        help="refresh rate of the screen and sampling (default 2)",
    )
    group = parser.add_argument_group(
        "thresholds (alerts and the headroom gauge; sizes in GiB or with a unit)"
    )
    for flag, what in (
        ("--headroom-warn", "warn when headroom is under this (default 8 GiB)"),
        ("--headroom-critical", "critical under this (default 2 GiB)"),
        ("--new-process", "alert on a new process over this (default 1 GiB)"),
        ("--growth", "alert on a process growing more than this in 30 s (default 2 GiB)"),
    ):
        group.add_argument(flag, type=argparse_type(parse_size, flag), metavar="SIZE", help=what)
    group.add_argument(
        "--frag-fraction",
        type=argparse_type(parse_number, "--frag-fraction"),
        metavar="F",
        help="fragmentation: gap over F of reserved (default 0.3)",
    )
    group.add_argument(
        "--frag",
        type=argparse_type(parse_size, "--frag"),
        metavar="SIZE",
        help="... and over this (default 1 GiB)",
    )
    plan = parser.add_argument_group("plan inputs (editable live on the Plan screen)")
    plan.add_argument(
        "--model",
        help=f"catalog name, config.json or checkpoint path (default {DEFAULT_MODEL})",
    )
    add_plan_input_arguments(plan)
    plan.add_argument(
        "--os-reserve-gib",
        metavar="SIZE",
        type=argparse_type(parse_size, "--os-reserve-gib"),
        help="OS reserve of this machine's unified pool / host RAM for the plan (default: measured, MemTotal "
        "- MemAvailable - what memsight agents hold; the Live and Plan screens use the same figure)",
    )


def resolve_config(args: argparse.Namespace) -> Config:
    """The config file, then command-line options over it (sizes already in bytes: tui/options.py)."""
    from dataclasses import replace  # noqa: PLC0415

    from tui.config import load_config, merge_plan_args  # noqa: PLC0415

    config = load_config(args.config, required=args.config is not None)
    hz = config.refresh_hz if args.hz is None else args.hz
    updates: dict[str, Any] = {}
    for option, name in (
        ("headroom_warn", "headroom_warning_bytes"),
        ("headroom_critical", "headroom_critical_bytes"),
        ("new_process", "new_process_bytes"),
        ("growth", "growth_bytes"),
        ("frag_fraction", "fragmentation_fraction"),
        ("frag", "fragmentation_min_bytes"),
    ):
        value = getattr(args, option, None)
        if value is not None:
            updates[name] = value
    t = replace(config.thresholds, **updates) if updates else config.thresholds
    p = merge_plan_args(config.plan, args)
    # plan fields given (a flag, or the file): they win over what an agent's process loaded
    flags = frozenset(name for name in PLAN_FIELDS if getattr(args, name, None) is not None)
    explicit = plan_fields_given(config.plan) | flags
    return replace(config, refresh_hz=hz, thresholds=t, plan=p, explicit_plan=config.explicit_plan | explicit)


PLAN_FIELDS = ("model", "format", "kv_dtype", "context", "users", "tp")


def plan_fields_given(plan: PlanDefaults) -> frozenset[str]:
    """Plan fields the config file set to something other than the built-in default. A field set to
    exactly the default cannot be told from no value: there an agent's loaded model still wins (a flag
    always wins)."""
    from tui.config import PlanDefaults  # noqa: PLC0415

    defaults = PlanDefaults()
    return frozenset(name for name in PLAN_FIELDS if getattr(plan, name) != getattr(defaults, name))


def display_options(config: Config) -> dict[str, Any]:
    """Keyword arguments for tui.app.run_app from a resolved config."""
    from planner.budget import PlanInputs

    p = config.plan
    return {
        "refresh_hz": config.refresh_hz,
        "thresholds": config.thresholds,
        "plan_inputs": PlanInputs(
            model=p.model, format=p.format, kv_dtype=p.kv_dtype, context=p.context, users=p.users, tp=p.tp
        ),
        "unified_os_reserve_bytes": p.unified_os_reserve_bytes,
        "plan_explicit": config.explicit_plan,
    }


def recording_about(recording: pathlib.Path) -> dict[str, Any]:
    """The recording's sidecar (<name>.json: where, when and how it was made), {} when there is none."""
    import json  # noqa: PLC0415

    from tui.config import ConfigError  # noqa: PLC0415

    sidecar = recording.with_suffix(".json")
    try:
        about = json.loads(sidecar.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {sidecar}: {exc}") from None
    return about if isinstance(about, dict) else {}


def about_line(about: dict[str, Any]) -> str:
    """One line for the screen: where and how the recording was made."""
    parts = []
    if about.get("where"):
        parts.append(f"recorded on {about['where']}")
    if about.get("when_utc"):
        parts.append(f"at {about['when_utc']}")
    if about.get("made_with"):
        parts.append(f"with `{about['made_with']}`")
    return ", ".join(parts)


def demo_plan_options(
    about: dict[str, Any], recording: pathlib.Path, options: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    """If the sidecar names the recorded model's plan inputs ("plan": {"model": <config path relative to the
    recording>, ...}), the demo plans for that model unless the user gave --model."""
    plan = about.get("plan")
    if not isinstance(plan, dict) or args.model is not None or "model" not in plan:
        return options
    import pathlib  # noqa: PLC0415

    from planner.budget import PlanInputs

    fields = {k: v for k, v in plan.items() if k in PlanInputs.__dataclass_fields__}
    model = pathlib.Path(str(fields["model"]))
    fields["model"] = str(model if model.is_absolute() else recording.parent / model)
    return {**options, "plan_inputs": PlanInputs(**fields)}


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    add_display_arguments(parser)
    if name == "watch":
        from tui.options import add_agent_record_argument, add_export_arguments

        add_export_arguments(parser)
        add_agent_record_argument(parser)
        parser.add_argument(
            "--record", metavar="FILE", help="also record everything sampled to FILE (for replay)"
        )
        parser.add_argument("--agent-dir", metavar="DIR", help="where agents write their ring files")
        parser.add_argument(
            "--processes",
            type=int,
            default=ALL_PROCESSES,
            metavar="N",
            help=f"processes kept per sample for the Processes screen (default {ALL_PROCESSES})",
        )
    elif name == "demo":
        parser.add_argument("--speed", type=float, default=1.0, help="replay speed (1 = as recorded)")
        parser.add_argument(
            "--recording",
            choices=("manual", "transformers"),
            default="manual",
            help="which bundled recording: 'manual' (a torch script tracking its model and cache with "
            "agent.track_model / track_kv) or 'transformers' (an unmodified transformers generate script, "
            "tracked automatically)",
        )


def check_arguments(args: argparse.Namespace, name: str) -> None:
    """The options' errors (ConfigError) that the parser cannot tell, said before the screen opens."""
    from tui.config import ConfigError  # noqa: PLC0415

    if name == "demo" and args.speed <= 0:
        raise ConfigError(f"--speed must be positive, got {args.speed}")
    if name == "watch" and args.processes < 1:
        raise ConfigError(f"--processes must be at least 1, got {args.processes}")


def app_arguments(args: argparse.Namespace, name: str) -> tuple[Any, dict[str, Any]]:
    """(monitor, run_app keyword arguments) for `watch` or `demo`; the monitor is not started yet."""
    check_arguments(args, name)
    return monitor_and_options(args, name, resolve_config(args))


def monitor_and_options(args: argparse.Namespace, name: str, config: Config) -> tuple[Any, dict[str, Any]]:
    """app_arguments for checked arguments and a resolved config: what main() has run_app call after the
    first frame (the collectors and the planner are imported here)."""
    options = display_options(config)
    if name == "demo":
        from collectors.replay import ReplayMonitor, bundled_recording

        recording = bundled_recording(getattr(args, "recording", "manual"))
        monitor = ReplayMonitor(recording, speed=args.speed, alert_options=config.thresholds)
        about = recording_about(recording)
        options = demo_plan_options(about, recording, options, args)
        return monitor, {
            "title": "memsight demo",
            "source_label": f"demo (replay of a real recording): {monitor.describe()}",
            "source_detail": about_line(about),
            **options,
        }
    from collectors.monitor import Monitor
    from collectors.os_collector import OSCollector

    # The collector reads every process anyway to rank them; keeping them all costs nothing measurable
    # (bench/monitor_cpu.py) and lets the Processes screen list every process, not only the top 15.
    kwargs: dict[str, Any] = {
        "hz": config.refresh_hz,
        "os_collector": OSCollector(top_n=args.processes),
        "alert_options": config.thresholds,
        "vllm_url": args.vllm_url,
        "engine_url": args.engine_url,
        "prometheus": args.prometheus,
        "peers": args.peer,
        "agent_record_hz": args.agent_record_hz,
    }
    if args.record:
        kwargs["record_to"] = args.record
    if args.agent_dir:
        kwargs["agent_dir"] = args.agent_dir
    return Monitor(**kwargs), {"title": "memsight", "source_label": "this machine (live)", **options}


def first_frame_status(source_label: str, proc_root: str = "/proc") -> str:
    """memsight watch's status line before the monitor's first sample: host memory from one read of
    /proc/meminfo, so that the first frame has a figure (issue 20) before the collectors are imported. Without
    a readable /proc/meminfo (macOS) the line names the source alone: the monitor, started right after the
    first frame, says what it can read and what it cannot."""
    from planner.meminfo import parse_meminfo  # noqa: PLC0415  (standard library only)
    from tui.widgets.fmt import size  # noqa: PLC0415

    try:
        with open(f"{proc_root}/meminfo", encoding="ascii", errors="replace") as f:
            info = parse_meminfo(f.read())
    except OSError:
        return source_label
    total, available = info.get("MemTotal"), info.get("MemAvailable")
    if not total or available is None:
        return source_label
    # the figure first: at 80 columns the line's end is cut ("…")
    return f"{source_label} · memory available {size(available)} of {size(total)} · starting the monitor…"


def main(args: argparse.Namespace, name: str) -> int:
    from tui.config import ConfigError  # noqa: PLC0415

    try:
        check_arguments(args, name)
        config = resolve_config(args)
        from tui.app import run_app  # noqa: PLC0415

        # The first frame (the Live screen's skeleton) is drawn before the monitor and the plan inputs are
        # made (issue 20: it pays only for what it shows); what setup raises after it (a --prometheus port
        # in use: CollectorError, a demo's unreadable sidecar: ConfigError) run_app raises again once the
        # terminal is restored, and it ends as one `memsight: ...` line (exit 2)
        demo = name == "demo"
        return run_app(
            setup=lambda: monitor_and_options(args, name, config),
            title="memsight demo" if demo else "memsight",
            source_label="" if demo else "this machine (live)",
            first_status="" if demo else first_frame_status("this machine (live)"),
        )
    except ConfigError as exc:
        print(f"memsight: {exc}", file=sys.stderr)
        return 2
