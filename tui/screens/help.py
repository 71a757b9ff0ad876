"""The help screen: every binding of the app and of each screen, generated from the bindings themselves."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

INTRO = (
    "memsight shows where the memory of an LLM inference experiment goes, live, next to the plan.\n"
    "Bytes are GiB (2^30) on screen; bandwidth is decimal GB/s. Mouse optional: every action has a key."
)


def help_table(sections: list[tuple[str, list]]) -> Table:
    """Sections of (title, bindings or (key, description) pairs) as one two-column table."""
    table = Table(box=None, show_header=False, padding=(0, 2), expand=False)
    table.add_column("key", style="bold yellow", no_wrap=True)
    table.add_column("what")
    for title, entries in sections:
        table.add_row(Text(title, style="bold underline"), "")
        for entry in entries:
            if isinstance(entry, Binding):
                table.add_row(entry.key_display or entry.key, entry.description)
            elif len(entry) == 2:
                table.add_row(entry[0], entry[1])
            else:
                binding = Binding(*entry)
                table.add_row(binding.key_display or binding.key, binding.description)
        table.add_row("", "")
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss_help", "Close help")]

    def __init__(self, sections: list[tuple[str, list]]) -> None:
        super().__init__(id="help")
        self._sections = sections

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(INTRO, id="help-intro")
            yield Static(help_table(self._sections), id="help-text")
            yield Static("Esc, q or ? closes this help.", id="help-close")

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
