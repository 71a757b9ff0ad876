"""Models by name, and one weights default everywhere (issue 11, items 2 and 7): real `memsight plan`
subprocesses, a real local HTTP server standing in for the Hub (HF_ENDPOINT), the real app with a Pilot."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from tests.conftest import REPO_ROOT
from tests.tui.fixed_states import FixedMonitor, bare_state
from tui import cli, cmd_watch
from tui.app import MemsightApp

# A Llama-shaped config.json that names no dtype (as a hand-written tiny model's often does).
TINY = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 1000,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
}


def memsight(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {**os.environ, "MEMSIGHT_CONFIG": os.devnull + ".absent"}
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **(env or {})},
    )


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(TINY))
    return path


async def test_a_config_without_dtype_plans_the_same_weights_live_and_in_plan(tiny):
    """No dtype in config.json: float32 (what transformers loads) in `memsight plan` AND on the Live screen,
    stated in the plan's assumptions; on main the Live screen planned bf16 and showed a false weights gap."""
    done = memsight("plan", str(tiny), "--json")
    assert done.returncode == 0, done.stderr
    cli_plan = json.loads(done.stdout)
    assert cli_plan["format"] == "fp32"
    assert any("float32" in a and "no torch_dtype" in a for a in cli_plan["assumptions"])

    parser, _ = cli.build_parser(["watch"])
    args = parser.parse_args(["watch", "--config", os.devnull, "--model", str(tiny)])
    options = cmd_watch.display_options(cmd_watch.resolve_config(args))
    app = MemsightApp(FixedMonitor(bare_state()), **options)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        (live,) = app._plan_result.live_plans.values()
        assert live.weights.format == "fp32"
        assert live.weight_bytes == cli_plan["weight_bytes"]
        assert live.kv_bytes_per_token == cli_plan["kv_bytes_per_token"]


def test_a_path_that_does_not_exist_says_no_such_file(tmp_path):
    for missing in (str(tmp_path / "nope" / "config.json"), "tiny/config.json", "./llama.json"):
        done = memsight("plan", missing)
        assert done.returncode == 2
        assert done.stderr == f"memsight: {missing}: no such file or folder\n"


def test_a_repo_id_not_cached_says_how_to_get_it(tmp_path):
    done = memsight("plan", "someorg/some-model-7b", env={"HF_HUB_CACHE": str(tmp_path)})
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("memsight: 'someorg/some-model-7b' is not in the local Hugging Face cache")
    assert "--download" in line and "allow_download" not in line


class _FakeHub(http.server.BaseHTTPRequestHandler):
    """Serves /<org>/<name>/resolve/main/config.json like the Hub; records every path asked for."""

    files: dict[str, bytes] = {}
    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.asked.append(self.path)
        body = self.files.get(self.path)
        if body is None:
            self.send_error(404 if "gated" not in self.path else 401)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def fake_hub(tmp_path):
    _FakeHub.files = {"/tinyorg/tiny-llama/resolve/main/config.json": json.dumps(TINY).encode()}
    _FakeHub.asked = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", {"HF_HUB_CACHE": str(tmp_path / "hub")}
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_download_fetches_only_config_json_when_asked(fake_hub):
    endpoint, env = fake_hub
    env = {**env, "HF_ENDPOINT": endpoint}
    refused = memsight("plan", "tinyorg/tiny-llama", env=env)
    assert refused.returncode == 2 and _FakeHub.asked == []  # nothing fetched unless asked
    done = memsight("plan", "tinyorg/tiny-llama", "--download", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert _FakeHub.asked == ["/tinyorg/tiny-llama/resolve/main/config.json"]
    assert json.loads(done.stdout)["model"] == "tinyorg/tiny-llama"
    missing = memsight("plan", "tinyorg/absent", "--download", env=env)
    assert missing.returncode == 2
    assert "no such repo, or it has no config.json" in missing.stderr
    gated = memsight("plan", "tinyorg/gated-model", "--download", env=env)
    assert "gated or private" in gated.stderr and "HF_TOKEN" in gated.stderr


def test_download_without_a_network_says_so(tmp_path):
    """A port nobody listens on (connection refused) and a name that cannot resolve: both are 'no network'."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]  # closed again when the block ends: nobody listens there
    for endpoint in (f"http://127.0.0.1:{closed}", "http://hub.invalid"):
        env = {"HF_ENDPOINT": endpoint, "HF_HUB_CACHE": str(tmp_path)}
        done = memsight("plan", "someorg/some-model", "--download", env=env)
        assert done.returncode == 2
        (line,) = done.stderr.splitlines()
        assert line.startswith(f"memsight: 'someorg/some-model': no network to {endpoint} ("), line


def test_plan_list_searches_the_catalog():
    every = memsight("plan", "--list")
    assert every.returncode == 0
    from planner.catalog import catalog_names

    assert [line.split()[0] for line in every.stdout.splitlines()] == catalog_names()
    qwen = memsight("plan", "--list", "QWEN3")
    names = [line.split()[0] for line in qwen.stdout.splitlines()]
    assert names and all("qwen3" in n for n in names)
    assert "llama-3.1-8b" not in names
    wild = memsight("plan", "--list", "llama-3.?-8b*")
    assert "llama-3.1-8b" in wild.stdout
    none = memsight("plan", "--list", "no-such-model-xyz")
    assert none.returncode == 2 and "no catalog model matches" in none.stderr


def test_a_context_past_the_models_limit_warns(tiny):
    done = memsight("plan", str(tiny), "--context", "8k")
    assert done.returncode == 0, done.stderr
    assert (
        "WARNING: 8,192 tokens per user is beyond this model's max_position_embeddings (2,048)" in done.stdout
    )
    within = memsight("plan", str(tiny), "--context", "2k", "--json")
    assert json.loads(within.stdout)["warnings"] == []
    beyond = memsight("plan", str(tiny), "--context", "2k", "--output-tokens", "1", "--json")
    assert "2,049 tokens per user" in json.loads(beyond.stdout)["warnings"][0]


def test_the_vllm_plan_says_which_number_answers_what():
    done = memsight("plan", "llama-3.1-8b", "--machine", "h100", "--engine", "vllm")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "Maximum concurrency" in text
    assert 'which answers what: vLLM\'s "maximum concurrency"' in text
    assert 'memsight\'s "max users"' in text
