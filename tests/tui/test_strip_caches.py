"""Once the app is made, no Strip keeps the strips it was cropped, divided or styled into
(tui/render_caches.py: drop_strip_caches): the Live screen draws the same characters and colours, and the
thousands of per-line caches Textual made are gone. Run in a fresh interpreter: the change is process-wide.
The resident memory it saves is bench/live_rss_trend.py's to measure, not a test's."""

from __future__ import annotations

import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]

SCRIPT = """
import asyncio, gc, hashlib, sys
from textual.cache import FIFOCache
from textual.strip import Strip
import tui.app
from tui import render_caches
from tests.tui.fixed_states import gb10_state
from tests.tui.test_snapshots import app_on

assert render_caches.strip_is_as_described()  # the installed Textual's Strip is the one the module describes
original_init = Strip.__init__
dropped = sys.argv[1] == "dropped"
if not dropped:
    tui.app.drop_strip_caches = lambda: False  # Textual's own Strip

async def main():
    app = app_on(gb10_state())
    async with app.run_test(size=(160, 48)) as pilot:
        for key in ("2", "1"):  # the Plan screen and back: every widget of both drawn
            await pilot.press(key)
            await pilot.pause()
        await pilot.pause()
        screen = app.export_screenshot()
        gc.collect()
        strips = [o for o in gc.get_objects() if type(o) is Strip]
        app.exit()
    if dropped:
        assert Strip.__init__._memsight_original is original_init
        new = Strip([])
        assert all(getattr(new, name) is render_caches.KEEPS_NOTHING for name in render_caches.STRIP_CACHES)
        assert render_caches.drop_strip_caches()  # a second call changes nothing
        assert Strip.__init__._memsight_original is original_init
    else:
        assert Strip.__init__ is original_init
    with_caches = sum(1 for strip in strips if type(strip._crop_cache) is FIFOCache)
    print(len(strips), with_caches, hashlib.sha256(screen.encode()).hexdigest())

asyncio.run(main())
"""


def _draw(how: str) -> tuple[int, int, str]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, how], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    strips, with_caches, screen = done.stdout.split()
    return int(strips), int(with_caches), screen


def test_the_live_screen_draws_the_same_without_textuals_per_strip_caches():
    strips, with_caches, screen = _draw("textual")
    assert strips == with_caches > 1000  # each with seven caches of its own
    strips_now, with_caches_now, screen_now = _draw("dropped")
    assert screen_now == screen  # the same screen, character for character, style for style
    assert with_caches_now == 0 and strips_now < strips, (strips, strips_now)
