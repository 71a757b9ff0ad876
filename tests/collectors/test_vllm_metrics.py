"""vLLM /metrics: the Prometheus text parser on real recorded scrapes, a real loopback HTTP server, and every
way a scrape can fail turning into a status (never an exception, never zeros)."""

from __future__ import annotations

import dataclasses
import math
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from collectors.errors import CollectorError
from collectors.recording import read_recording
from collectors.recording_summary import summarize
from collectors.snapshots import VLLMModelStats
from collectors.vllm_metrics import (
    VLLMMetrics,
    normalize_url,
    parse_prometheus_text,
    vllm_snapshot_from_text,
)
from tests.conftest import REPO_ROOT, SHARED_FIXTURES, needs_shared

V0_ENGINE = "vllm_metrics_v0-engine_qwen3-vl-55_excerpt.txt"
HELP_ONLY = "vllm_metrics_v0-help-only_functionary-263_excerpt.txt"
V0_STYLE = "vllm_metrics_v0-style_production-stack-318_excerpt.txt"
V0_10 = "vllm_metrics_v0.10.0_production-stack-617_excerpt.txt"

# A V1-style scrape written for this project (the shape prometheus_client gives vLLM >= 0.10, with two
# data-parallel engines), so the figures that matter are checked without ../shared too (a fuzz seed as well).
TEST_DATA = REPO_ROOT / "tests" / "data"
V1_TWO_ENGINES = (TEST_DATA / "vllm_metrics_v1_two_engines.txt").read_text()


def _fixture(name: str) -> str:
    return (SHARED_FIXTURES / name).read_text()


# ------------------------------------------------------------------------------------ parser
def test_parser_labels_escapes_special_values_timestamps_and_histograms():
    text = (
        "# HELP odd A help with a \\\\ backslash and a \\n newline.\n"
        "# TYPE odd gauge\n"
        'odd{path="C:\\\\tmp",quote="say \\"hi\\"",nl="a\\nb",comma="x,y}z",} NaN\n'
        'odd{path="b"} +Inf 1700000000000\n'
        'odd{path="c"} -Inf\n'
        "# TYPE lat histogram\n"
        'lat_bucket{le="0.5"} 3\n'
        'lat_bucket{le="+Inf"} 4\n'
        "lat_sum 1.5e+00\n"
        "lat_count 4\n"
        "# TYPE reqs_total counter\n"  # the 0.0.4 text format: TYPE names the sample, `_created` is a gauge
        "reqs_total 7\n"
        "# TYPE reqs_created gauge\n"
        "reqs_created 1.7537953269e+09\n"
        "untyped_thing 2\n"
        "# EOF\n"
    )
    scrape = parse_prometheus_text(text)
    assert list(scrape.families) == ["odd", "lat", "reqs_total", "reqs_created", "untyped_thing"]
    odd = scrape.families["odd"]
    assert odd.help == "A help with a \\ backslash and a \n newline." and odd.type == "gauge"
    first, second, third = odd.samples
    assert dict(first.labels) == {"path": "C:\\tmp", "quote": 'say "hi"', "nl": "a\nb", "comma": "x,y}z"}
    assert math.isnan(first.value) and first.timestamp_ms is None
    assert second.value == math.inf and second.timestamp_ms == 1700000000000
    assert third.value == -math.inf
    lat = scrape.families["lat"]
    assert lat.type == "histogram" and [s.name for s in lat.samples] == [
        "lat_bucket",
        "lat_bucket",
        "lat_sum",
        "lat_count",
    ]
    assert scrape.values("lat_sum")[0].value == 1.5 and scrape.values("lat_count")[0].value == 4.0
    assert scrape.families["reqs_total"].type == "counter"
    assert [s.name for s in scrape.families["reqs_total"].samples] == ["reqs_total"]
    assert scrape.values("reqs_created")[0].value == 1.7537953269e09
    assert scrape.families["untyped_thing"].type == "untyped"


