"""The footer every screen shows: its keys stay readable at 80 columns.

Textual's footer spends 13 cells on the command palette's hint (ctrl+p still opens it; `?` lists every key)
and two spaces around each key; below WIDE_FOOTER columns it packs the keys (compact), so at 80x24 no key is
cut ("q Qui")."""

from __future__ import annotations

from textual.widgets import Footer

WIDE_FOOTER = 120


class MemsightFooter(Footer):
    def __init__(self, *, keys_at_mount: bool = False, **kwargs) -> None:
        # compact from the start (the app's size is known when a screen composes): a footer made wide and
        # then compact restyles every key twice before the first frame
        super().__init__(show_command_palette=False, compact=self._compact(), **kwargs)
        if keys_at_mount:
            # mounted onto a screen already shown (the Live screen's, with its first figures): the screen's
            # keys are known, so they are composed with the footer. Textual's footer waits for the screen's
            # bindings signal, then a refresh, then recomposes: a footer without keys for two refreshes.
            self.set_reactive(Footer._bindings_ready, True)

    def _compact(self) -> bool:
        return self.app.size.width < WIDE_FOOTER

    def on_mount(self) -> None:
        self.compact = self._compact()

    def on_resize(self) -> None:
        self.compact = self._compact()
