"""The memsight Textual app: four screens (Live, Plan, Roofline lab, Processes) and a help screen.

The app owns the data flow: a timer (`set_interval`) reads `monitor.state()`, turns it into plain values
(tui/screens/live_buckets.py, live_rows.py, plan_sources.py, vllm_view.py, run_summary.py) and hands them to
the visible screen; plan edits come up as messages, the app runs the planner and hands the result back.
Widgets never call collectors or the planner themselves.
"""

from __future__ import annotations

# isort: off
from tui.asyncio_no_tls import asyncio  # before textual's import of it: asyncio without ssl
# isort: on
import pathlib
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from textual.app import App
from textual.binding import Binding

from tui import options
from tui.render_caches import bound_render_caches, drop_strip_caches
from tui.screens.live import LiveScreen, LiveView

if TYPE_CHECKING:
    from collections.abc import Callable

    from textual.screen import Screen

    from collectors.alert_options import AlertOptions
    from collectors.snapshots import MonitorState
    from planner.budget import PlanInputs
    from planner.machines import Machine
    from tui.screens.plan import PlanScreen
    from tui.screens.plan_sources import PlanSource
    from tui.screens.vllm_view import VLLMPlan
    from tui.widgets.data import MachineBar, PlanChoices, PlanView

GIB = 2**30
# The lesson's capacity figure, in its order; "this" is the machine memsight runs on.
FIGURE_MACHINES: tuple[str, ...] = ("spark", "h100", "h200", "rtx4090", "this")
MACHINE_SHORT = {"spark": "DGX Spark", "h100": "H100", "h200": "H200", "rtx4090": "RTX 4090"}
KV_DTYPES: tuple[str, ...] = ("auto", "bf16", "fp16", "fp8", "fp32")
# NVML device-name fragments that identify a preset (for the roofline lab's real second roof).
GPU_PRESETS: tuple[tuple[str, str], ...] = (
    ("H200", "h200"),
    ("H100", "h100"),
    ("4090", "rtx4090"),
    ("GB10", "spark"),
)
# Replay controls: active (and in the footer) only when the monitor is a recording played back.
REPLAY_BINDINGS = (
    Binding("space", "replay_pause", "Pause"),
    Binding("left", "replay_seek(-10)", "Back 10 s", show=False),
    Binding("right", "replay_seek(10)", "On 10 s", show=False),
    Binding("home", "replay_seek_to(0)", "To the start", show=False),
    Binding("minus", "replay_speed(0.5)", "Slower (÷2)", show=False, key_display="-"),
    Binding("plus,equals_sign", "replay_speed(2)", "Faster (×2)", show=False, key_display="+"),
    # a / p: named in the replay status line instead, so the footer fits 80 columns
    Binding("a", "replay_alert", "Next alert", show=False),
    Binding("p", "replay_peak", "Peak", show=False),
)
REPLAY_ACTIONS = frozenset(b.action.split("(")[0] for b in REPLAY_BINDINGS)
# plans memoized, least recently used evicted first: a tick needs one per live pool and, with the Plan screen
# shown, one per preset machine and this one. "This machine" is re-sampled every THIS_MACHINE_RESAMPLE_S with
# what is in use now, so it is a new machine (and a new plan) every 5 s: a memo of 256 cleared only when full
# held up to 256 plans with their specs (21 minutes of re-samples), part of the Live screen's resident memory
# growing over its first half hour (bench/live_rss_trend.py, issue 20)
PLAN_MEMO_SIZE = 24
# the logged figures vLLM's plan reads (planner/engines/vllm/explain.py): a new one re-plans
PLAN_FIGURES = ("total", "max_model_len", "utilization")
# None: measure it (MemTotal - MemAvailable - what the experiment holds); the lesson assumes 10 GiB on a Spark
DEFAULT_UNIFIED_OS_RESERVE: int | None = None