@pytest.mark.parametrize(
    ("text", "message"),
    [  # the whole message: the line, its text, and prometheus_client's reason
        ("good 1\n{bad} 2\n", "line 2: cannot parse '{bad} 2' (Invalid labels: bad)"),
        ('x{a="1"\n', "line 1: cannot parse 'x{a=\"1\"' (could not convert string to float: '{a=\"1\"')"),
        ("x{a=1} 2\n", "line 1: cannot parse 'x{a=1} 2' (Invalid labels: a=1)"),
        ("x 12abc\n", "line 1: cannot parse 'x 12abc' (could not convert string to float: '12abc')"),
        ("x\n", "line 1: cannot parse 'x' (invalid metric name:x)"),
        ("# TYPE x sparkline\n", "line 1: unknown metric type 'sparkline' for 'x'"),
        ('x{a="1" b="2"} 3\n', 'line 1: cannot parse \'x{a="1" b="2"} 3\' (Invalid labels: a="1" b="2")'),
        # issue 12: a timestamp past float range raised OverflowError out of the parser
        ("# TYPE x gauge\nx 1 1e999\n", "sample 'x' has timestamp inf: not a finite time"),
        pytest.param(
            "x 1 1" + "0" * 400 + "\n",
            "line 1: cannot parse 'x 1 1" + "0" * 75 + "' (integer division result too large for a float)",
            id="integer-timestamp-past-float-range",
        ),
        pytest.param(
            "x 1\n" + "y" * 70000 + " 1\n",
            "line 2: 70002 characters, over the 65536 a line may have",
            id="over-long-line",
        ),
    ],
)
def test_parser_names_the_bad_line(text, message):
    with pytest.raises(CollectorError) as err:
        parse_prometheus_text(text)
    assert str(err.value) == message


def test_a_1e999_timestamp_is_a_status_not_an_exception():
    """issue 12: the scraper promises never to raise; a timestamp past float range raised OverflowError."""
    snap = vllm_snapshot_from_text("vllm:num_requests_running 1 1e999\n", url="u")
    assert (
        snap.status == "malformed /metrics from u: sample 'vllm:num_requests_running' has timestamp inf: "
        "not a finite time"
    )
    assert not snap.available and snap.models == ()


def test_huge_values_are_infinite_like_float_text():
    scrape = parse_prometheus_text("a 1" + "0" * 400 + "\nb -1" + "0" * 5000 + "\nc 1e999\n")
    assert [s.value for s in scrape.samples] == [math.inf, -math.inf, math.inf]


def test_v1_two_engines_from_project_data():
    snap = vllm_snapshot_from_text(V1_TWO_ENGINES, url="http://x/metrics", t=5.0)
    assert snap.status == "ok" and snap.available and snap.t == 5.0
    e0, e1 = snap.models
    assert (e0.model_name, e0.engine, e1.engine) == ("meta-llama/Llama-3.1-8B", "0", "1")
    assert (e0.kv_cache_usage, e1.kv_cache_usage) == (0.875, 0.5)
    assert e0.kv_cache_metric == "vllm:kv_cache_usage_perc"
    assert (e0.requests_running, e0.requests_waiting, e1.requests_running, e1.requests_waiting) == (
        7,
        3,
        5,
        0,
    )
    assert (e0.preemptions_total, e1.preemptions_total) == (12, 0)
    assert (e0.prefix_cache_hits, e0.prefix_cache_queries, e0.prefix_cache_hit_rate) == (1024, 4096, 0.25)
    # engine 1 exported no prefix counters: unknown, not 0
    assert (e1.prefix_cache_hits, e1.prefix_cache_queries, e1.prefix_cache_hit_rate) == (None, None, None)
    assert e0.requests_swapped is None  # a V0-only gauge
    assert (snap.num_gpu_blocks, snap.block_size, snap.gpu_memory_utilization) == (27153, 16, 0.9)
    assert snap.kv_capacity_tokens == 27153 * 16
    assert snap.samples == 15  # every sample line, histogram buckets included


