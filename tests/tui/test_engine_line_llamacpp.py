"""The Live screen's engine line for a llama-server that logs no buffer (0c1e570 prints its buffer lines at
-lv 4 only; its default is 3): the line says why, instead of "no memory figure logged yet" for ever."""

from __future__ import annotations

import pytest

from collectors.engine_log_follow import EngineLogFollower
from tests.conftest import REPO_ROOT
from tui.screens.engine_live import EnginePlan, engine_line

LOCAL = REPO_ROOT / "tests" / "data" / "llamacpp_local" / "b1_0c1e570_cpu_tiny_c4096_np2.log"
# what the same build printed at its default level (-lv 3) under `memsight run -- llama-server -m tiny.gguf
# --port 0 -c 4096 -np 2`: no loader line, no buffer line
LV3 = """\
0.00.007.519 I srv  llama_server: initializing ...
0.00.009.663 I cmn  common_param: common_params_print_info: verbosity = 3 (adjust with the `-lv N` CLI arg)
0.00.025.565 I srv    load_model: loading model 'tiny.gguf'
0.00.114.419 I srv    load_model: initializing, n_slots = 2, n_ctx_slot = 2048, kv_unified = 'false'
0.00.116.864 I srv  llama_server: model loaded
0.00.122.168 I srv  llama_server: listening on http://127.0.0.1:35731
"""
SAID = "this llama-server logs its buffers only at -lv 4 (--verbosity 4) (this one logs at verbosity 3)"


def _line(tmp_path, text: str) -> str:
    (tmp_path / "child.log").write_text(text)
    followed = EngineLogFollower(tmp_path / "child.log").poll()
    assert followed is not None and followed.engine == "llamacpp"
    return engine_line(followed, None, EnginePlan(None, ""), None, "")


def _without_buffers(level: str) -> str:
    lines = LOCAL.read_text().splitlines(keepends=True)
    kept = [x for x in lines if "buffer size =" not in x]
    return "".join(kept).replace("verbosity = 4 (", f"verbosity = {level} (")


@pytest.mark.parametrize(
    ("text", "stage"), [(LV3, "start"), (_without_buffers("3"), "context")]
)
def test_a_llama_server_up_with_no_buffer_line_says_it_logs_them_at_lv_4(tmp_path, text, stage):
    line = _line(tmp_path, text)
    assert line == f"llama.cpp (from llama.cpp's log): {stage}: {SAID}"


def test_before_the_server_is_up_or_at_level_4_it_is_not_said(tmp_path):
    loading = LV3.split("0.00.116.864")[0]  # still loading: the buffers may yet come
    assert _line(tmp_path, loading).endswith(": no memory figure logged yet")
    assert _line(tmp_path, _without_buffers("4")).endswith(": no memory figure logged yet")
