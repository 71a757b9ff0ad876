"""--engine-url: SGLang's and llama-server's /metrics (prometheus_client's parser), llama-server's /slots and
Ollama's /api/ps, read from recorded bodies served by a real loopback HTTP server; every failure a status."""

from __future__ import annotations

import pathlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from collectors.engine_metrics import (
    EngineMetrics,
    normalize_engine_url,
    slots_from_json,
    snapshot_from_metrics,
    snapshot_from_ps,
)
from collectors.errors import CollectorError

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "engine_metrics"


def _body(name: str) -> str:
    return (DATA / name).read_text()


def test_sglang_metrics_from_sglangs_own_docs():
    snap = snapshot_from_metrics(_body("sglang_production_metrics.txt"), url="u")
    assert (snap.kind, snap.status, snap.available) == ("sglang", "ok", True)
    assert snap.kv_usage == 0.28
    assert snap.kv_tokens_used == 123859
    assert snap.kv_tokens_total is None  # that release exported no sglang:max_total_num_tokens: not a zero
    assert (snap.running, snap.waiting) == (162, 2826)
    assert snap.cache_hit_rate == pytest.approx(0.007507552643049313)
    lines = _body("sglang_production_metrics.txt").splitlines()
    assert snap.samples == sum(1 for line in lines if line and not line.startswith("#")) == 91


def test_ollama_ps_from_ollamas_own_docs():
    snap = snapshot_from_ps(_body("ollama_api_ps.json"), url="u")
    assert (snap.kind, snap.status) == ("ollama", "ok")
    (load,) = snap.loads
    assert (load.name, load.size, load.size_vram, load.context_length) == (
        "mistral:latest",
        5137025024,
        5137025024,
        None,
    )


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ("{}", "has no models list: not Ollama"),
        ('{"models": [{"name": "x", "size": -1, "size_vram": 0}]}', "are not byte counts"),
        ("not json", "is not JSON"),
        ('{"models": []}', "ok: no model loaded"),
    ],
)
def test_ps_bodies_that_are_not_loads(body, status):
    snap = snapshot_from_ps(body, url="u")
    assert status in snap.status
    assert snap.loads == ()


def test_metrics_of_another_server_are_a_status_not_zeros():
    snap = snapshot_from_metrics("# TYPE up gauge\nup 1\n", url="u")
    assert not snap.available and "none named sglang:* or llamacpp:*" in snap.status
    assert snap.kv_usage is None and snap.running is None
    vllm = snapshot_from_metrics('vllm:num_requests_running{model_name="m"} 1\n', url="u")
    assert "--vllm-url" in vllm.status


def test_slots_json_and_its_errors():
    slots = slots_from_json(
        '[{"id": 0, "n_ctx": 4096, "is_processing": false}, {"id": 1, "n_ctx": 4096, "is_processing": true}]'
    )
    assert [(s.id, s.n_ctx, s.processing) for s in slots] == [(0, 4096, False), (1, 4096, True)]
    with pytest.raises(CollectorError, match="not a list"):
        slots_from_json('{"error": "slots endpoint disabled"}')


class _Handler(BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, bytes]] = {}

    def do_GET(self):  # noqa: N802
        code, body = self.routes.get(self.path, (404, b"not found"))
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _serve(srv, routes):
    _Handler.routes = routes
    return f"http://127.0.0.1:{srv.server_address[1]}"


def test_sglang_over_loopback_http(server):
    base = _serve(server, {"/metrics": (200, _body("sglang_production_metrics.txt").encode())})
    snap = EngineMetrics(base).sample()
    assert (snap.kind, snap.kv_tokens_used, snap.url) == ("sglang", 123859, base + "/metrics")
    assert snap.scrape_s is not None and snap.scrape_s >= 0


def test_ollama_found_on_api_ps_when_there_is_no_metrics(server):
    base = _serve(server, {"/api/ps": (200, _body("ollama_api_ps.json").encode())})
    metrics = EngineMetrics(base)
    snap = metrics.sample()
    assert (snap.kind, snap.loads[0].size_vram, snap.url) == ("ollama", 5137025024, base + "/api/ps")
    assert metrics.sample().kind == "ollama"  # the endpoint found is kept


def test_every_failure_is_a_status(server):
    base = _serve(server, {"/metrics": (500, b"boom"), "/api/ps": (200, b"\xff\xfe")})
    assert EngineMetrics(base).sample().status.startswith("HTTP 500")
    _Handler.routes = {"/api/ps": (200, b"\xff\xfe")}
    assert "not UTF-8" in EngineMetrics(base).sample().status
    refused = EngineMetrics("http://127.0.0.1:9").sample()
    assert not refused.available and refused.status.startswith(("connection refused", "cannot reach"))


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("localhost:30000", "http://localhost:30000"),
        ("http://h:11434/api/ps", "http://h:11434/api/ps"),
        ("https://h:8080/metrics/", "https://h:8080/metrics"),
    ],
)
def test_url_normalization(url, expected):
    assert normalize_engine_url(url) == expected


@pytest.mark.parametrize(
    ("url", "message"), [("", "empty"), ("ftp://h", "only http"), ("http://h:x", "port")]
)
def test_bad_urls_are_clear_errors(url, message):
    with pytest.raises(CollectorError, match=message):
        normalize_engine_url(url)