# ------------------------------------------------------------------------------------ real recorded scrapes
@needs_shared
def test_v0_engine_scrape_with_cache_config_info():
    snap = vllm_snapshot_from_text(_fixture(V0_ENGINE), url="u")
    assert snap.status == "ok" and snap.samples == 6
    (m,) = snap.models
    assert (m.model_name, m.engine) == ("qwenvl", None)
    assert m.kv_cache_usage == 0.0 and m.kv_cache_metric == "vllm:gpu_cache_usage_perc"
    assert (m.requests_running, m.requests_waiting, m.requests_swapped) == (0, 0, 0)
    assert m.cpu_cache_usage == 0.0
    assert m.preemptions_total is None and m.prefix_cache_hits is None  # not in this scrape
    assert (snap.num_gpu_blocks, snap.block_size, snap.gpu_memory_utilization) == (2048, 16, 0.9)
    assert snap.kv_capacity_tokens == 32768
    scrape = parse_prometheus_text(_fixture(V0_ENGINE))
    info = scrape.values("vllm:cache_config_info")[0]
    assert info.label("sliding_window") == "None" and info.label("swap_space_bytes") == "0.0"
    # the excerpt ends on a HELP line: that family exists with no sample
    assert scrape.families["vllm:cpu_prefix_cache_hit_rate"].samples == ()


@needs_shared
def test_help_only_excerpt_is_no_samples_not_zeros():
    snap = vllm_snapshot_from_text(_fixture(HELP_ONLY), url="http://h:8000/metrics")
    assert not snap.available and snap.models == () and snap.samples == 0
    assert snap.status == "no samples: http://h:8000/metrics served 15 HELP/TYPE line(s) and no values"
    scrape = parse_prometheus_text(_fixture(HELP_ONLY))
    assert len(scrape.families) == 8 and scrape.samples == ()
    assert (
        scrape.families["vllm:num_preemptions_total"].help
        == "Cumulative number of preemption from the engine."
    )


@needs_shared
def test_production_stack_scrape_process_metrics_and_model_label():
    text = _fixture(V0_STYLE)
    scrape = parse_prometheus_text(text)
    assert scrape.values("process_start_time_seconds")[0].value == 1.74262400557e09
    assert scrape.values("process_cpu_seconds_total")[0].value == 439.71999999999997
    assert scrape.values("process_max_fds")[0].value == 1048576.0
    assert scrape.families["process_cpu_seconds_total"].type == "counter"
    snap = vllm_snapshot_from_text(text)
    (m,) = snap.models
    assert (m.model_name, m.engine) == ("Qwen/Qwen2.5-Coder-32B-Instruct", None)
    assert (m.kv_cache_usage, m.requests_running, m.requests_waiting) == (0.0, 0, 0)
    assert m.kv_cache_metric == "vllm:gpu_cache_usage_perc"
    assert snap.num_gpu_blocks is None  # no cache_config_info in this scrape: unknown
    assert snap.samples == 7


@needs_shared
def test_vllm_0_10_names_engine_label_and_deprecated_prefix_counters():
    text = _fixture(V0_10)
    snap = vllm_snapshot_from_text(text)
    (m,) = snap.models
    assert (m.model_name, m.engine) == ("zai-org/GLM-4.5", "0")
    assert m.kv_cache_usage == 9.75010481363281e-06 and m.kv_cache_metric == "vllm:kv_cache_usage_perc"
    # queries from the new name, hits only from the deprecated one (the excerpt has no new hits counter)
    assert (m.prefix_cache_queries, m.prefix_cache_hits) == (32, 0)
    assert m.prefix_cache_metrics == ("vllm:gpu_prefix_cache_hits_total", "vllm:prefix_cache_queries_total")
    assert m.prefix_cache_hit_rate == 0.0
    assert m.requests_running is None  # not in the excerpt
    created = parse_prometheus_text(text).values("vllm:gpu_prefix_cache_queries_created")[0]
    assert created.value == 1.7537953269352946e09


