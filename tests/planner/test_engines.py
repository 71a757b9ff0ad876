"""The engines' one shape (planner/engines): the registry, the interface every engine implements, the shared
worksheet's --json keys, and the planner's import boundary (no collectors, tui or textual anywhere in it)."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from planner.engines import engine_names, get_engine, recognize
from planner.engines.base import Engine, Figure
from planner.engines.worksheet import Row, Term, Worksheet, worksheet_json
from planner.errors import PlannerError
from tests.conftest import REPO_ROOT

VLLM_LOG = REPO_ROOT / "tests" / "data" / "vllm_logs" / "myoceane_v0.19.0_gpt-oss-20b_a100.log"


def test_every_registered_engine_implements_the_interface_under_its_name():
    assert "vllm" in engine_names()
    for name in engine_names():
        engine = get_engine(name)
        assert isinstance(engine, Engine)
        assert engine.name == name and engine.title


def test_unknown_engine_is_one_clear_error():
    with pytest.raises(PlannerError, match="unknown engine 'tensorrt'; known: sglang, ollama, vllm"):
        get_engine("tensorrt")


def test_a_vllm_log_is_recognized_as_vllm_and_text_of_no_engine_is_refused():
    assert recognize(VLLM_LOG.read_text(encoding="utf-8")).name == "vllm"
    with pytest.raises(PlannerError, match="^not a SGLang or Ollama or vLLM startup log"):
        recognize("hello\nworld\n")


def test_the_planner_imports_neither_collectors_nor_tui_nor_textual():
    offenders = []
    for path in sorted((REPO_ROOT / "planner").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".")[0] in ("collectors", "tui", "textual"):
                    offenders.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno} {name}")
    assert offenders == []


def test_the_registry_and_the_log_reader_load_no_prediction_code():
    """The monitor follows a vLLM log with planner.engines.vllm.log: that must not pull in the pool, the
    profile run or explain (they load when a plan is asked for)."""
    code = (
        "import sys, planner.engines, planner.engines.vllm.log;"
        "print(sorted(m for m in sys.modules if m.startswith('planner.engines')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    loaded = ast.literal_eval(out.stdout)
    assert loaded == [
        "planner.engines", "planner.engines.base", "planner.engines.vllm", "planner.engines.vllm.log",
    ]  # fmt: skip


def test_worksheet_json_keys_are_stable_and_the_engine_keys_follow_the_model():
    sheet = Worksheet(
        engine="demo",
        line="demo: predicted 1.00 GiB",
        title="Demo 1.0",
        model="m",
        identity=(("demo_version", "1.0"),),
        stage="ready",
        inputs=(("model", "m", "log"),),
        terms=(Term("weights", 2**30, "PREDICTED", "here"),),
        rows=(Row("weights", 1.25, 7, 1.0, "PREDICTED", "cause"),),
        labels={"weights": "weights (GiB)"},
        notes=("n",),
    )
    out = worksheet_json(sheet)
    assert list(out) == [
        "worksheet", "model", "demo_version", "stage", "inputs", "terms", "rows", "notes",
    ]  # fmt: skip
    term = {"name": "weights", "gib": 1.0, "bytes": 2**30, "how": "PREDICTED", "source": "here"}
    assert out["terms"] == [term]
    assert out["rows"]["weights"] == {
        "label": "weights (GiB)", "logged": 1.25, "logged_line": 7, "predicted": 1.0, "difference": -0.25,
        "relative": -0.2, "how": "PREDICTED", "cause": "cause",
    }  # fmt: skip


def test_figure_bytes_by_unit():
    assert Figure("kv", 1.5, "GiB", "1.5", 1, "").bytes == 3 * 2**29
    assert Figure("kv", 1.5, "GB", "1.5", 1, "").bytes == 3 * 2**29  # vLLM < 0.8.5's "GB" is 2**30-based
    assert Figure("kv", 512.0, "MiB", "512.00", 1, "CUDA0").bytes == 2**29
    with pytest.raises(ValueError):
        _ = Figure("cells", 4096, "cells", "4096", 1, "").bytes
