"""Plan: the plan's inputs, editable live, and the lesson's capacity figure (one bar per machine).

Edits are posted to the app as plain strings; the app runs the planner and hands back a PlanView. A bad value
comes back as the planner's message, shown inline under the fields.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.suggester import SuggestFromList
from textual.widget import Widget
from textual.widgets import Header, Input, Label, Select, Static

from tui.widgets.capacity_bars import CapacityBars
from tui.widgets.data import FIELDS, PlanChoices, PlanView  # there: the Live screen makes PlanViews
from tui.widgets.footer import MemsightFooter

WIDE_FIELDS = 120
# what tui/options.py:parse_count reads (8192, 8,192, 32k, 1.5k, 1M); it says what is wrong with the rest
COUNT_CHARS = r"[0-9kKmM.,_ ]*"


def figure_note(prefill_chunk: int | None) -> str:
    """The note under the figure; the activation peak is the followed prefill chunk's when one is followed."""
    chunk = (
        "an 8K-token prefill chunk"
        if prefill_chunk is None
        else f"a prefill chunk of {prefill_chunk:,} tokens (the plan follows it)"
    )
    return (
        "Each bar is drawn to its own machine's capacity. The Spark's first segment is the OS and everything "
        f"else in its shared pool (10 GiB assumed); overhead is 1.5 GiB runtime + the activation peak of "
        f"{chunk}. Capacity only: a user who fits is not a user served fast."
    )