# ------------------------------------------------------------------------------------ a real HTTP server
class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        routes = self.server.routes  # type: ignore[attr-defined]
        if self.path not in routes:
            self.send_error(404)
            return
        status, body, delay = routes[self.path]
        if isinstance(delay, threading.Event):  # held until the test lets it answer
            delay.wait(timeout=60)
        else:
            time.sleep(delay)
        try:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (the timeout test): expected

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.routes = {"/metrics": (200, V1_TWO_ENGINES.encode(), 0.0)}
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv, f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@needs_shared
def test_scrape_a_recorded_fixture_over_loopback_http(server):
    srv, hostport = server
    srv.routes["/metrics"] = (200, (SHARED_FIXTURES / V0_10).read_bytes(), 0.0)
    metrics = VLLMMetrics(hostport)  # no scheme, no path: http:// and /metrics are added
    assert metrics.url == f"http://{hostport}/metrics"
    snap = metrics.sample()
    assert snap.status == "ok" and snap.url == metrics.url and snap.scrape_s is not None
    assert snap.models[0].kv_cache_usage == 9.75010481363281e-06
    srv.routes["/metrics"] = (200, (SHARED_FIXTURES / HELP_ONLY).read_bytes(), 0.0)
    empty = metrics.sample()
    assert empty.status.startswith("no samples: ") and empty.models == ()


# engine 0's KV usage -3, engine 1's 5 and a running count of -2; a second model's +Inf, a third's NaN; a
# cache_config_info claiming a gpu_memory_utilization of 7
LLAMA = 'model_name="meta-llama/Llama-3.1-8B"}'
OUT_OF_RANGE = (
    V1_TWO_ENGINES.replace(f"{LLAMA} 0.875", f"{LLAMA} -3")
    .replace(f"{LLAMA} 0.5", f"{LLAMA} 5")
    .replace(f'engine="1",{LLAMA} 5.0', f'engine="1",{LLAMA} -2')
    .replace('gpu_memory_utilization="0.9"', 'gpu_memory_utilization="7"')
    + 'vllm:kv_cache_usage_perc{model_name="b"} +Inf\nvllm:kv_cache_usage_perc{model_name="c"} NaN\n'
)  # fmt: skip


def test_out_of_range_values_are_refused_said_never_exported_and_refused_again_in_replay(server, tmp_path):
    """issue 17 item 7: a KV usage of -3, 5, inf or NaN went to the exporter and the screen as it was."""
    from collectors.exporter import render_metrics
    from collectors.monitor import Monitor
    from collectors.nvml_collector import NVMLCollector
    from collectors.replay import ReplayMonitor

    snap = vllm_snapshot_from_text(OUT_OF_RANGE, url="u")
    assert snap.status == "ok"
    e0, e1, b, c = snap.models
    assert [m.kv_cache_usage for m in (e0, e1, b, c)] == [None, None, None, None]  # unknown, never the value
    assert (e0.requests_running, e1.requests_running, e0.preemptions_total) == (7, None, 12)  # the rest kept
    assert (snap.gpu_memory_utilization, snap.num_gpu_blocks) == (None, 27153)
    assert snap.refused == (
        "meta-llama/Llama-3.1-8B engine 0 vllm:kv_cache_usage_perc: -3.0 is not a fraction within 0..1",
        "meta-llama/Llama-3.1-8B engine 1 vllm:kv_cache_usage_perc: 5.0 is not a fraction within 0..1",
        "meta-llama/Llama-3.1-8B engine 1 vllm:num_requests_running: -2.0 is not a count",
        "b vllm:kv_cache_usage_perc: inf is not a fraction within 0..1",
        "c vllm:kv_cache_usage_perc: nan is not a fraction within 0..1",
        "vllm:cache_config_info gpu_memory_utilization: 7.0 is not a fraction within 0..1",
    )

    srv, hostport = server
    srv.routes["/metrics"] = (200, OUT_OF_RANGE.encode(), 0.0)
    out = tmp_path / "rec.jsonl"
    nvml = NVMLCollector(_NoNVML())
    monitor = Monitor(agent_dir=str(tmp_path / "a"), record_to=out, nvml=nvml, vllm_url=hostport)
    state = monitor.sample_once()
    monitor.stop()
    warning = state.input_warnings["vllm"]
    assert warning == f"refused vLLM value(s): {snap.refused[0]} (and 5 more)"
    scrape = parse_prometheus_text(render_metrics(state))
    assert scrape.values("memsight_vllm_kv_cache_usage") == ()  # no engine's usage is exported
    assert [s.value for s in scrape.values("memsight_vllm_values_refused")] == [6]
    assert [s.value for s in scrape.values("memsight_vllm_requests_running")] == [7]  # engine 0's only

    replayed = ReplayMonitor(out).advance_to(60.0)
    assert replayed.vllm.refused == snap.refused and replayed.input_warnings["vllm"] == warning


