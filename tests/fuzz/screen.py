"""The live screen as a fuzz surface: one real MemsightApp (App.run_test), started once per process on a
thread of its own and kept across cases, draws each case's state at 160x48 or at 80x24 (half the cases each).

Starting an app costs seconds, so a fresh one per case would make 10,000 cases a run of many hours; one app,
its monitor swapped under it, rebuilds and draws a new state in a fraction of a second. An exception while
drawing (raised by refresh_data, or caught by Textual, which then stops the app) is the case's crash, and the
next case gets a fresh app.
"""

from __future__ import annotations

import asyncio
import queue
import signal
import threading
from typing import Any

SIZES = ((160, 48), (80, 24))


class SwappedMonitor:
    """The app's monitor: every call goes to the case's own monitor (a ReplayMonitor, a Monitor), so the app
    draws it as `replay` or `watch` would (a replay has seek/toggle_pause: the replay controls show)."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)


class ScreenDriver:
    """draw(monitor, size): the app shows monitor.state() at that size; an exception raised while drawing is
    raised here, on the caller's thread."""

    def __init__(self) -> None:
        self._requests: queue.Queue = queue.Queue()
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._serve(),), name="fuzz-screen", daemon=True
        )
        self._thread.start()
        self._ready.wait()  # a start that never ends is the case's hang (the guard's SIGALRM interrupts this)
        if self._failed is not None:
            raise self._failed

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def draw(self, monitor: Any, size: tuple[int, int]) -> None:
        reply: queue.Queue = queue.Queue()
        self._send((monitor, size, reply))
        error = reply.get()
        if error is not None:
            raise error

    def close(self) -> None:
        if self.alive:
            self._send((None, None, None))
            self._thread.join(10)

    def _send(self, request: tuple) -> None:
        # the app's loop is woken by call_soon_threadsafe, not by a worker thread blocked on the queue: such a
        # worker (asyncio.to_thread) is joined at interpreter exit, and would hold the process forever
        self._requests.put(request)
        self._loop.call_soon_threadsafe(self._wakeup.set)

    async def _next(self) -> tuple:
        while self._requests.empty():
            await self._wakeup.wait()
            self._wakeup.clear()
        return self._requests.get_nowait()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        from collectors.state import StateBuilder
        from tests.tui.fixed_states import FixedMonitor
        from tui.app import MemsightApp

        swapped = SwappedMonitor(FixedMonitor(StateBuilder().build(1.0)))
        app = MemsightApp(swapped, source_label="fuzz", manage_monitor=False)
        try:
            async with app.run_test(size=SIZES[0]) as pilot:
                self._ready.set()
                while True:
                    monitor, size, reply = await self._next()
                    if monitor is None:
                        return
                    try:
                        swapped.target = monitor
                        if size != (app.size.width, app.size.height):
                            await pilot.resize_terminal(*size)
                        app.refresh_data()
                        await pilot.pause()  # the screen's layout and render of the new values
                        if app._exception is not None:  # Textual caught it and is stopping the app
                            raise app._exception
                    except Exception as exc:
                        reply.put(exc)
                        return  # this app may be half-updated or stopping: the next case gets a fresh one
                    reply.put(None)
        except BaseException as exc:  # the app itself failed to start or stop
            self._failed = exc
            self._ready.set()


_driver: ScreenDriver | None = None


def draw(monitor: Any, size: tuple[int, int]) -> None:
    """Draw monitor.state() at `size` on this process's app (started on first use, again after a crash)."""
    global _driver
    if _driver is None or not _driver.alive:
        # starting an app takes seconds on a loaded machine: no part of the case, so not under its hang guard
        left, _ = signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            _driver = ScreenDriver()
        finally:
            if left:
                signal.setitimer(signal.ITIMER_REAL, left)
    _driver.draw(monitor, size)
