"""Live: measured buckets over the plan's per pool, headroom, the allocator gap over time, agents, processes,
alerts. The screen only passes the app's prepared values on to its widgets."""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Container, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Static

from tui.widgets.headroom import HeadroomGauge

# typing.TYPE_CHECKING: the modules of the widgets mounted with the first view (_mount_sections) are imported
# then, not for the first frame
TYPE_CHECKING = False
if TYPE_CHECKING:
    from textual.widget import Widget

    from tui.widgets.agents_table import AgentsTable
    from tui.widgets.data import (
        AgentRow,
        AlertRow,
        BucketComparison,
        ChartSeries,
        HeadroomData,
        PoolData,
        ProcessRow,
    )
    from tui.widgets.gap_chart import GapChart

WIDE_COLUMNS = 140  # at least this many columns: two columns side by side; fewer: one scrolling column
# At least this many rows: the allocated / reserved / gap chart is shown from the start (`g` hides it); on a
# shorter terminal it would push everything else off screen, so `g` shows it.
TALL_ROWS = 40
LIVE_TOP_PROCESSES = 12
# The gap chart is redrawn at most this often: at one redraw a second, its build (plotext's then; the braille
# of tui/widgets/braille_chart.py since, 2 ms at 91x12) and Textual's compositing of its rows were 30% of the
# main thread's time by cProfile. Its figures lag the gauge and the bars above it by up to this much; its
# axis spans the history (600 samples: 5 minutes at 2 Hz), where two seconds are less than one character
# column at 160x48.
CHART_REDRAW_S = 2.0
AGENTS_TITLE = "agents: PyTorch allocator per process and device, {unit} (★ busiest)"


def _shown(widget, display: bool):
    widget.display = display
    return widget


@dataclass(frozen=True, slots=True)
class LiveView:
    """Everything the Live screen shows, as plain values."""

    status: str
    comparisons: tuple[BucketComparison, ...]
    headroom: HeadroomData
    chart: ChartSeries
    agents: tuple[AgentRow, ...]
    processes: tuple[ProcessRow, ...]
    alerts: tuple[AlertRow, ...]
    vllm: str = ""  # one line about the scraped vLLM server ("" when no --vllm-url)
    vllm_log: str = ""  # vLLM's own numbers read from the `memsight run` child's log ("" when not vLLM)
    startup: str = ""  # will vLLM start / what its profile run cost (tui/screens/startup_view.py)
    banner: str = ""  # "CMD exited with status N — q to quit" (memsight run)
    log_title: str = ""  # where the child's output goes ("" when it is not logged: no panel)
    log_lines: tuple[str, ...] = ()  # its last lines
    ended: str = ""  # "ended at HH:MM:SS" once the command exited: its figures are kept, greyed
    summary: tuple[str, ...] = ()  # the end-of-run summary (collectors/summary.py), shown once it ended
    pool: PoolData | None = None  # where the pool is (tui/screens/pool_view.py); None: no OS sample yet
    peers: tuple[str, ...] = ()  # one line per --peer (tui/screens/peer_view.py)
    # agent files (or records) the monitor did not read, and why: said where the agents are, since the user
    # otherwise sees fewer agents and no reason ("" when none)
    agents_skipped: str = ""


def agents_note(view: LiveView) -> str:
    """The line above the agents table: why there is none, or which agent files were not read."""
    if view.agents:
        return view.agents_skipped
    if view.agents_skipped:
        return f"no agent shown: {view.agents_skipped}"
    return "no memsight agent found (start one with `memsight run -- CMD`)"