def test_a_recording_holding_out_of_range_values_is_refused_on_replay(tmp_path):
    """A recording made before values were checked (or edited): replay refuses what the scrape would."""
    import json

    from collectors.recorder import FORMAT_VERSION
    from collectors.replay import ReplayMonitor

    header = {"k": "header", "version": FORMAT_VERSION, "created": 1.0, "host": "h", "hz": 1.0}
    fields = {f.name: None for f in dataclasses.fields(VLLMModelStats)} | {"prefix_cache_metrics": []}
    model = fields | {"model_name": "m", "kv_cache_usage": 5.0, "requests_running": 3}
    event = {"k": "vllm", "t": 2.0, "url": "u", "status": "ok", "available": True, "models": [model]}
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(header) + "\n" + json.dumps(event) + "\n")
    state = ReplayMonitor(path).advance_to(10.0)
    (m,) = state.vllm.models
    assert (m.kv_cache_usage, m.requests_running) == (None, 3)
    assert state.vllm.refused == ("m kv_cache_usage: 5.0 is not a fraction within 0..1",)
    assert state.input_warnings["vllm"].startswith("refused vLLM value(s): m kv_cache_usage: 5.0")


def test_every_failure_is_a_status(server):
    srv, hostport = server
    srv.routes.update(
        {
            "/garbage": (200, b"<html><body>not metrics</body></html>\n", 0.0),
            "/binary": (200, b"\xff\xfe\x00bad", 0.0),
            "/error": (500, b"boom", 0.0),
            "/slow": (200, V1_TWO_ENGINES.encode(), 1.5),
            "/other": (200, b"# TYPE up gauge\nup 1\n", 0.0),
        }
    )
    base = f"http://{hostport}"
    assert VLLMMetrics(base).sample().status == "ok"
    garbage = VLLMMetrics(base + "/garbage").sample()
    assert (
        garbage.status.startswith(f"malformed /metrics from {base}/garbage: line 1:")
        and not garbage.available
    )
    assert VLLMMetrics(base + "/binary").sample().status.startswith(f"malformed /metrics from {base}/binary")
    assert VLLMMetrics(base + "/error").sample().status == f"HTTP 500 Internal Server Error from {base}/error"
    assert VLLMMetrics(base + "/nope").sample().status.startswith(f"HTTP 404 Not Found from {base}/nope")
    assert VLLMMetrics(base + "/other").sample().status == (
        f"no vLLM metrics: {base}/other served 1 sample(s), none named vllm:*"
    )
    began = time.monotonic()
    slow = VLLMMetrics(base + "/slow", timeout_s=0.3).sample()
    assert time.monotonic() - began < 1.2  # bounded by the timeout, not by the server
    assert slow.status == f"timed out after 0.3 s: {base}/slow" and slow.models == ()

    # a port nobody listens on
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    refused = VLLMMetrics(f"127.0.0.1:{port}").sample()
    assert refused.status == f"connection refused: nothing listens at http://127.0.0.1:{port}/metrics"
    assert not refused.available and refused.models == ()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("localhost:8000", "http://localhost:8000/metrics"),
        ("http://10.0.0.5:8000/", "http://10.0.0.5:8000/metrics"),
        ("https://vllm.example/custom/metrics", "https://vllm.example/custom/metrics"),
    ],
)
def test_url_normalization(url, expected):
    assert normalize_url(url) == expected


@pytest.mark.parametrize(("url", "message"), [("ftp://h/x", "only http"), ("", "empty"), ("h:port", "port")])
def test_bad_urls_are_clear_errors(url, message):
    with pytest.raises(CollectorError, match=message):
        VLLMMetrics(url)


# ------------------------------------------------------------------------------------ monitor, record, replay
class _NoNVML:
    def init(self):
        raise ImportError("no pynvml in this test")


