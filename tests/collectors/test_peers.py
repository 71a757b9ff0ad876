"""--peer (collectors/peers.py): another memsight's headroom and buckets, from its exporter, started here on
127.0.0.1; a peer that is down or never answers is one line, and nothing waits for it."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from collectors.errors import CollectorError
from collectors.monitor import Monitor
from collectors.peers import PeerWatcher, peer_url
from tests.conftest import HANG_GUARD_S, REPO_ROOT
from tui.app import MemsightApp
from tui.screens.peer_view import peer_lines


@pytest.fixture
def second_memsight(tmp_path):
    """A second memsight (headless, watching a sleeping command) serving its exporter on 127.0.0.1."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tui.cli", "run", "--headless", "--no-flight-recorder",
         "--prometheus", "127.0.0.1:0", "--agent-dir", str(tmp_path / "agents"),
         "--", sys.executable, "-c", "import time; time.sleep(60)"],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    line = proc.stderr.readline()
    match = re.search(r"serving (http://127\.0\.0\.1:\d+/metrics)", line)
    assert match, line
    yield match.group(1)
    command = _children(proc.pid)  # before memsight goes: its command would be orphaned, sleeping
    proc.kill()
    proc.wait(HANG_GUARD_S)
    for child in command:
        child.kill()


def _children(pid: int):
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _served(url: str) -> dict[str, float]:
    body = urllib.request.urlopen(url, timeout=5).read().decode()
    families = text_string_to_metric_families(body)
    return {s.name: s.value for f in families for s in f.samples}  # one sample each of those read here


def _wait(predicate, what: str):
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"gave up waiting for {what}")


def test_the_peer_s_headroom_is_what_its_exporter_serves(second_memsight, tmp_path):
    monitor = Monitor(agent_dir=str(tmp_path / "mine"), peers=[second_memsight]).start()
    try:
        peer = _wait(lambda: next((p for p in monitor.state().peers if p.status == "ok"), None), "the peer")
        served = _served(second_memsight)
    finally:
        monitor.stop()
    # the same machine serves both: its total is exact, its headroom moves by what the host did in between
    assert peer.total_bytes == served["memsight_os_mem_total_bytes"]
    assert peer.headroom_source == "MemAvailable" and not peer.unified
    assert abs(peer.headroom_bytes - served["memsight_headroom_bytes"]) < 512 * 2**20
    assert peer.buckets == (("weights", None), ("kv", None), ("activations", None), ("overhead", None))
    line = peer_lines(monitor.state())[0]
    assert line.startswith(f"peer 127.0.0.1:{second_memsight.split(':')[2].split('/')[0]}: headroom ")
    assert "GiB (MemAvailable) · no agent there" in line


def test_a_down_peer_is_one_line_and_a_silent_one_never_holds_the_screen(tmp_path):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    silent = socket.socket()  # accepts connections and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    silent_port = silent.getsockname()[1]
    monitor = Monitor(
        agent_dir=str(tmp_path / "mine"), peers=[f"127.0.0.1:{closed_port}", f"127.0.0.1:{silent_port}"]
    )
    for watcher in monitor.peers:
        watcher._fetcher.timeout_s = 0.5  # the default 2 s timeout, shortened for the test
    monitor.start()
    try:
        down, hung = _wait(
            lambda: (s := monitor.state().peers) and all(p.status.startswith("down") for p in s) and s,
            "both peers to be down",
        )
        # while the silent peer's next fetch hangs, the state keeps being built and read at once
        began = time.monotonic()
        t0 = monitor.state().t
        _wait(lambda: monitor.state().t > t0, "a new state")
        assert time.monotonic() - began < 2.0
    finally:
        monitor.stop()
        silent.close()
    assert down.status.startswith("down: connection refused")
    assert hung.status.startswith("down: timed out after 0.5 s")
    lines = peer_lines(monitor.state())
    assert len(lines) == 2 and all("\n" not in line for line in lines)
    assert lines[0] == f"peer 127.0.0.1:{closed_port}: {down.status}"


def test_peer_urls_and_a_non_memsight_answer(tmp_path):
    assert peer_url("spark-b:9400") == "http://spark-b:9400/metrics"
    assert peer_url("http://10.0.0.2:9400/") == "http://10.0.0.2:9400/metrics"
    for bad, why in (("", "empty"), ("ftp://x:1", "expected"), ("spark-b", "names no port"), ("h:x", "port")):
        with pytest.raises(CollectorError, match=why):
            peer_url(bad)
    # an HTTP server that is not memsight (a vLLM server, say): said so, no figures invented
    from tests.collectors.builders import serve_body  # noqa: PLC0415

    server = serve_body(b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n")
    try:
        snap = PeerWatcher(f"127.0.0.1:{server.server_address[1]}").poll()
    finally:
        server.shutdown()
        server.server_close()
    assert snap.status.startswith("down: ") and "not as memsight" in snap.status and snap.ok_t is None


async def test_the_live_screen_shows_the_peer_line(second_memsight, tmp_path):
    monitor = Monitor(agent_dir=str(tmp_path / "mine"), peers=[second_memsight])
    app = MemsightApp(monitor)
    async with app.run_test(size=(160, 48)) as pilot:
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline and not any(p.status == "ok" for p in monitor.state().peers):
            await pilot.pause(0.1)
        # a refresh tick after the fetch, waited for (a fixed 0.6 s could see none on a loaded machine)
        text, deadline = "", time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline and not (text.startswith("peer 127.0.0.1:") and "headroom" in text):
            await pilot.pause(0.1)
            text = str(app.screen.query_one("#live-peers").render())
        assert text.startswith("peer 127.0.0.1:") and "headroom" in text