class MonitorLike(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def state(self) -> MonitorState: ...


class ChildLike(Protocol):
    """The command `memsight run` started (tui/cmd_run.py:RunChild)."""

    command: str  # as typed, for the banner
    pid: int
    log_path: pathlib.Path | None  # where its stdout/stderr go (None: the terminal's, headless only)

    def poll(self) -> int | None: ...  # None while it runs, then its exit status (128+N for signal N)
    def stop(self) -> None: ...  # stop it as a Ctrl-C sent to memsight would (forwarded, grace, then kill)
    def family(self, pids: Any) -> frozenset[int]: ...  # its pid and those of `pids` that are its own


if TYPE_CHECKING:
    # memsight watch / demo (tui/cmd_watch.py): the monitor (not started) and run_app's options
    Setup = Callable[[], tuple[MonitorLike, dict[str, Any]]]


def default_plan_inputs() -> PlanInputs:
    """The defaults every command shares (tui/options.py): Llama 3.1 8B, its own weights, 8K, 8 users."""
    from planner.budget import PlanInputs  # noqa: PLC0415

    return PlanInputs(
        model=options.DEFAULT_MODEL,
        format=options.DEFAULT_FORMAT,
        kv_dtype=options.DEFAULT_KV_DTYPE,
        context=options.DEFAULT_CONTEXT,
        users=options.DEFAULT_USERS,
        tp=options.DEFAULT_TP,
    )


def inputs_from_fields(base: PlanInputs, values: dict[str, str]) -> PlanInputs:
    model = values.get("model", "").strip()
    if not model:
        raise ValueError(
            "model: enter a catalog name (e.g. llama-3.1-8b) or a path to a config.json / checkpoint"
        )
    fmt = values.get("format", "default")
    return replace(
        base,
        model=model,
        format=None if fmt in ("", "default") else fmt,
        kv_dtype=values.get("kv_dtype") or "auto",
        context=options.parse_count(values.get("context", ""), "context", minimum=1),
        users=options.parse_count(values.get("users", ""), "users", minimum=1),
        tp=options.parse_count(values.get("tp", ""), "tp", minimum=1),
    )


def fields_from_inputs(inputs: PlanInputs) -> dict[str, str]:
    return {
        "model": inputs.model,
        "format": inputs.format or "default",
        "kv_dtype": inputs.kv_dtype,
        "context": str(inputs.context),
        "users": str(inputs.users),
        "tp": str(inputs.tp),
    }


@dataclass(slots=True)
class PlanResult:
    live_plans: dict[str, Any]  # pool key -> Plan for that pool's capacity
    live_errors: dict[str, str]
    # the Plan screen's view, made when first asked (`view`): the Live screen's ticks do not plan the
    # capacity figure's machines (issue 20: the Live screen's first figures and resident memory)
    make_view: Callable[[], PlanView]
    sources: tuple[PlanSource, ...] = ()  # the agents' loaded models and caches the live plans follow
    _view: PlanView | None = None

    @property
    def view(self) -> PlanView:
        if self._view is None:
            self._view = self.make_view()
        return self._view


def plan_screen() -> Screen:
    from tui.screens.plan import PlanScreen  # noqa: PLC0415

    return PlanScreen()


def roofline_screen() -> Screen:
    from tui.screens.roofline import RooflineScreen  # noqa: PLC0415

    return RooflineScreen()


def processes_screen() -> Screen:
    from tui.screens.processes import ProcessesScreen  # noqa: PLC0415

    return ProcessesScreen()


class MemsightApp(App[int]):
    CSS_PATH = "memsight.tcss"
    TITLE = "memsight"
    MODES = {
        "live": LiveScreen,
        # the other screens (and the planner's and collectors' modules they need) are imported when first
        # shown: the first frame pays only for the Live screen (issue 20)
        "plan": plan_screen,
        "roofline": roofline_screen,
        "processes": processes_screen,
    }
    DEFAULT_MODE = "live"
    BINDINGS = [
        Binding("1", "switch_mode('live')", "Live"),
        Binding("2", "switch_mode('plan')", "Plan"),
        Binding("3", "switch_mode('roofline')", "Roofline"),
        Binding("4", "switch_mode('processes')", "Processes"),
        Binding("question_mark,f1", "help", "Help", key_display="?"),
        Binding("escape", "leave_field", "Leave a field", show=False),
        Binding("q", "quit", "Quit"),
        # Textual's own ctrl+c only says "press ctrl+q"; here it stops what memsight run started, then quits
        Binding("ctrl+c", "interrupt", "Stop the command and quit", show=False, priority=True),
        *REPLAY_BINDINGS,
    ]

    def __init__(
        self,
        monitor: MonitorLike | None,
        *,
        setup: Setup | None = None,
        title: str = "memsight",
        source_label: str = "this machine (live)",
        source_detail: str = "",
        plan_inputs: PlanInputs | None = None,
        refresh_hz: float = 2.0,
        thresholds: AlertOptions | None = None,
        unified_os_reserve_bytes: int | None = DEFAULT_UNIFIED_OS_RESERVE,
        manage_monitor: bool = True,
        child: ChildLike | None = None,
        exit_with_child: bool = False,
        plan_explicit: frozenset[str] = frozenset(),
        vllm_hints: dict[str, str | None] | None = None,
        first_status: str = "",
    ) -> None:
        super().__init__()
        bound_render_caches()  # Textual's style codes and Rich's cell widths, bounded (tui/render_caches.py)
        drop_strip_caches()  # and no Strip keeps the strips it was cropped, divided or styled into
        self.monitor = monitor
        self._init_setup(setup, first_status)
        self._init_titles(title, source_label, source_detail)
        self.manage_monitor = manage_monitor
        self._init_view_state()
        self._init_child(child, exit_with_child)
        self._init_vllm_state(vllm_hints)
        self.replay_note = ""  # what the last replay key did ("at the peak reserved (t+85.0s)")
        self._pending_jump: str | None = None  # "alert" | "peak": a key's jump waiting for the scan
        self._loop: asyncio.AbstractEventLoop | None = None
        if setup is None:
            self._configure(refresh_hz, thresholds, unified_os_reserve_bytes, plan_inputs, plan_explicit)

    def _init_setup(self, setup: Setup | None, first_status: str) -> None:
        # memsight watch / demo: the monitor and the options are made by setup() after the first frame, so
        # that frame waits for neither the collectors nor the planner (issue 20); what setup raised is kept
        # here and raised again by run_app once the terminal is restored
        self._setup = setup
        self.setup_error: BaseException | None = None
        self._until_set_up: list[Callable[[], Any]] = []  # keys pressed before setup ended, run after it
        self.first_status = first_status  # the Live screen's status line until the first view replaces it

    def _init_titles(self, title: str, source_label: str, source_detail: str) -> None:
        self.title = title
        self.source_label = source_label
        self.source_detail = source_detail  # e.g. where and how a replayed recording was made
        self.sub_title = source_label

    def _init_view_state(self) -> None:
        self._edited: frozenset[str] = frozenset()  # Plan screen fields the user edited (they win too)
        self.plan_follow: Any = None  # plan_sources.PlanSource the Plan screen follows, or None
        self.state: MonitorState | None = None
        self.scoped_state: MonitorState | None = None  # state with only this run's agents (memsight run)
        self.origin_t: float | None = None
        self.live_view: LiveView | None = None
        self._plan_view: PlanView | None = None  # plan_view, once asked for
        self.process_rows: tuple = ()
        self.process_status = ""
        self.gpu_roof: tuple[str, float, float] | None = None
        self.gpu_roof_missing = "no GPU found: no second (real) roof to offer"
        self.plan_error = ""
        self.refresh_count = 0
        self._plan_key: tuple | None = None
        self._plan_memo: OrderedDict[tuple, Any] = OrderedDict()  # (inputs, machine, spec key) -> Plan | str
        self._this: Machine | None = None
        self._this_t = float("-inf")
        self._plan_result: PlanResult | None = None
        self._plan_choices: PlanChoices | None = None
        self._rows_memo: tuple | None = None  # (the OS table they were made from, own and thresholds, rows)

    def _init_child(self, child: ChildLike | None, exit_with_child: bool) -> None:
        self.child = child
        self.exit_with_child = exit_with_child
        self.child_status: int | None = None  # the child's exit status once it exited
        self.child_ended_t: float | None = None  # when memsight saw it exit (epoch seconds)
        self.run_summary: Any = None  # collectors.summary.RunSummary as it stood when the command ended
        self._log_tail = None
        if child is not None and child.log_path:
            from tui.widgets.log_tail import LogTail  # noqa: PLC0415

            self._log_tail = LogTail(child.log_path)
        # vLLM's own numbers, read from the same log as it streams (collectors/vllm_log_follow.py)
        self._vllm_follow = None
        if child is not None and child.log_path:  # memsight run: its log may be vLLM's (imported only then)
            from collectors.vllm_log_follow import VLLMLogFollower  # noqa: PLC0415

            self._vllm_follow = VLLMLogFollower(child.log_path)
        self._child_key: tuple | None = None

    def _init_vllm_state(self, vllm_hints: dict[str, str | None] | None) -> None:
        # memsight run --vllm-version / --vllm-gpu: what a vLLM log may not say, for vLLM's plan
        self.vllm_hints = {k: v for k, v in (vllm_hints or {}).items() if v}
        self._vllm_plan: tuple[tuple, VLLMPlan] | None = None  # (inputs key, vLLM's plan for them)
        self._base_comparisons: tuple = ()  # the bucket comparisons before the vLLM process's is put in
        self._vllm_parts_memo: tuple | None = None  # (log, state, plan inputs, _vllm_parts of them)
        self._startup_watch: Any = None  # startup_view.StartupWatch: the vLLM start, once seen
        self._engine_plan_memo: tuple | None = None  # (followed log, model, its EnginePlan): not vLLM's

    def _configure(
        self,
        refresh_hz: float = 2.0,
        thresholds: AlertOptions | None = None,
        unified_os_reserve_bytes: int | None = DEFAULT_UNIFIED_OS_RESERVE,
        plan_inputs: PlanInputs | None = None,
        plan_explicit: frozenset[str] = frozenset(),
    ) -> None:
        """The display options (refresh rate, thresholds, plan inputs): given to the constructor, or made by
        setup() after the first frame."""
        if refresh_hz <= 0:
            raise ValueError(f"refresh rate must be positive, got {refresh_hz} Hz")
        self.refresh_hz = refresh_hz
        if thresholds is None:
            from collectors.alert_options import AlertOptions  # noqa: PLC0415

            thresholds = AlertOptions()
        self.thresholds = thresholds
        self.unified_os_reserve_bytes = unified_os_reserve_bytes
        self.plan_inputs = plan_inputs or default_plan_inputs()
        # plan fields the user gave (flags, config file): they win over what an agent's process loaded
        self.plan_explicit = frozenset(plan_explicit)
        self._field_values = fields_from_inputs(self.plan_inputs)

    @property
    def plan_choices(self) -> PlanChoices:
        """The Plan screen's choices (catalog models, weight formats, KV dtypes), read when it first asks."""
        if self._plan_choices is None:
            from planner.catalog import catalog_names  # noqa: PLC0415
            from planner.formats import weight_formats  # noqa: PLC0415
            from tui.widgets.data import PlanChoices  # noqa: PLC0415

            self._plan_choices = PlanChoices(tuple(catalog_names()), tuple(weight_formats()), KV_DTYPES)
        return self._plan_choices

    @property
    def plan_view(self) -> PlanView | None:
        """The Plan screen's view of the latest plans, made when first asked (the Plan screen shown): the
        Live screen's ticks do not plan the capacity figure's machines (issue 20)."""
        if self._plan_view is None and self._plan_result is not None:
            self._plan_view = self._plan_result.view
        return self._plan_view

    @plan_view.setter
    def plan_view(self, view: PlanView | None) -> None:
        self._plan_view = view

    # --- lifecycle --------------------------------------------------------------------------------
    def on_mount(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self._setup is not None:
            self.call_after_refresh(self._set_up)  # the first frame first: the Live screen's skeleton
            return
        if self.manage_monitor:
            self.monitor.start()
        self._start_ticks()

    def _set_up(self) -> None:
        """After the first frame: the monitor and the options from setup() (the collectors and the planner
        imported now), the monitor started, the first tick. What fails (a --prometheus port in use, a
        --record file that cannot be written) ends the app and is raised again by run_app, as one
        `memsight: ...` line under the restored terminal."""
        setup, self._setup = self._setup, None
        try:
            monitor, given = setup()
            shown = {k: given.pop(k) for k in ("title", "source_label", "source_detail") if k in given}
            self._configure(**given)
            if self.manage_monitor:
                monitor.start()
        except Exception as exc:
            self.setup_error = exc
            self.exit(None, 2)
            return
        self.monitor = monitor
        self._show_source(**shown)
        self._start_ticks()
        pending, self._until_set_up = self._until_set_up, []
        for action in pending:
            action()

    def _show_source(self, title: str = "", source_label: str = "", source_detail: str = "") -> None:
        """The header and the Live screen's source line, where setup() named the source (a demo's
        recording) only after the first frame."""
        self.title = title or self.title
        if source_label:
            self.source_label = self.sub_title = source_label
        if source_detail != self.source_detail:
            self.source_detail = source_detail
            if isinstance(self.screen, LiveScreen):
                self.screen.show_source(source_detail)

    def _start_ticks(self) -> None:
        self._apply_alert_options()
        self.refresh_data()
        self.set_interval(1.0 / self.refresh_hz, self._tick)

    def _tick(self) -> None:
        if self._pending_jump is not None:
            self._jump_when_scanned(self._pending_jump)  # refreshes
        else:
            self.refresh_data()

    async def action_switch_mode(self, mode: str) -> None:
        if self._setup is not None:  # before setup() gave the plan inputs and the monitor: right after it
            self._until_set_up.append(lambda: self.switch_mode(mode))
            return
        await super().action_switch_mode(mode)

    def _apply_alert_options(self) -> None:
        """The thresholds are the alert rules' options (collectors.alerts.AlertOptions). A Monitor or
        ReplayMonitor built by the CLI already has them (alert_options=); one built elsewhere (tests, a
        caller's own) gets the app's here, so the gauge and the alerts never disagree."""
        if getattr(self.monitor, "alert_options", None) == self.thresholds:
            return
        builder = getattr(self.monitor, "builder", None)
        if builder is not None and hasattr(builder, "alert_options"):
            if hasattr(self.monitor, "alert_options"):
                self.monitor.alert_options = self.thresholds  # ReplayMonitor rebuilds its builder from it
            builder.alert_options = self.thresholds

    def exit_soon(self, return_code: int = 0) -> None:
        """Leave the app from a signal handler (or another thread): scheduled on the app's own loop, which
        wakes for it at once. Harmless before the app started or after it ended."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.exit, None, return_code)

    def on_unmount(self) -> None:
        if self.manage_monitor and self.monitor is not None:
            self.monitor.stop()

    # --- actions ----------------------------------------------------------------------------------
    def action_help(self) -> None:
        if self._setup is not None:  # it lists the keys of screens not imported yet: right after setup
            self._until_set_up.append(self.action_help)
            return
        from tui.screens.help import HelpScreen  # noqa: PLC0415
        from tui.screens.processes import ProcessesScreen  # noqa: PLC0415
        from tui.screens.roofline import RooflineScreen  # noqa: PLC0415

        if isinstance(self.screen, HelpScreen):
            return
        field_keys = [("tab / shift+tab", "next / previous field"), ("enter, escape", "leave the field")]
        plan_keys = [*field_keys, ("pageup / pagedown", "scroll the capacity figure")]
        sections: list[tuple[str, list]] = [
            ("everywhere", [b for b in self.BINDINGS if b not in REPLAY_BINDINGS]),
            *([("replay", list(REPLAY_BINDINGS))] if self.replaying else []),
            ("Live (1)", list(LiveScreen.BINDINGS)),
            ("Plan (2)", plan_keys),
            ("Roofline lab (3)", [*RooflineScreen.BINDINGS, *field_keys]),
            ("Processes (4)", [*ProcessesScreen.BINDINGS, ("click a header", "sort by that column")]),
        ]
        self.push_screen(HelpScreen(sections))

    def child_running(self) -> bool:
        return self.child is not None and self.child_status is None and self.child.poll() is None

    def action_interrupt(self) -> None:
        """Ctrl-C: stop the command (forwarded as SIGINT, killed after the grace; memsight run then exits with
        its status); with no command running, quit."""
        if self.child_running():
            self.child.stop()
            self.exit(None, 130)  # 128 + SIGINT; memsight run itself exits with the command's own status
        else:
            self.exit()

    async def action_quit(self) -> None:
        """`q`: while the command still runs, ask first (stop it / let it run / stay)."""
        if not self.child_running():
            self.exit()
            return
        from tui.screens.quit import QuitScreen  # noqa: PLC0415

        def chosen(choice: str | None) -> None:
            if choice == "stop":
                self.action_interrupt()
            elif choice == "leave":
                self.exit()

        if not isinstance(self.screen, QuitScreen):
            self.push_screen(QuitScreen(self.child.command, self.child.pid), chosen)

    # --- replay controls (collectors/replay.py ReplayMonitor) ------------------------------------------
    @property
    def replaying(self) -> bool:
        return hasattr(self.monitor, "seek") and hasattr(self.monitor, "toggle_pause")

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action in REPLAY_ACTIONS and not self.replaying:
            return False  # not a replay: the keys do nothing and leave the footer
        return True

    def _replayed(self, note: str = "") -> None:
        self.replay_note = note
        self.refresh_data()

    def action_replay_pause(self) -> None:
        paused = self.monitor.toggle_pause()
        self._replayed("paused" if paused else "")

    def action_replay_seek(self, delta_s: float) -> None:
        self._pending_jump = None  # a seek of the user's own: the jump that waited for the scan is dropped
        self.monitor.seek(self.monitor.offset_s + float(delta_s))
        self._replayed()  # a note said where the last jump went ("no alert after this point"): no longer

    def action_replay_seek_to(self, offset_s: float) -> None:
        self._pending_jump = None
        self.monitor.seek(float(offset_s))
        self._replayed()

    def action_replay_speed(self, factor: float) -> None:
        self.monitor.set_speed(self.monitor.speed * float(factor))
        self._replayed(self.replay_note)

    def action_replay_alert(self) -> None:
        self._jump_when_scanned("alert")

    def action_replay_peak(self) -> None:
        self._jump_when_scanned("peak")

    def _jump_when_scanned(self, jump: str) -> None:
        """`a` and `p` jump to times found by one walk of the whole recording (ReplayMonitor.scan): minutes
        for a day's, on a thread of its own, the jump made by the tick that finds it done. Until then the
        status line says how far it has read; the screen goes on playing."""
        try:
            progress = self.monitor.scan_progress()
        except Exception as exc:  # noqa: BLE001  (the file gone or unreadable: said, never a crash)
            self._pending_jump = None
            self._replayed(f"cannot read the recording for its alerts and peaks: {exc}")
            return
        if progress is not None:
            self._pending_jump = jump
            then = "the next alert" if jump == "alert" else "the peak"
            self._replayed(f"reading the recording for its alerts and peaks: {progress:.0%}; then to {then}")
            return
        self._pending_jump = None
        (self._replay_to_alert if jump == "alert" else self._replay_to_peak)()

    def _replay_to_alert(self) -> None:
        offset = self.monitor.next_alert_offset()
        if offset is None:
            self._replayed("no alert after this point")
            return
        self.monitor.seek(offset)
        self._replayed(f"at the alert (t+{offset:.1f}s)")

    def _replay_to_peak(self) -> None:
        found = self.monitor.peak_offset()
        if found is None:
            self._replayed("no peak: nothing measured")
            return
        offset, what = found
        self.monitor.seek(offset)
        self._replayed(f"at the {what} (t+{offset:.1f}s)")

    def replay_position(self) -> str:
        """'replay 12.5 / 134.0 s · ×2 · paused' ("" when not a replay)."""
        if not self.replaying:
            return ""
        m = self.monitor
        parts = [f"replay {m.offset_s:.1f} / {m.duration_s:.1f} s", f"×{m.speed:g}"]
        if m.paused:
            parts.append("paused")
        if self.replay_note and self.replay_note != "paused":
            parts.append(self.replay_note)
        parts.append("keys: space ← → - + a(lert) p(eak)")
        return " · ".join(parts)

    def action_leave_field(self) -> None:
        self.screen.set_focus(None)

    # --- data flow --------------------------------------------------------------------------------
    def refresh_data(self) -> None:
        """One tick: read the monitor's latest state; rebuild values only if it is a new state (or the
        child's output / status changed)."""
        from tui.screens.live_buckets import bucket_comparisons, headroom  # noqa: PLC0415
        from tui.screens.live_rows import (  # noqa: PLC0415
            agent_rows,
            alert_rows,
            chart_series,
            own_pids,
            run_scope,
        )
        from tui.screens.peer_view import peer_lines  # noqa: PLC0415
        from tui.screens.pool_view import pool_data  # noqa: PLC0415
        from tui.screens.vllm_view import vllm_line  # noqa: PLC0415

        if not self.is_running:
            # shutting down (Textual's _shutdown stops the app before it prunes the screens): a tick that
            # fires now would query widgets already removed (NoMatches), so there is nothing to draw on
            return
        child_changed = self._check_child()
        state = self.monitor.state()
        if state is self.state:
            self._refresh_same_state(state, child_changed)
            return
        self._take_state(state)
        own = own_pids(state)
        if self.child is not None:  # memsight run: the command and its own agents, not other runs' agents
            own = self.child.family(own)
        # the bars and their plans: under memsight run, the command's own agents only
        self.scoped_state = run_scope(state, own) if self.child is not None else state
        result = self._plans(self.scoped_state)
        self._plan_view = None  # made from the result when the Plan screen asks (plan_view)
        self.process_rows = self._process_rows(state, own)
        self.process_status = process_status(state)
        self._base_comparisons = bucket_comparisons(
            self.scoped_state, result.live_plans, result.live_errors, result.sources, self._reserve_measured
        )
        self.live_view = LiveView(
            **self._live_view_fields(state),
            headroom=headroom(state, self.thresholds),
            chart=chart_series(state),
            agents=agent_rows(self.scoped_state),  # under memsight run: the command's own agents
            alerts=alert_rows(state, self.origin_t),
            vllm=vllm_line(state),
            pool=pool_data(state),
            peers=peer_lines(state),
        )
        self._push_to_screen()

    def _refresh_same_state(self, state: MonitorState, child_changed: bool) -> None:
        replay_changed = (
            self.replaying
            and self.state is not None
            and self._replay_status() != getattr(self.live_view, "status", None)
        )
        if replay_changed and self.live_view is not None:
            end = self._replay_end_fields(state)  # the recording's last event may change no figure
            ended = end.get("ended", "")
            self.live_view = replace(
                self.live_view,
                status=self._replay_status(),
                comparisons=self._live_comparisons(ended),
                **{"banner": "", "ended": "", "summary": (), **end},
            )
            self._push_to_screen()
        if child_changed and self.live_view is not None:
            # the Plan screen follows vLLM's log as it streams, like the Live screen's vLLM row; the
            # Live screen's plans say when the command ended without a model
            self._replan(self.scoped_state or state)
            fields = self._child_fields()
            self.live_view = replace(
                self.live_view, comparisons=self._live_comparisons(fields.get("ended", "")), **fields
            )
            self._push_to_screen()

    def _take_state(self, state: MonitorState) -> None:
        self.refresh_count += 1
        self.state = state
        if self.origin_t is None:
            self.origin_t = time_origin(state)
        self.gpu_roof, self.gpu_roof_missing = gpu_roof_for(state)

    def _live_view_fields(self, state: MonitorState) -> dict[str, Any]:
        child_fields = self._child_fields() or self._replay_end_fields(state)
        return {
            "status": self._replay_status() if self.replaying else live_status(state, self.source_label),
            "comparisons": self._live_comparisons(child_fields.get("ended", "")),
            "processes": self.process_rows,
            "agents_skipped": state.input_warnings.get("agents", ""),
            **child_fields,
        }

    def _process_rows(self, state: MonitorState, own: frozenset[int]) -> tuple:
        """The process rows; the same ones while the OS collector's table is the same object (it rescans
        once a second, the screen refreshes more often) and nothing else they show changed."""
        from tui.screens.live_rows import process_rows  # noqa: PLC0415

        table = state.os.processes if state.os is not None else None
        key = (own, self.thresholds)
        memo = self._rows_memo
        if memo is not None and memo[0] is table and memo[1] == key:
            return memo[2]
        rows = process_rows(state, self.thresholds, own)
        self._rows_memo = (table, key, rows)
        return rows

    def _replay_status(self) -> str:
        # the recording's name and origin are the header's (source_label): not repeated on this line
        return f"{self.replay_position()} · {live_status(self.state, '')}"

    def _replay_end_fields(self, state: MonitorState) -> dict[str, Any]:
        """At the end of a recording played once, what a live run shows when its command ends: the last
        figures kept and labelled, a banner, the run's summary."""
        from collectors.summary import clock  # noqa: PLC0415
        from tui.screens.run_summary import summary_lines  # noqa: PLC0415

        monitor = self.monitor
        if not self.replaying or not monitor.at_end or getattr(monitor, "loop", False):
            return {}
        ended = f"ended at {clock(monitor.end_t)}"
        summary = tuple(summary_lines(state.summary, alert_lines=0)) if state.summary is not None else ()
        return {
            "banner": f"end of the recording: its last figures, {ended} — home (or ←) replays it, q to quit",
            "ended": ended,
            "summary": summary,
        }

    def _check_child(self) -> bool:
        """Poll the child and tail its log (bounded read); True when what the screen shows of it changed."""
        if self.child is None:
            return False
        if self.child_status is None:
            self.child_status = self.child.poll()
            if self.child_status is not None:
                self.child_ended_t = time.time()
                if self.exit_with_child:
                    self.exit(None, self.child_status)
        lines = self._log_tail.read_new() if self._log_tail is not None else ()
        vllm_log = self._vllm_follow.poll() if self._vllm_follow is not None else None
        key = (self.child_status, lines, self._log_tail.error if self._log_tail else "", vllm_log)
        if key == self._child_key:
            return False
        self._child_key = key
        return True

    def _child_fields(self) -> dict[str, Any]:
        from collectors.summary import clock  # noqa: PLC0415
        from tui.screens.run_summary import summary_lines  # noqa: PLC0415

        child = self.child
        if child is None:
            return {}
        banner = ended = ""
        summary: tuple[str, ...] = ()
        if self.child_status is not None:
            ended = f"ended at {clock(self.child_ended_t or time.time())}"
            banner = f"{child.command} exited with status {self.child_status}, {ended} — q to quit"
            if self.run_summary is None and self.state is not None:
                # frozen when the command ended: the view may stay open for long after, the run does not
                self.run_summary = self.state.summary
            if self.run_summary is not None:
                summary = tuple(summary_lines(self.run_summary, alert_lines=0))
        title = ""
        if child.log_path is not None:
            title = f"output of pid {child.pid} → {child.log_path}"
            if self._log_tail is not None and self._log_tail.error:
                title = self._log_tail.error
        lines = self._log_tail.lines if self._log_tail is not None else ()
        return {
            "banner": banner,
            "log_title": title,
            "log_lines": lines,
            "ended": ended,
            "summary": summary,
            "vllm_log": self._vllm_log_text() or self._engine_log_text(),
            "startup": self._startup_text(),
        }

    def _vllm_parts(self):
        """What the Live screen shows of the vLLM server whose log memsight run follows: (log, its buckets,
        vLLM's plan for what it loaded, NVML's per-process bytes of its processes, the pool it is on, its
        pids); None when the child's log is not a vLLM log."""
        if self._vllm_follow is None or self.child is None:
            return None
        log = self._vllm_follow.poll()
        if not log.is_vllm:
            return None
        state = self.scoped_state or self.state
        # a tick asks twice (the vLLM line and the bucket comparisons): the same log, state and plan inputs
        # give the same parts, so the process scan and NVML sums run once
        memo = self._vllm_parts_memo
        inputs = (self.plan_inputs, self.plan_explicit)
        if memo is not None and memo[0] is log and memo[1] is state and memo[2] == inputs:
            return memo[3]
        parts = self._vllm_parts_for(log, state)
        self._vllm_parts_memo = (log, state, inputs, parts)
        return parts

    def _vllm_parts_for(self, log, state: MonitorState | None):
        from collectors.nvml_collector import gpu_bytes_by_pid  # noqa: PLC0415
        from tui.screens.vllm_view import vllm_given, vllm_plan, vllm_pool_for  # noqa: PLC0415

        nvml = state.nvml if state is not None else None
        pids = {self.child.pid}
        if state is not None:
            pids |= self.child.family(a.pid for a in state.agents)
            if state.os is not None:  # vLLM's engine cores are grandchildren: named so in their command line
                pids |= {p.pid for p in state.os.processes if "vllm" in (p.name + " " + p.cmdline).lower()}
        pool = vllm_pool_for(state, frozenset(pids)) if state is not None else None
        total = pool.capacity_bytes if pool is not None and not pool.unified else None
        model, given = vllm_given(self.plan_inputs, self.plan_explicit)
        key = (log.model, log.version, log.engine, tuple(sorted(log.args.items(), key=str)),
               tuple(log.config.items()), *(log.figures.get(n) for n in PLAN_FIGURES),
               total, model, tuple(given.items()), tuple(self.vllm_hints.items()))  # fmt: skip
        if self._vllm_plan is None or self._vllm_plan[0] != key:
            self._vllm_plan = (key, vllm_plan(log, total_bytes=total, model=model, given=given,
                                              **self.vllm_hints))  # fmt: skip
        nvml_bytes = None
        if nvml is not None and nvml.available:
            by_pid = gpu_bytes_by_pid(nvml)
            held = [by_pid[pid] for pid in pids if pid in by_pid]
            nvml_bytes = sum(held) if held else None
        from collectors.vllm_log_follow import log_buckets  # noqa: PLC0415

        return log, log_buckets(log), self._vllm_plan[1], nvml_bytes, pool, frozenset(pids)

    def _vllm_log_text(self) -> str:
        """The vLLM line from the child's log, next to vLLM's plan for the same model/args."""
        from tui.screens.vllm_view import vllm_log_line  # noqa: PLC0415

        parts = self._vllm_parts()
        if parts is None:
            return ""
        log, buckets, plan, nvml_bytes, _, _ = parts
        pool_bytes = plan.explanation.pool.pool_bytes if plan.explanation is not None else None
        return vllm_log_line(log, buckets, pool_bytes, plan.error[:100], nvml_bytes)

    def _startup_text(self) -> str:
        """Will the vLLM server memsight run started pass its start-up check; once started, what its profile
        run cost on the host (tui/screens/startup_view.py)."""
        parts = self._vllm_parts()
        state = self.state
        if parts is None or state is None:
            return ""
        log, pids = parts[0], parts[5]
        if self._startup_watch is None:  # under memsight run with a vLLM log only: imported then
            from tui.screens.startup_view import StartupWatch  # noqa: PLC0415

            self._startup_watch = StartupWatch()
        self._startup_watch.observe(log, state, pids, time.time())
        return self._startup_watch.line(log, state, pids, self.vllm_hints)

    def _live_comparisons(self, ended: str) -> tuple:
        """The bucket comparisons, the vLLM process's (from its log) in place of its pool's, "ended" titles
        once the command exited; another engine's (SGLang, Ollama, llama.cpp) the same way."""
        from tui.screens.vllm_view import vllm_comparison, with_vllm  # noqa: PLC0415

        comparisons = self._base_comparisons
        parts = self._vllm_parts()
        state = self.scoped_state or self.state
        if parts is not None and state is not None and parts[4] is not None:
            log, buckets, plan, nvml_bytes, pool, _ = parts
            vllm = vllm_comparison(state, pool, log, buckets, plan, nvml_bytes, self.child.pid)
            comparisons = with_vllm(comparisons, pool, vllm)
        engine = self._engine_parts() if parts is None else None
        if engine is not None and engine[2] is not None:
            from tui.screens.engine_live import engine_comparison  # noqa: PLC0415

            followed, pool, device, plan, held, what = engine
            shown = engine_comparison(state, pool, followed, device, plan, held, what, self.child.pid)
            comparisons = with_vllm(comparisons, pool, shown)
        return ended_comparisons(comparisons, ended)

    def _engine_parts(self):
        """(followed log, its pool, its buckets there, its own plan, what the system sees it hold, how) for
        the engine whose log the monitor follows under memsight run; None when there is none."""
        from tui.screens.vllm_view import vllm_pool_for  # noqa: PLC0415

        state = self.scoped_state or self.state
        if self.child is None or state is None or state.engine_log is None:
            return None
        # an engine's log is followed only under memsight run: its modules (and the engines' planners) are
        # imported then, not by every `memsight watch`
        from tui.screens.engine_live import device_for_pool, engine_plan, held_bytes  # noqa: PLC0415

        followed = state.engine_log
        pids = frozenset(self.child.family(a.pid for a in state.agents)) | {self.child.pid}
        if state.os is not None:  # the engine's workers are the command's descendants (their parent chain)
            pids |= self.child.family(p.pid for p in state.os.processes)
        pool = vllm_pool_for(state, pids)
        model = self.plan_inputs.model if "model" in self.plan_explicit else None
        memo = self._engine_plan_memo
        if memo is None or memo[0] is not followed or memo[1] != model:
            memo = self._engine_plan_memo = (followed, model, engine_plan(followed, model))
        held, what = held_bytes(state, pool, pids)
        return followed, pool, device_for_pool(followed.buckets, pool), memo[2], held, what

    def _engine_log_text(self) -> str:
        parts = self._engine_parts()
        if parts is None:
            return ""
        from tui.screens.engine_live import engine_line  # noqa: PLC0415

        followed, _, device, plan, held, what = parts
        return engine_line(followed, device, plan, held, what)

    def _push_to_screen(self) -> None:
        screen = self.screen
        if isinstance(screen, LiveScreen):
            if self.live_view is not None:
                screen.show(self.live_view)
            return
        # the other screens' modules are imported when the screen is first shown, not by the Live screen's
        # ticks (issue 20: the Live screen's resident memory); a screen not made yet cannot be on top
        plan = sys.modules.get("tui.screens.plan")
        processes = sys.modules.get("tui.screens.processes")
        if plan is not None and isinstance(screen, plan.PlanScreen) and self.plan_view is not None:
            screen.show(self.plan_view)
        elif processes is not None and isinstance(screen, processes.ProcessesScreen):
            screen.show(self.process_rows, self.process_status)

    def plan_field_values(self) -> dict[str, str]:
        return dict(self._field_values)

    def on_plan_screen_inputs_edited(self, message: PlanScreen.InputsEdited) -> None:
        # an edited field is the user's choice: it wins over what the plan follows (vLLM's log, an agent's
        # loaded model), as a flag does; the fields not edited keep the inputs given at startup
        changed = frozenset(k for k, v in message.values.items() if v != self._field_values.get(k))
        if not changed:
            return
        self._field_values = {**self._field_values, **message.values}
        self._edited |= changed
        self.plan_explicit |= changed
        values = {**fields_from_inputs(self.plan_inputs), **{k: self._field_values[k] for k in self._edited}}
        try:
            self.plan_inputs = inputs_from_fields(self.plan_inputs, values)
            self.plan_error = ""
        except ValueError as exc:  # our own parse errors and PlannerError (a ValueError) alike
            self.plan_error = str(exc)
        if self.state is not None:
            self._replan(self.scoped_state or self.state, force=True)
            if self.live_view is not None:
                self.live_view = replace(
                    self.live_view,
                    comparisons=self._live_comparisons(self.live_view.ended),
                )
            self._push_to_screen()

    # --- planning ---------------------------------------------------------------------------------
    def _replan(self, scoped: MonitorState, *, force: bool = False) -> None:
        """The plans again for the same state (inputs edited, the command's log or status changed): the Plan
        screen's view and the Live screen's comparisons before the vLLM process's is put in."""
        from tui.screens.live_buckets import bucket_comparisons  # noqa: PLC0415

        result = self._plans(scoped, force=force)
        self._plan_view = None  # made from the result when the Plan screen asks (plan_view)
        self._base_comparisons = bucket_comparisons(
            scoped, result.live_plans, result.live_errors, result.sources, self._reserve_measured
        )

    def _plans(self, state: MonitorState, *, force: bool = False) -> PlanResult:
        """Plans for each live pool and each machine of the figure. Each plan is memoized on its exact
        (inputs, machine), so a tick costs nothing unless the inputs or a capacity changed; "this" machine's
        reserve (what is in use now) is re-sampled at most every THIS_MACHINE_RESAMPLE_S seconds."""
        from tui.screens.live_buckets import comparison_groups, pools  # noqa: PLC0415
        from tui.screens.plan_sources import plan_sources  # noqa: PLC0415
        from tui.screens.vllm_view import plan_follows, vllm_plan_label  # noqa: PLC0415
        from tui.widgets.data import FIELDS, PlanView  # noqa: PLC0415  (not the Plan screen's module)

        live_pools = pools(state)
        this = self._this_machine(state, force=force)
        sources = plan_sources(state, self.plan_inputs, self.plan_explicit)
        groups = tuple(tuple(comparison_groups(state, pool, sources)) for pool in live_pools)
        followed = tuple((s.pid, s.inputs, s.spec_key, s.error, s.provenance) for s in sources)
        # the Plan screen follows what the Live screen's plan row follows (vLLM's log, an agent's model)
        parts = self._vllm_parts()
        vllm = (parts[2], parts[0], self.child.pid) if parts is not None else None
        follow, follow_line = plan_follows(self.plan_inputs, self.plan_explicit, vllm, sources)
        self.plan_follow = follow  # what the Plan screen's bars plan (None: the inputs as given)
        vllm_label = ""
        if follow is not None and vllm is not None and follow.pid == self.child.pid:
            vllm_label = "vLLM's own model, on the device it runs on: " + vllm_plan_label(vllm[0].explanation)
        waiting = self._waiting_for_model(follow)
        if waiting and not follow_line:
            follow_line = f"{waiting.split(':')[0]}: the bars plan the inputs below"
        shown = (follow.pid, follow.inputs, follow.spec_key) if follow is not None else None
        reserve = self.unified_os_reserve_bytes
        key = (self.plan_inputs, self.plan_error, live_pools, this, reserve, followed, groups, shown,
               follow_line, vllm_label, self._edited, waiting)  # fmt: skip
        if not force and key == self._plan_key and self._plan_result is not None:
            return self._plan_result
        self._plan_key = key
        if not self.plan_error:
            # the fields show what is planned (what is followed, else the inputs as given); a field the
            # user edited keeps the text typed ("32k")
            shown_values = fields_from_inputs(follow.inputs if follow is not None else self.plan_inputs)
            self._field_values = {**shown_values, **{k: self._field_values[k] for k in self._edited}}
        values = tuple((name, self._field_values.get(name, "")) for name in FIELDS)
        # the fields the Plan screen sets to what is planned: the user's own edits stay as typed
        followed = tuple(n for n in FIELDS if n not in self._edited)
        if self.plan_error:
            live_errors = {pool.key: self.plan_error for pool in live_pools}
            view = PlanView(values, (), "", self.plan_error, follow_line, vllm_label, followed)
            result = PlanResult({}, live_errors, lambda: view)
            self._plan_result = result
            return result
        live_plans, live_errors = self._live_plans(state, live_pools, this, sources, waiting)
        chunk = follow.inputs.prefill_chunk if follow is not None else None
        chunk = None if chunk == default_plan_inputs().prefill_chunk else chunk
        this_bar = (f"{this_name(state)} ({this_label(state)})", bool(live_pools) and live_pools[0].index < 0)

        def make_view() -> PlanView:
            bars, summary, first_error = self._figure_bars(this_bar, this, follow)
            return PlanView(values, bars, summary, first_error, follow_line, vllm_label, followed, chunk)

        result = PlanResult(live_plans, live_errors, make_view, sources)
        self._plan_result = result
        return result

    def _waiting_for_model(self, follow: PlanSource | None) -> str:
        """Under `memsight run` with no --model, before the command loaded a model memsight can plan (or
        vLLM's log named one): why the Live screen shows no plan yet ("" when it has one to show). The
        default model's verdict would otherwise stand there for seconds, "does NOT fit" on a small box."""
        if self.child is None or "model" in self.plan_explicit or follow is not None:
            return ""
        pid = self.child.pid
        if self.child_status is None:
            return f"waiting for pid {pid} to load a model: the plan follows it (or give --model M)"
        return f"pid {pid} loaded no model memsight could plan: --model M compares with a plan"

    def _live_plans(self, state, live_pools, this, sources, waiting: str) -> tuple[dict, dict]:
        """(pool key -> Plan, pool key -> why there is none) for each comparison the Live screen draws."""
        from tui.screens.live_buckets import comparison_groups  # noqa: PLC0415

        live_plans: dict[str, Any] = {}
        live_errors: dict[str, str] = {}
        by_pid = {s.pid: s for s in sources}
        for pool in live_pools:
            for key, pid in comparison_groups(state, pool, sources):
                if waiting:
                    live_errors[key] = waiting
                    continue
                if pool.capacity_bytes is None:
                    live_errors[key] = f"{pool.title}: capacity unknown, nothing to plan against"
                    continue
                # One "this machine" for both screens: a unified pool (or host RAM) keeps the same OS reserve
                # as the Plan screen's "this machine" row; a discrete GPU keeps none.
                reserve = this.os_reserve_bytes if pool.unified and this is not None else 0
                machine = sampled_machine(pool.title, pool.capacity_bytes, reserve, pool.unified)
                source = by_pid.get(pid) if pid is not None else None
                if source is not None and source.error:
                    live_errors[key] = source.error
                    continue
                plan = self._plan("this", machine, source, cpu=pool.index < 0)
                if isinstance(plan, str):
                    live_errors[key] = plan
                else:
                    live_plans[key] = plan
        return live_plans, live_errors

    def _figure_bars(self, this_bar, this, follow) -> tuple[tuple[MachineBar, ...], str, str]:
        """The Plan screen's capacity figure: (one bar per machine, the plan's one-line summary, the first
        planner error). `this_bar`: this machine's label, and whether it has no GPU."""
        from planner.machines import MACHINES  # noqa: PLC0415
        from tui.screens.live_buckets import machine_bar  # noqa: PLC0415
        from tui.widgets.data import MachineBar  # noqa: PLC0415

        bars: list[MachineBar] = []
        first_error = ""
        summary = ""
        context = (follow.inputs if follow is not None else self.plan_inputs).context
        for name in FIGURE_MACHINES:
            if name == "this":
                label, cpu = this_bar
                if this is None:
                    plan = "capacity unknown: no /proc/meminfo sample and no GPU"
                else:
                    plan = self._plan("this", this, follow, cpu=cpu)
                capacity = this.capacity_bytes if this is not None else None
            else:
                label = MACHINE_SHORT[name]
                plan = self._plan(name, None, follow)
                capacity = MACHINES[name].capacity_bytes
            if isinstance(plan, str):
                first_error = first_error or plan
                bars.append(MachineBar(name, label, capacity, (), None, None, context, error=plan))
                continue
            bars.append(machine_bar(name, label, plan, context))
            summary = summary or plan_summary(plan)
        return tuple(bars), summary, first_error

    @property
    def _reserve_measured(self) -> bool:
        """The Live plans' OS reserve is the measured "other procs / OS" (no --os-reserve-gib / config)."""
        return self.unified_os_reserve_bytes is None

    def _plan(
        self,
        machine_name: str,
        machine: Machine | None,
        source: PlanSource | None = None,
        *,
        cpu: bool = False,
    ) -> Any:
        """make_plan for the current inputs (or an agent's loaded model and cache: `source`) on a preset
        (machine None) or a sampled machine; the planner's error message (a str) where it refuses. `cpu`: a
        machine without a GPU, whose program has no CUDA context or library workspaces: overhead 0 (its
        interpreter and libraries are measured, as the rest of the process). Memoized: the planner is pure."""
        from planner.budget import make_plan  # noqa: PLC0415

        base = source.inputs if source is not None else self.plan_inputs
        spec = source.spec if source is not None else None
        inputs = replace(base, machine=machine_name, capacity_bytes=None, os_reserve_bytes=None)
        if cpu:
            inputs = replace(inputs, overhead_bytes=0)
        key = (inputs, machine, source.spec_key if source is not None else "")
        memo = self._plan_memo
        if key in memo:
            memo.move_to_end(key)
            return memo[key]
        try:
            memo[key] = make_plan(inputs, machine=machine, spec=spec)
        except ValueError as exc:  # PlannerError is a ValueError: shown inline, never a crash
            memo[key] = str(exc)
        while len(memo) > PLAN_MEMO_SIZE:
            memo.popitem(last=False)
        return memo[key]

    def _this_machine(self, state: MonitorState, *, force: bool) -> Machine | None:
        from tui.screens.live_buckets import THIS_MACHINE_RESAMPLE_S  # noqa: PLC0415  (beside the note on it)

        capacity, reserve = this_machine_capacity(state)
        if self.unified_os_reserve_bytes is not None and this_unified(state):
            reserve = self.unified_os_reserve_bytes  # the user's figure (--os-reserve-gib / config)
        if capacity is None:
            self._this = None
            return None
        previous = self._this
        stale = state.t - self._this_t >= THIS_MACHINE_RESAMPLE_S
        if force or previous is None or previous.capacity_bytes != capacity or stale:
            self._this = sampled_machine(
                f"{this_name(state)} ({this_label(state)})", capacity, reserve or 0, this_unified(state)
            )
            self._this_t = state.t
        return self._this


# --- pure helpers (tested directly) ---------------------------------------------------------------
def ended_comparisons(comparisons: tuple, ended: str) -> tuple:
    """After the command ended, each pool's title says its figures are the last ones ("ended at HH:MM:SS")."""
    if not ended:
        return comparisons
    suffix = f" · last figures, {ended}"
    return tuple(c if c.title.endswith(suffix) else replace(c, title=c.title + suffix) for c in comparisons)


def this_machine_capacity(state: MonitorState) -> tuple[int | None, int | None]:
    """(capacity, OS reserve) of the machine memsight runs on, from the sampled state (never /proc directly):
    a discrete GPU's total with no reserve, else MemTotal with what the OS and every other process hold now:
    MemTotal - MemAvailable - what the memsight agents' processes hold (the Live screen's "other"; the
    experiment itself is planned, so it is not counted twice)."""
    from tui.screens.live_buckets import other_processes_bytes, pools  # noqa: PLC0415

    discrete = [d for d in state.nvml.devices if not d.unified and d.total]
    if state.nvml.available and discrete and not state.unified:
        return discrete[0].total, 0
    if state.os is None:
        return None, None
    return state.os.mem_total, other_processes_bytes(state, pools(state)[0])


def sampled_machine(label: str, capacity: int, reserve: int, unified: bool) -> Machine:
    """A machine as measured by the monitor (never re-read from /proc by the planner: the screen shows the
    capacity the collectors sampled, and a fixed state gives a fixed plan)."""
    from planner.machines import Machine  # noqa: PLC0415

    return Machine(
        name="this",
        label=label,
        capacity_bytes=capacity,
        unified=unified,
        os_reserve_bytes=reserve,
        bandwidth_gbs=None,
        peak_tflops_bf16=None,
    )


def this_unified(state: MonitorState) -> bool:
    discrete = [d for d in state.nvml.devices if not d.unified and d.total]
    return not (state.nvml.available and discrete and not state.unified)


def this_name(state: MonitorState) -> str:
    """In a replay, "this machine" is the one the recording was made on."""
    return "recorded machine" if state.replay else "this machine"


def this_label(state: MonitorState) -> str:
    discrete = [d for d in state.nvml.devices if not d.unified and d.total]
    if state.nvml.available and discrete and not state.unified:
        return discrete[0].name
    if state.nvml.available and state.nvml.devices:
        return f"{state.nvml.devices[0].name}, unified"
    return "host RAM, no GPU: overhead 0"


def gpu_roof_for(state: MonitorState) -> tuple[tuple[str, float, float] | None, str]:
    """The real roof of the first GPU whose preset has a bandwidth and a peak; else why not, in one line."""
    from planner.machines import MACHINES  # noqa: PLC0415

    if not state.nvml.available or not state.nvml.devices:
        return None, f"no GPU found ({state.nvml.status}): no second (real) roof to offer"
    for device in state.nvml.devices:
        for fragment, preset in GPU_PRESETS:
            if fragment in device.name:
                machine = MACHINES[preset]
                if machine.bandwidth_gbs is None or machine.peak_tflops_bf16 is None:
                    return None, f"{device.name}: no published peak bandwidth and compute in the presets"
                label = f"{device.name} (BF16 dense peak)"
                return (label, machine.bandwidth_gbs, machine.peak_tflops_bf16 * 1000.0), ""
    return None, f"{state.nvml.devices[0].name}: no preset with its peak bandwidth and compute"


def time_origin(state: MonitorState) -> float:
    """The earliest time the first state knows of (history, alerts): alert times count from there."""
    times = [state.t, *(a.t for a in state.alerts)]
    times.extend(series[0][0] for series in state.history.values() if series and series[0])
    return min(times)


def plan_summary(plan) -> str:
    from tui.widgets.fmt import size  # noqa: PLC0415

    ranks = f" per busiest rank of {len(plan.ranks)}" if len(plan.ranks) > 1 else ""
    return (
        f"{plan.spec.name}, {plan.weights.format} weights ({plan.params.total:,} parameters){ranks}: "
        f"weights {size(plan.weight_bytes)} · KV {size(plan.kv_bytes)} "
        f"({plan.kv_bytes_per_token:,} bytes/token) · activations {size(plan.activation_bytes)} · "
        f"overhead {size(plan.overhead_bytes)}"
    )


def live_status(state: MonitorState, source_label: str) -> str:
    parts = [source_label] if source_label else []
    for fault in ("recording", "threads"):  # a stopped recording, restarted sampling threads: said first
        if fault in state.source_status:
            parts.append(state.source_status[fault])
    if state.nvml.available and state.nvml.devices:
        names = sorted({d.name for d in state.nvml.devices})
        parts.append(
            f"{len(state.nvml.devices)} GPU(s): {', '.join(names)}" + (" (unified)" if state.unified else "")
        )
    else:
        parts.append(f"no GPU: {state.nvml.status}")
    parts.append(f"{len(state.agents)} agent(s)" if state.agents else "no agents")
    if state.os is None:
        parts.append("no OS sample")
    return " · ".join(parts)


def process_status(state: MonitorState) -> str:
    if state.os is None:
        return "no OS sample yet"
    if not state.nvml.available:
        return f"GPU memory per process unknown ({state.nvml.status})"
    return ""


def run_app(
    monitor: MonitorLike | None = None,
    *,
    setup: Setup | None = None,
    title: str = "memsight",
    source_label: str = "this machine (live)",
    source_detail: str = "",
    plan_inputs: PlanInputs | None = None,
    refresh_hz: float = 2.0,
    thresholds: AlertOptions | None = None,
    unified_os_reserve_bytes: int | None = DEFAULT_UNIFIED_OS_RESERVE,
    manage_monitor: bool = True,
    child: ChildLike | None = None,
    exit_with_child: bool = False,
    app_ready: Any = None,
    plan_explicit: frozenset[str] = frozenset(),
    vllm_hints: dict[str, str | None] | None = None,
    first_status: str = "",
) -> int:
    """Open the app on `monitor` (a live Monitor of this machine when None) until the user quits.

    The monitor is started here, before the terminal is put in application mode, so a monitor that cannot
    start (a --prometheus port in use: CollectorError) ends as one `memsight: ...` line, never as a
    traceback over a raw terminal; with manage_monitor=False the caller starts and stops it. `app_ready`
    (if given) is called with the app before it runs (cmd_run's signal handlers need it).

    With `setup` instead of a monitor (memsight watch / demo), the app draws the Live screen's skeleton
    first and then calls setup() for the monitor and the other options (the collectors and the planner are
    imported there): an error of setup's or of the monitor's start ends the app and is raised here, after
    the terminal is restored. With no terminal nothing is drawn: setup runs first, as without it, so the
    monitor's own error (a port in use) is the one said. `first_status`: the Live screen's status line in
    that first frame (memsight watch: host memory, tui/cmd_watch.py first_frame_status)."""
    if setup is not None:
        return _run_with_setup(setup, title, source_label, first_status, app_ready)
    monitor = _start_monitor(monitor, refresh_hz, manage_monitor)
    app = MemsightApp(
        monitor,
        title=title,
        source_label=source_label,
        source_detail=source_detail,
        plan_inputs=plan_inputs,
        refresh_hz=refresh_hz,
        thresholds=thresholds,
        unified_os_reserve_bytes=unified_os_reserve_bytes,
        manage_monitor=False,
        child=child,
        exit_with_child=exit_with_child,
        plan_explicit=plan_explicit,
        vllm_hints=vllm_hints,
    )
    return _run_until_quit(app, monitor, manage_monitor, app_ready)


def _run_with_setup(setup: Setup, title: str, source_label: str, first_status: str, app_ready: Any) -> int:
    from collectors.errors import CollectorError  # noqa: PLC0415
    from tui.cli import require_terminal  # noqa: PLC0415

    try:
        require_terminal()
    except CollectorError:
        monitor, given = setup()
        return run_app(monitor, **given)
    app = MemsightApp(None, setup=setup, title=title, source_label=source_label, first_status=first_status)
    if app_ready is not None:
        app_ready(app)
    app.run()
    if app.setup_error is not None:
        raise app.setup_error
    return int(app.return_code or 0)


def _start_monitor(monitor: MonitorLike | None, refresh_hz: float, manage_monitor: bool) -> MonitorLike:
    from collectors.errors import CollectorError  # noqa: PLC0415
    from tui.cli import require_terminal  # noqa: PLC0415

    if monitor is None:
        from collectors.monitor import Monitor

        monitor = Monitor(hz=refresh_hz)
    if manage_monitor:
        monitor.start()
    try:
        require_terminal()  # `memsight > file` gets a sentence, not escape codes
    except CollectorError:
        if manage_monitor:
            monitor.stop()
        raise
    return monitor


def _run_until_quit(app: MemsightApp, monitor: MonitorLike, manage_monitor: bool, app_ready: Any) -> int:
    if app_ready is not None:
        app_ready(app)
    try:
        app.run()
    finally:
        if manage_monitor:
            monitor.stop()
    return int(app.return_code or 0)