def test_monitor_scrapes_records_and_replays_vllm(server, tmp_path):
    from collectors.monitor import Monitor
    from collectors.nvml_collector import NVMLCollector
    from collectors.replay import ReplayMonitor

    _, hostport = server
    out = tmp_path / "rec.jsonl"
    monitor = Monitor(
        hz=5,
        agent_dir=str(tmp_path / "agents"),
        record_to=out,
        nvml=NVMLCollector(_NoNVML()),
        vllm_url=hostport,
    )
    state = monitor.sample_once()
    assert state.source_status["vllm"] == "ok"
    e0, e1 = state.vllm.models
    assert (e0.kv_cache_usage, e1.kv_cache_usage, e0.preemptions_total) == (0.875, 0.5, 12)
    monitor.stop()

    summary = summarize(read_recording(out))
    vllm_sources = {s["id"]: s for s in summary["sources"] if s["kind"] == "vllm"}
    assert set(vllm_sources) == {"vllm:meta-llama/Llama-3.1-8B:0", "vllm:meta-llama/Llama-3.1-8B:1"}
    fields = vllm_sources["vllm:meta-llama/Llama-3.1-8B:0"]["fields"]
    assert fields["kv_cache_usage"]["last"] == 0.875 and fields["preemptions_total"]["last"] == 12
    assert (
        fields["num_gpu_blocks"]["last"] == 27153
        and vllm_sources["vllm:meta-llama/Llama-3.1-8B:0"]["status"] == "ok"
    )

    replay = ReplayMonitor(out)
    replayed = replay.advance_to(replay.duration_s + 1)
    # everything but the request's duration (not recorded) comes back as it was sampled
    assert replayed.replay and replayed.vllm == dataclasses.replace(state.vllm, scrape_s=None)


def test_failed_scrapes_are_a_vllm_source_with_their_status(tmp_path):
    from collectors.monitor import Monitor
    from collectors.nvml_collector import NVMLCollector

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    out = tmp_path / "rec.jsonl"
    monitor = Monitor(
        agent_dir=str(tmp_path / "a"),
        record_to=out,
        nvml=NVMLCollector(_NoNVML()),
        vllm_url=f"127.0.0.1:{port}",
    )
    state = monitor.sample_once()
    monitor.stop()
    assert state.vllm.models == () and state.source_status["vllm"].startswith("connection refused")
    (src,) = [s for s in summarize(read_recording(out))["sources"] if s["kind"] == "vllm"]
    assert src["id"] == "vllm" and src["status"].startswith("connection refused") and src["fields"] == {}


def test_live_monitor_never_waits_for_a_slow_server(server, tmp_path):
    from collectors.monitor import Monitor
    from collectors.nvml_collector import NVMLCollector

    srv, hostport = server
    # a slow server: it answers only once the test lets it (it answered after a fixed 1 s, and a loaded
    # machine could take that long between start() and the check that no scrape had come back yet)
    answer = threading.Event()
    srv.routes["/metrics"] = (200, V1_TWO_ENGINES.encode(), answer)
    monitor = Monitor(
        hz=10,
        agent_dir=str(tmp_path / "agents"),
        nvml=NVMLCollector(_NoNVML()),
        vllm_url=hostport,
        vllm_hz=5.0,
        vllm_timeout_s=3.0,
    )
    assert monitor.vllm_hz == 1.0  # capped: at most one scrape a second
    began = time.monotonic()
    monitor.start()
    try:
        # start() does not scrape; the vLLM thread does (a scrape of the held server would take the whole
        # 3 s timeout, and leave a timed-out snapshot in the state)
        assert time.monotonic() - began < 2.0
        assert monitor.state().vllm is None and monitor.state().os is not None
        answer.set()
        deadline = time.monotonic() + 30
        while monitor.state().vllm is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert monitor.state().vllm.models[0].kv_cache_usage == 0.875
    finally:
        answer.set()
        monitor.stop()


def test_memsight_run_exits_with_the_childs_status_when_vllm_serves_a_1e999_timestamp(server, tmp_path):
    """issue 12: the OverflowError escaped the scraper, and `run` exited 1 though the child exited 0."""
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    srv, hostport = server
    srv.routes["/metrics"] = (200, b"vllm:num_requests_running 1 1e999\n", 0.0)
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "run", "--headless", "--vllm-url", hostport,
         "--agent-dir", str(tmp_path / "agents"), "--", sys.executable, "-c", "import time; time.sleep(1.5)"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
