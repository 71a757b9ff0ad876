"""Asked on `q` while the command `memsight run` started still runs: stop it, leave it, or stay."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class QuitScreen(ModalScreen[str]):
    """Dismissed with "stop" (stop the command as Ctrl-C does, then quit), "leave" (close the view; memsight
    waits for the command) or "stay"."""

    BINDINGS = [
        Binding("y,ctrl+c", "choose('stop')", "Stop it and quit"),
        Binding("w", "choose('leave')", "Quit the view, let it run"),
        Binding("n,escape,q", "choose('stay')", "Stay"),
    ]

    def __init__(self, command: str, pid: int) -> None:
        super().__init__(id="quit")
        self._command = command
        self._pid = pid

    def compose(self) -> ComposeResult:
        with Vertical(id="quit-box"):
            yield Static(f"{self._command} (pid {self._pid}) is still running.", id="quit-question")
            yield Static(
                "y  stop it (Ctrl-C, killed after the grace) and quit\n"
                "w  quit the view; memsight waits for it to end\n"
                "n  stay (also Esc)",
                id="quit-choices",
            )

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice)
