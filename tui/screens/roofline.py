"""The roofline lab of the lessons: set I (FLOP/byte) and B (decimal GB/s) explicitly, against a fixed
1000 GFLOP/s compute cap; Reset, Step and Play. The ceiling comes from planner.work.roofline_gflops.

Playback moves a tracer along the roof (position t); it never changes the selected kernel, and editing I or B
keeps t. The lab has no tensors, KV, devices or allocator: it says nothing about memory capacity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Button, Header, Input, Label, Static

from planner.work import roofline_gflops
from tui.widgets.footer import MemsightFooter
from tui.widgets.roofline_plot import RooflineFigure, RooflinePlot

LAB_PEAK_GFLOPS = 1000.0  # the lab's fixed compute cap
DEFAULT_INTENSITY = 1.0  # what Reset restores (the lessons then set both values explicitly)
DEFAULT_BANDWIDTH_GBS = 100.0
TRACE_STEPS = 40  # positions of the tracer along the roof, t = 0 .. TRACE_STEPS
TRACE_MIN_I = 1 / 8  # FLOP/byte; the traced range spans every ridge point the lessons use
TRACE_MAX_I = 128.0
PLAY_INTERVAL_S = 0.25
CANNOT_TELL = (
    "What this lab cannot tell: memory capacity. It has no model tensors, KV heads, devices or allocator, "
    "so it cannot say whether either configuration has room to hold even one request (see the Plan screen)."
)


@dataclass(frozen=True, slots=True)
class LabState:
    intensity: float = DEFAULT_INTENSITY  # FLOP/byte
    bandwidth_gbs: float = DEFAULT_BANDWIDTH_GBS  # decimal GB/s
    t: int = 0  # playback position along the roof
    playing: bool = False

    @property
    def ceiling_gflops(self) -> float:
        """The predicted ceiling of the selected kernel: shown before any Step."""
        return roofline_gflops(self.intensity, self.bandwidth_gbs, LAB_PEAK_GFLOPS)

    @property
    def bound(self) -> str:
        return (
            "compute-bound (the 1000 GFLOP/s cap)"
            if self.intensity * self.bandwidth_gbs >= LAB_PEAK_GFLOPS
            else ("memory-bound (I × B)")
        )


def reset(_: LabState | None = None) -> LabState:
    return LabState()


def step(state: LabState) -> LabState:
    """Advance the tracer one position; at the end of the roof playback stops."""
    t = min(state.t + 1, TRACE_STEPS)
    return replace(state, t=t, playing=state.playing and t < TRACE_STEPS)


def trace_intensity(t: int) -> float:
    """Intensity of the tracer at position t: log-spaced from TRACE_MIN_I to TRACE_MAX_I."""
    fraction = t / TRACE_STEPS
    return TRACE_MIN_I * (TRACE_MAX_I / TRACE_MIN_I) ** fraction


def figure(state: LabState, second: tuple[str, float, float] | None = None) -> RooflineFigure:
    """Roof, selected kernel and trace; `second` = (label, bandwidth GB/s, peak GFLOP/s) of a real GPU."""
    xs = tuple(trace_intensity(k) for k in range(TRACE_STEPS + 1))
    roof = tuple(roofline_gflops(x, state.bandwidth_gbs, LAB_PEAK_GFLOPS) for x in xs)
    trace_x = xs[1 : state.t + 1]
    trace_y = roof[1 : state.t + 1]
    second_roof = None
    label = ""
    if second is not None:
        label, bandwidth, peak = second
        # a real GPU's ridge point (peak / bandwidth, ~300 FLOP/byte on an H100) lies beyond the lab's range
        top = max(TRACE_MAX_I, 4 * peak / bandwidth)
        steps = TRACE_STEPS * 2
        xs2 = tuple(TRACE_MIN_I * (top / TRACE_MIN_I) ** (k / steps) for k in range(steps + 1))
        second_roof = (xs2, tuple(roofline_gflops(x, bandwidth, peak) for x in xs2))
    return RooflineFigure(
        xs, roof, (state.intensity, state.ceiling_gflops), (trace_x, trace_y), second_roof, label
    )


def parse_positive(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a positive number, got {text!r}")
    return value


def fmt_gflops(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.3g}"


class RooflineScreen(Screen):
    BINDINGS = [
        Binding("r", "reset", "Reset"),
        Binding("s", "step", "Step"),
        Binding("p", "play", "Play/Pause"),
        Binding("o", "toggle_gpu_roof", "GPU roof"),
    ]
    # Letter keys are bindings, and Textual hands printable keys to a focused field first: start with no
    # field focused (Tab enters one, Enter or Esc leaves it).
    AUTO_FOCUS = ""

    def __init__(self) -> None:
        super().__init__(id="roofline")
        self.lab = LabState()
        self.show_gpu_roof = False
        self._timer = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="lab-controls"):
            with Vertical(classes="field"):
                yield Label("I (FLOP/byte)")
                yield Input(id="lab-intensity", restrict=r"[0-9.]*")
            with Vertical(classes="field"):
                yield Label("B (GB/s, decimal)")
                yield Input(id="lab-bandwidth", restrict=r"[0-9.]*")
            with Vertical(classes="field"):
                yield Label("cap (fixed)")
                yield Static(f"{LAB_PEAK_GFLOPS:,.0f} GFLOP/s", id="lab-peak")
            yield Button("Reset", id="lab-reset")
            yield Button("Step", id="lab-step")
            yield Button("Play", id="lab-play")
        yield Static("", id="lab-error", classes="error-line")
        yield Static("", id="lab-prediction")
        yield Static("", id="lab-result")
        yield Static("", id="lab-gpu", classes="missing")
        yield RooflinePlot(id="lab-plot")
        yield Static(CANNOT_TELL, id="lab-cannot", classes="note")
        yield MemsightFooter()

    def on_mount(self) -> None:
        self._fill_inputs()
        self._redraw()

    def on_screen_resume(self) -> None:
        self._redraw()

    # --- actions ----------------------------------------------------------------------------------
    def action_reset(self) -> None:
        self._stop_timer()
        self.lab = reset(self.lab)
        self._fill_inputs()
        self._redraw()

    def action_step(self) -> None:
        self.lab = step(self.lab)
        self._redraw()

    def action_play(self) -> None:
        if self.lab.playing:
            self.lab = replace(self.lab, playing=False)
            self._stop_timer()
        else:
            if self.lab.t >= TRACE_STEPS:  # replay from the start of the roof; the kernel stays selected
                self.lab = replace(self.lab, t=0)
            self.lab = replace(self.lab, playing=True)
            self._timer = self.set_interval(PLAY_INTERVAL_S, self._tick)
        self._redraw()

    def action_toggle_gpu_roof(self) -> None:
        self.show_gpu_roof = not self.show_gpu_roof
        self._redraw()

    def _tick(self) -> None:
        self.lab = step(self.lab)
        if not self.lab.playing:
            self._stop_timer()
        self._redraw()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self.lab = replace(self.lab, playing=False)

    @on(Button.Pressed, "#lab-reset")
    def _reset_pressed(self) -> None:
        self.action_reset()

    @on(Button.Pressed, "#lab-step")
    def _step_pressed(self) -> None:
        self.action_step()

    @on(Button.Pressed, "#lab-play")
    def _play_pressed(self) -> None:
        self.action_play()

    # --- edits keep t -----------------------------------------------------------------------------
    @on(Input.Changed)
    def _edited(self, event: Input.Changed) -> None:
        event.stop()
        error = self.query_one("#lab-error", Static)
        try:
            intensity = parse_positive(self.query_one("#lab-intensity", Input).value, "intensity I")
            bandwidth = parse_positive(self.query_one("#lab-bandwidth", Input).value, "bandwidth B")
        except ValueError as exc:
            error.update(str(exc))
            error.display = True
            return
        error.display = False
        if (intensity, bandwidth) != (self.lab.intensity, self.lab.bandwidth_gbs):
            self.lab = replace(self.lab, intensity=intensity, bandwidth_gbs=bandwidth)
            self._redraw()

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.set_focus(None)

    def _fill_inputs(self) -> None:
        self.query_one("#lab-intensity", Input).value = f"{self.lab.intensity:g}"
        self.query_one("#lab-bandwidth", Input).value = f"{self.lab.bandwidth_gbs:g}"

    # --- drawing ----------------------------------------------------------------------------------
    def _gpu_roof(self) -> tuple[str, float, float] | None:
        gpu = getattr(self.app, "gpu_roof", None)
        return gpu if (gpu is not None and self.show_gpu_roof) else None

    def _redraw(self) -> None:
        lab = self.lab
        self.query_one("#lab-prediction", Static).update(
            f"predicted ceiling: {fmt_gflops(lab.ceiling_gflops)} GFLOP/s  = min(1000, I × B) = "
            f"min(1000, {lab.intensity:g} × {lab.bandwidth_gbs:g})  · {lab.bound}"
        )
        if lab.t == 0:
            result = "t = 0: press Step (s) or Play (p) to run the kernel along the roof"
        else:
            x = trace_intensity(lab.t)
            traced = roofline_gflops(x, lab.bandwidth_gbs, LAB_PEAK_GFLOPS)
            playing = " ▶ playing" if lab.playing else ""
            result = (
                f"t = {lab.t}/{TRACE_STEPS}{playing}: kernel (I = {lab.intensity:g}) attains "
                f"{fmt_gflops(lab.ceiling_gflops)} GFLOP/s; tracer I = {x:.3g} → {fmt_gflops(traced)} GFLOP/s"
            )
        self.query_one("#lab-result", Static).update(result)
        self.query_one("#lab-play", Button).label = "Pause" if lab.playing else "Play"
        gpu = getattr(self.app, "gpu_roof", None)
        gpu_line = self.query_one("#lab-gpu", Static)
        if gpu is None:
            gpu_line.update(
                getattr(self.app, "gpu_roof_missing", "no GPU found: no second (real) roof to offer")
            )
        else:
            label, bandwidth, peak = gpu
            state = "shown" if self.show_gpu_roof else "press o to show"
            gpu_line.update(f"second roof: {label}, {bandwidth:,.0f} GB/s, {peak:,.0f} GFLOP/s ({state})")
        self.query_one(RooflinePlot).update_figure(figure(lab, self._gpu_roof()))
