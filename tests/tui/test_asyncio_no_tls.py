"""The TUI's process imports asyncio without ssl (tui/asyncio_no_tls.py: OpenSSL's libraries are about
4 MiB of the Live screen's resident memory), and ssl is still there for whoever imports it afterwards
(an https /metrics scrape through urllib). Fresh interpreters: this one imported asyncio long ago."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

from tests.conftest import REPO_ROOT

LIVE_SCREEN = """
import sys
import tui.app, tui.cli
from tui import cmd_watch
tui.cli.require_terminal = lambda: None  # headless: the test has no terminal
seen = {}
async def pilot(pilot):
    while pilot.app.live_view is None:
        await pilot.pause(0.05)
    await pilot.pause(0.3)
    seen["ssl"] = "ssl" in sys.modules or "_ssl" in sys.modules
    seen["libssl"] = any("libssl" in line or "libcrypto" in line for line in open("/proc/self/maps"))
    pilot.app.exit()
def run(app):
    import asyncio
    asyncio.run(app.run_async(headless=True, size=(120, 40), auto_pilot=pilot))
tui.app.MemsightApp.run = run
seen["code"] = tui.cli.main(["watch", "--hz", "4"])
import urllib.request, ssl
seen["https_after"] = hasattr(urllib.request, "HTTPSHandler") and ssl.create_default_context() is not None
import asyncio.sslproto
seen["asyncio_ssl"] = asyncio.sslproto.ssl
print(repr(seen), file=sys.stderr)
"""


def run_fresh(code: str, tmp_path) -> dict:
    env = {
        **os.environ,
        "MEMSIGHT_CONFIG": str(tmp_path / "no-config.toml"),
        "MEMSIGHT_AGENT_DIR": str(tmp_path / "agents"),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    return ast.literal_eval(done.stderr.splitlines()[-1])


def test_the_live_screen_runs_without_ssl_and_ssl_still_imports_afterwards(tmp_path):
    seen = run_fresh(LIVE_SCREEN, tmp_path)
    assert seen["code"] == 0
    assert seen["ssl"] is False  # asyncio, textual and the Live screen's first seconds never loaded it
    if sys.platform == "linux":
        assert seen["libssl"] is False
    assert seen["https_after"] is True  # urllib's https handler, made after the app ran
    assert seen["asyncio_ssl"] is None  # asyncio itself offers no TLS: it says so if asked


def test_asyncio_already_imported_is_left_as_it_is(tmp_path):
    code = (
        "import sys, ssl, asyncio\nimport tui.asyncio_no_tls as m\n"
        "print(repr({'same': m.asyncio is asyncio, 'ssl': asyncio.sslproto.ssl is ssl}), file=sys.stderr)\n"
    )
    assert run_fresh(code, tmp_path) == {"same": True, "ssl": True}


def test_asking_asyncio_for_tls_is_a_clear_error(tmp_path):
    code = (
        "import socket, sys, tui.asyncio_no_tls\nimport asyncio\n"
        "server = socket.create_server(('127.0.0.1', 0))\n"
        "async def main():\n"
        "    try:\n"
        "        await asyncio.open_connection('127.0.0.1', server.getsockname()[1], ssl=True)\n"
        "    except Exception as exc:\n"
        "        return f'{type(exc).__name__}: {exc}'\n"
        "print(repr({'error': asyncio.run(main())}), file=sys.stderr)\n"
    )
    assert run_fresh(code, tmp_path)["error"] == "RuntimeError: stdlib ssl module not available"