class PlanScreen(Screen):
    class InputsEdited(Message):
        """A field the user edited: {name: value as typed}."""

        def __init__(self, values: dict[str, str]) -> None:
            super().__init__()
            self.values = values

    # Digits switch screens and a focused field takes printable keys first: start with no field focused.
    AUTO_FOCUS = ""
    BINDINGS = [
        Binding("pageup", "scroll_figure(-1)", "Scroll up", show=False),
        Binding("pagedown", "scroll_figure(1)", "Scroll down", show=False),
    ]

    def __init__(self) -> None:
        super().__init__(id="plan")
        self._view: PlanView | None = None
        self._options: dict[str, list[str]] = {}
        self._labels = {"default": "model default"}

    def compose(self) -> ComposeResult:
        choices: PlanChoices = self.app.plan_choices
        self._options = {"format": ["default", *choices.formats], "kv_dtype": list(choices.kv_dtypes)}
        # the fields start with the app's values: a Select given its value only after compose shows its
        # prompt instead (its label is not mounted yet), which is what the plan follows when this screen
        # first opens under memsight run (vLLM's log, a loaded model)
        start = self.app.plan_field_values()
        for name in ("format", "kv_dtype"):
            if start.get(name) and start[name] not in self._options[name]:
                self._options[name].append(start[name])
        with self.prevent(Input.Changed, Select.Changed):  # the app's values: no edit of the user's
            fields = self._field_widgets(start, choices)
        yield Header()
        yield Static("", id="plan-status", classes="status-line")
        follows = Static("", id="plan-follows", classes="note")
        follows.display = False  # until a view says what is followed (hidden here, not in on_mount: below)
        yield follows
        with VerticalScroll(id="plan-body"):
            with Grid(id="plan-fields"):
                for label, classes, widget in fields:
                    with Vertical(classes=classes):
                        yield Label(label)
                        yield widget
            yield Static("", id="plan-error", classes="error-line")
            yield Static("", id="plan-summary")
            yield CapacityBars(id="capacity")
            yield Static(figure_note(None), id="plan-note", classes="note")
        yield MemsightFooter()

    def _field_widgets(self, start: dict[str, str], choices: PlanChoices) -> list[tuple[str, str, Widget]]:
        """(label, container classes, widget) of each field, holding the app's values."""
        model = Input(
            start.get("model", ""),
            id="plan-model",
            suggester=SuggestFromList(choices.models, case_sensitive=False),
        )
        weights = Select(
            [(self._labels.get(f, f), f) for f in self._options["format"]],
            id="plan-format",
            allow_blank=False,
            value=start.get("format") or "default",
        )
        kv_dtype = Select(
            [(k, k) for k in self._options["kv_dtype"]],
            id="plan-kv_dtype",
            allow_blank=False,
            value=start.get("kv_dtype") or self._options["kv_dtype"][0],
        )
        fields = [
            ("model (catalog name or path)", "field wide-field", model),
            ("weights", "field", weights),
            ("KV dtype", "field", kv_dtype),
        ]
        for name in ("context", "users", "tp"):
            count = Input(start.get(name, ""), id=f"plan-{name}", restrict=COUNT_CHARS)
            fields.append((name, "field narrow-field", count))
        return fields

    def on_mount(self) -> None:
        # Tab goes straight to the first field (a scroll container would otherwise take the first Tab);
        # PageUp/PageDown still scroll the figure.
        self.query_one("#plan-body").can_focus = False
        self._apply_size(self.app.size.width, self.app.size.height)
        self.fill(self.app.plan_field_values())
        # an app tick can show a view once the fields are mounted and before this handler runs (a loaded
        # machine): fill() just put the startup values back, so that view is shown again, not skipped as seen
        self._view = None
        view = getattr(self.app, "plan_view", None)
        if view is not None:
            self.show(view)

    def on_resize(self, event) -> None:
        self._apply_size(event.size.width, event.size.height)

    def _apply_size(self, width: int, height: int) -> None:
        """Six fields in one row from WIDE_FIELDS columns on, else two rows of three; thicker bars when the
        terminal is tall enough to show them all."""
        self.query_one("#plan-fields").set_class(width < WIDE_FIELDS, "narrow")
        self.query_one(CapacityBars).set_bar_rows(1 if height < 40 else (2 if height < 55 else 3))

    def on_screen_resume(self) -> None:
        view = getattr(self.app, "plan_view", None)
        if view is not None:
            self.show(view)

    def fill(self, values: dict[str, str]) -> None:
        """Put the app's values in the fields, posting no Changed event: a value the app set is not the
        user's edit (those events used to reach the app after its next tick had moved the value on, and were
        taken for edits). A value a Select does not list (e.g. `--format` given on the command line) is added
        to it, so the planner's verdict on it shows instead of a crash."""
        with self.prevent(Input.Changed, Select.Changed):
            for name, value in values.items():
                widget = self.query_one(f"#plan-{name}")
                if isinstance(widget, Select) and value not in self._options[name]:
                    self._options[name].append(value)
                    widget.set_options([(self._labels.get(v, v), v) for v in self._options[name]])
                widget.value = value

    def field_values(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for name in FIELDS:
            widget = self.query_one(f"#plan-{name}")
            value = widget.value
            values[name] = "" if value is Select.BLANK else str(value)
        return values

    @on(Input.Changed)
    @on(Select.Changed)
    def _edited(self, event: Input.Changed | Select.Changed) -> None:
        """The one field the user changed, and only it: the others may move with what the plan follows."""
        event.stop()
        name = (event.control.id or "").removeprefix("plan-")
        if name in FIELDS:
            value = event.value
            self.post_message(self.InputsEdited({name: "" if value is Select.BLANK else str(value)}))

    def action_scroll_figure(self, direction: int) -> None:
        body = self.query_one("#plan-body", VerticalScroll)
        if direction > 0:
            body.scroll_page_down()
        else:
            body.scroll_page_up()

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.set_focus(None)

    def _show_latest(self) -> None:
        view = getattr(self.app, "plan_view", None)
        if view is not None:
            self.show(view)

    def show(self, view: PlanView) -> None:
        if view == self._view:
            return
        if not self.query("#plan-model"):
            # the app switched to this screen and its fields are not mounted yet: shown once they are, and
            # then the app's latest view (a view held until then could be older than the one on_mount shows,
            # and would stay: the app pushes only what changes)
            self.call_after_refresh(self._show_latest)
            return
        self._view = view
        # the fields show what is planned (vLLM's log, a loaded model...), not the one being edited
        current = self.field_values()
        focused = self.focused
        changed = {
            name: value
            for name, value in view.values
            if name in view.followed
            and current.get(name) != value
            and focused is not self.query_one(f"#plan-{name}")
        }
        if changed:
            self.fill(changed)
        self.query_one("#plan-note", Static).update(figure_note(view.prefill_chunk))
        follows = self.query_one("#plan-follows", Static)
        text = "\n".join(t for t in (view.follows, view.vllm) if t)
        follows.update(text)
        follows.display = bool(text)
        error = self.query_one("#plan-error", Static)
        error.update(view.error)
        error.display = bool(view.error)
        self.query_one("#plan-summary", Static).update(view.summary)
        self.query_one(CapacityBars).update_bars(view.bars)
        status = self.query_one("#plan-status", Static)
        status.update(
            "Tab: next field, Enter/Esc: done. The bars and the Live screen's plan follow every edit."
        )