class LiveScreen(Screen):
    BINDINGS = [("g", "toggle_chart", "Gap chart")]

    def __init__(self) -> None:
        super().__init__(id="live")
        self._view: LiveView | None = None
        self._chart_choice: bool | None = None  # the user's `g`, which wins over the size rule
        self._chart: GapChart | None = None  # mounted with the first view (_mount_sections)
        self._agents: AgentsTable | None = None  # mounted with the first agent (_agents_table)
        self._sections: tuple[tuple[Widget, str], ...] = ()  # (widget, its name in the below-the-fold line)

    def compose(self) -> ComposeResult:
        # The first frame: the header, the status line and the headroom gauge in the left column, composed
        # as that frame shows them (the terminal's size classes, hidden lines hidden): each class or display
        # changed after mounting would restyle the screen again before it. The sections below the gauge, the
        # right column and the footer come with the first figures (_mount_sections): the first frame is
        # drawn before the collectors and the planner are imported (issue 20), and Textual's layout, styles
        # and rendering of those widgets, the footer's above all, were most of its work.
        width, height = self.app.size
        wide, tall = width >= WIDE_COLUMNS, height >= TALL_ROWS
        yield Header()
        yield Static(getattr(self.app, "first_status", ""), id="live-status", classes="status-line")
        detail = getattr(self.app, "source_detail", "")
        yield _shown(Static(detail, id="live-source", classes="note"), bool(detail))
        yield _shown(Static("", id="live-banner", classes="banner"), False)
        yield _shown(Static("", id="live-summary", classes="run-summary"), False)
        yield _shown(Static("", id="live-vllm", classes="status-line"), False)
        yield _shown(Static("", id="live-vllm_log", classes="status-line"), False)
        yield _shown(Static("", id="live-startup", classes="status-line"), False)
        yield _shown(Static("", id="live-peers", classes="status-line"), False)
        body = "wide fill" if wide and tall else "wide" if wide else ""
        with VerticalScroll(id="live-body", classes=body):
            with Vertical(id="live-left", classes="column"):
                yield Container(id="pools")
                yield HeadroomGauge(id="headroom")
            yield Vertical(id="live-right", classes="column")
        yield _shown(Static("", id="live-more", classes="more-below"), False)

    def _mount_sections(self) -> bool:
        """The sections below the headroom gauge, the right column's and the footer, mounted with the first
        view; False while they cannot be (the screen not mounted yet, or no longer: the app is leaving)."""
        if self._chart is not None:
            return True
        left, right = self.query_one("#live-left"), self.query_one("#live-right")
        if not (left.is_mounted and left.is_attached):
            return False
        from tui.widgets.alert_log import AlertLog  # noqa: PLC0415
        from tui.widgets.footer import MemsightFooter  # noqa: PLC0415
        from tui.widgets.gap_chart import GapChart  # noqa: PLC0415  (with the first view)
        from tui.widgets.log_tail import LogPanel  # noqa: PLC0415
        from tui.widgets.pool_parts import PoolParts  # noqa: PLC0415
        from tui.widgets.process_summary import ProcessSummary  # noqa: PLC0415

        chart = GapChart(id="gap-chart", min_redraw_s=CHART_REDRAW_S)
        self._chart = _shown(chart, self._chart_shown(self.app.size.height))
        parts = PoolParts(id="pool-parts")
        missing = Static("", id="agents-missing", classes="missing")
        processes = ProcessSummary(id="top-processes", max_rows=LIVE_TOP_PROCESSES)
        alerts, log = AlertLog(id="alerts"), _shown(LogPanel(id="child-log"), False)
        agents_title = Static(AGENTS_TITLE.format(unit="GiB"), id="agents-title", classes="section-title")
        left.mount_all([parts, agents_title, missing, self._chart])
        title = "processes by memory (● this run's; Δ over 30 s)"
        processes_title = Static(title, id="processes-title", classes="section-title")
        right.mount_all([processes_title, processes, alerts, log])
        # what sections_below names, in screen order: held here, not looked up after every tick
        self._sections = (
            (self.query_one("#headroom"), "headroom"), (parts, "pool"), (missing, "agents"),
            (self._chart, "chart"), (processes, "processes"), (alerts, "alerts"), (log, "output"),
        )  # fmt: skip
        self.mount(MemsightFooter(keys_at_mount=True))
        self._apply_size(*self.app.size)
        return True

    def on_mount(self) -> None:
        self._apply_size(self.app.size.width, self.app.size.height)  # as composed (a no-op), unless resized
        self.watch(self.query_one("#live-body"), "scroll_y", self._scrolled, init=False)
        view = getattr(self.app, "live_view", None)
        if view is not None:
            self.show(view)

    def show_source(self, detail: str) -> None:
        """Where the data comes from (a replayed recording's origin), named after the first frame."""
        line = self.query_one("#live-source", Static)
        line.update(detail)
        line.display = bool(detail)

    def on_screen_resume(self) -> None:
        view = getattr(self.app, "live_view", None)
        if view is not None:
            self.show(view)

    def on_resize(self, event) -> None:
        self._apply_size(event.size.width, event.size.height)
        self.call_after_refresh(self.update_more_below)

    def _scrolled(self, _value: float) -> None:
        self.update_more_below()

    def sections_below(self) -> list[str]:
        """The sections that start below what the body shows now (scroll to see them)."""
        body = self.query_one("#live-body")
        bottom = body.scroll_y + body.scrollable_content_region.height
        view = self._view
        alerts = len(view.alerts) if view is not None else 0
        below: list[str] = []
        for widget, name in self._sections:  # none before the first figures mounted them
            if not widget.display or widget.parent is None:  # hidden, or removed (the app is leaving)
                continue
            top = widget.parent.virtual_region.y + widget.virtual_region.y
            if top >= bottom:
                below.append(f"alerts ({alerts})" if name == "alerts" and alerts else name)
        return below

    def update_more_below(self) -> None:
        """One line over the footer naming what is below the fold, so nothing is out of sight unsaid."""
        if not self.is_mounted:
            return
        below = self.sections_below()
        more = self.query_one("#live-more", Static)
        text = f"↓ below: {', '.join(below)} (PgDn)" if below else ""
        if str(more.content) != text:
            more.update(text)
        if more.display != bool(text):
            more.display = bool(text)
            self.call_after_refresh(self.update_more_below)  # the line took (or gave back) a row of the body

    def _apply_size(self, width: int, height: int) -> None:
        """Two columns from WIDE_COLUMNS on. Wide and TALL_ROWS high, the columns fill the screen: the gap
        chart takes the left column's spare rows, the alert log the right's, and a taller terminal lists
        more processes. Below that, one scrolling column without the chart (`g` shows it)."""
        wide = width >= WIDE_COLUMNS
        tall = height >= TALL_ROWS
        body = self.query_one("#live-body")
        body.set_class(wide, "wide")
        body.set_class(wide and tall, "fill")
        if self._chart is None:  # the sections are not mounted yet (_mount_sections applies the size then)
            return
        spare = max(0, height - 48) if wide else 0
        self.query_one("#top-processes").set_max_rows(LIVE_TOP_PROCESSES + spare // 2)
        self.query_one("#alerts").styles.height = "1fr" if wide and tall else 8
        self._chart.display = self._chart_shown(height)

    def _chart_shown(self, height: int) -> bool:
        return height >= TALL_ROWS if self._chart_choice is None else self._chart_choice

    def action_toggle_chart(self) -> None:
        self._chart_choice = not self._chart_shown(self.app.size.height)
        if self._chart is not None:
            self._chart.display = self._chart_choice

    def show(self, view: LiveView) -> None:
        """Hand each widget its part; each redraws only if its part changed."""
        if view == self._view or not self._mount_sections():  # not mounted yet: on_mount shows it
            return
        previous = self._view
        self._view = view
        if previous is None or previous.status != view.status:
            self.query_one("#live-status", Static).update(view.status)
        for selector, text in (
            ("#live-banner", view.banner),
            ("#live-vllm", view.vllm),
            ("#live-vllm_log", view.vllm_log),
            ("#live-startup", view.startup),
        ):
            if previous is None or getattr(previous, selector[6:]) != text:
                line = self.query_one(selector, Static)
                line.update(text)
                line.display = bool(text)
        if previous is None or previous.peers != view.peers:
            peers = self.query_one("#live-peers", Static)
            peers.update("\n".join(view.peers))
            peers.display = bool(view.peers)
        if previous is None or previous.summary != view.summary:
            summary = self.query_one("#live-summary", Static)
            summary.update("\n".join(view.summary))
            summary.display = bool(view.summary)
        if previous is None or previous.ended != view.ended:
            self.query("#pools, #agents").set_class(bool(view.ended), "ended")
        log = self.query_one("#child-log")
        log.display = bool(view.log_title)
        if view.log_title:
            log.update_lines(view.log_title, view.log_lines)
        self._show_pools(view.comparisons)
        self.query_one("#headroom", HeadroomGauge).update_data(view.headroom)
        self.query_one("#pool-parts").update_data(view.pool)
        self._chart.update_data(view.chart)
        agents = self._agents_table(view)
        if agents is not None and agents.update_rows(view.agents):
            self.query_one("#agents-title", Static).update(AGENTS_TITLE.format(unit=agents.unit.name))
        agents_missing = self.query_one("#agents-missing", Static)
        shown = (bool(view.agents), view.agents_skipped)
        if previous is None or (bool(previous.agents), previous.agents_skipped) != shown:
            note = agents_note(view)
            agents_missing.update(note)
            agents_missing.display = bool(note)
            if agents is not None:
                agents.display = bool(view.agents)
        self.query_one("#top-processes").update_rows(view.processes)
        self.query_one("#alerts").update_rows(view.alerts)
        self.call_after_refresh(self.update_more_below)

    def _agents_table(self, view: LiveView) -> AgentsTable | None:
        """The agents' table, mounted when the first agent shows (below the note on missing agents, above the
        chart); None until then: a screen without agents holds no table."""
        if self._agents is None and view.agents:
            from tui.widgets.agents_table import AgentsTable  # noqa: PLC0415

            self._agents = AgentsTable(id="agents", classes="ended" if view.ended else None)
            missing = self.query_one("#agents-missing")
            missing.parent.mount(self._agents, after=missing)
            at = next(i for i, (widget, _) in enumerate(self._sections) if widget is missing)
            self._sections = (*self._sections[:at], (self._agents, "agents"), *self._sections[at:])
        return self._agents

    def _show_pools(self, comparisons: tuple[BucketComparison, ...]) -> None:
        from tui.widgets.bucket_bars import BucketBars  # noqa: PLC0415

        container = self.query_one("#pools", Container)
        bars = [bar for bar in container.children if isinstance(bar, BucketBars)]  # no DOM query at each tick
        if len(bars) != len(comparisons):
            for bar in bars:
                bar.remove()
            container.mount_all(BucketBars(c) for c in comparisons)
            return
        for bar, comparison in zip(bars, comparisons, strict=True):
            bar.update_data(comparison)
