"""The footer every screen shows: its keys stay readable at 80 columns.

Textual's footer spends 13 cells on the command palette's hint (ctrl+p still opens it; `?` lists every key)
and two spaces around each key; below WIDE_FOOTER columns it packs the keys (compact), so at 80x24 no key is
cut ("q Qui")."""

from __future__ import annotations

from textual.widgets import Footer

WIDE_FOOTER = 120


class MemsightFooter(Footer):
    def __init__(self, **kwargs) -> None:
        super().__init__(show_command_palette=False, **kwargs)

    def on_mount(self) -> None:
        self.compact = self.app.size.width < WIDE_FOOTER

    def on_resize(self) -> None:
        self.compact = self.app.size.width < WIDE_FOOTER
