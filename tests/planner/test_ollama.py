"""Ollama: the server-log reader on real published logs (tests/data/ollama_logs, cited in SOURCES.md), the
scheduler's estimate and the runner's allocation against what those logs state, the release defaults, plan,
and the explain worksheet with its error table (the README's, regenerated here and compared)."""

from __future__ import annotations

import pathlib

import pytest

from planner.engines.ollama.cache import gpu_layers_from, kv_by_device, ollama_kv_layers, weights_by_device
from planner.engines.ollama.defaults import defaults_for
from planner.engines.ollama.estimate import ollama_estimate
from planner.engines.ollama.explain import ROW_LABELS, explain, stage_problem
from planner.engines.ollama.live import live_buckets
from planner.engines.ollama.log import looks_like_ollama, parse_log
from planner.engines.ollama.plan import OllamaArguments, predict
from planner.errors import PlannerError
from planner.spec import load_spec
from tests.planner import engine_tables

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "ollama_logs"
README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
MiB, GiB = 2**20, 2**30

# file -> (catalog model of its architecture, what the log leaves out and SOURCES.md states, README name)
LOGS = {
    "howtorun_a10_qwen3-30b-a3b-q8_0_ctx32k.log": (
        "qwen3-30b-a3b",
        {"format": "q8_0", "ctx_size": 32768, "parallel": 1, "kv_cache_type": "f16", "flash_attention": True},
    ),
    "ollama11292_llama3.1-8b-q4km_windows.log": ("llama-3.1-8b", {"format": "q4_k_m"}),
    "reddit1kwiff1_qwen3-4b_a2000-4gb_estimate.log": (
        "qwen3-4b",
        {"format": "q4_k_m", "ctx_size": 4096, "parallel": 1},
    ),
    "ollama5913_llama3-70b-q4_0_rocm_estimate.log": ("llama-3.1-70b", {}),
    "ollama12000_gemma3-12b_estimate_cuda.log": ("gemma-3-12b", {"format": "q4_k_m"}),
    "deepresearch14_gemma3-12b_estimate_cpu.log": ("gemma-3-12b", {"format": "q4_k_m"}),
}
TABLE_ROWS = (
    "estimate_kv", "estimate_weights", "estimate_output", "kv_all", "weights_all", "total",
    "runner_weights_gpu", "runner_weights_host", "runner_kv",
)  # fmt: skip


def _log(name: str):
    return parse_log((DATA / name).read_text())


def _sheet(name: str):
    model, given = LOGS[name]
    return explain(_log(name), {"model": model, "given": given})


def test_reader_new_engine_device_lines():
    log = _log("howtorun_a10_qwen3-30b-a3b-q8_0_ctx32k.log")
    assert log.is_ollama and log.stage == "loaded"
    assert [(f.rank, f.text) for f in log.figures["weights"]] == [("CUDA0", "18.5 GiB"), ("CPU", "11.7 GiB")]
    assert [(f.rank, f.text) for f in log.figures["kv_cache"]] == [("CUDA0", "1.9 GiB"), ("CPU", "1.1 GiB")]
    assert log.figure("compute_graph", "CUDA0").value == 190.5
    assert log.figure("total").text == "33.5 GiB"


def test_reader_estimate_and_runner_lines():
    log = _log("ollama12000_gemma3-12b_estimate_cuda.log")
    assert log.engine == "ollama" and log.stage == "runner"
    assert log.figure("estimate_kv").text == "992.0 MiB"
    assert log.figure("estimate_weights").text == "6.8 GiB"
    assert log.figure("estimate_layers_model").value == 49
    assert (log.setting("ctx-size"), log.setting("parallel"), log.setting("n-gpu-layers")) == (
        "8192",
        "1",
        "48",
    )
    old = _log("ollama5913_llama3-70b-q4_0_rocm_estimate.log")  # 2024: msg="offload to rocm", llama runner
    assert old.engine == "llama" and old.figure("estimate_kv").value == 640.0
    assert old.setting("ctx-size") == "2048"


def test_reader_prefixes_and_llama_cpp_offload_line():
    reddit = _log("reddit1kwiff1_qwen3-4b_a2000-4gb_estimate.log")  # docker compose "ollama        | " prefix
    assert reddit.figure("estimate_kv").value == 576.0 and reddit.figure("estimate_layers").value == 27
    quoted = _log("deepresearch14_gemma3-12b_estimate_cpu.log")  # a markdown quote and journald prefix
    assert quoted.setting("parallel") == "2" and quoted.figure("estimate_kv").text == "1.3 GiB"
    windows = _log("ollama11292_llama3.1-8b-q4km_windows.log")
    assert windows.figure("offloaded_layers").value == 33  # llama.cpp's "load_tensors: offloaded 33/33"


def test_load_request_line_and_incremental_reading():
    from planner.engines.ollama.log import LogReader  # noqa: PLC0415

    line = (
        'time=2025-08-24T08:27:29.546Z level=INFO source=runner.go:925 msg=load request="{Operation:commit '
        "LoraPath:[] Parallel:1 BatchSize:512 FlashAttention:true KvSize:26624 KvCacheType:q4_0 "
        'NumThreads:32 GPULayers:33[ID:GPU-620f3fa0 Layers:33(0..32)] MultiUserCache:false MainGPU:0}"\n'
    )
    reader = LogReader()
    for i in range(0, len(line), 7):  # a line arriving in pieces, as a followed file delivers it
        reader.feed_text(line[i : i + 7])
    log = reader.result()
    assert log.engine == "ollama"
    assert (log.setting("ctx-size"), log.setting("kv-cache-type"), log.setting("n-gpu-layers")) == (
        "26624",
        "q4_0",
        "33",
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("INFO 05-04 llm_engine.py:79] not ollama\n", "not an Ollama server log"),
        (
            'time=2025-01-01T00:00:00Z level=INFO source=routes.go:1 msg="Listening on 127.0.0.1:11434"\n'
            'time=2025-01-01T00:00:01Z level=INFO source=server.go:380 msg="starting llama server" '
            'cmd="/usr/bin/ollama runner --model /m --ctx-size 2048 --parallel 1 --port 1"\n',
            "the log stops after the runner started",
        ),
    ],
)
def test_partial_and_unknown_logs_are_one_line(text, problem):
    found = stage_problem(parse_log(text))
    assert found is not None and found.startswith(problem) and "\n" not in found


def test_recognition():
    for name in LOGS:
        assert looks_like_ollama((DATA / name).read_text()), name
    assert not looks_like_ollama("INFO 07-22 [gpu_model_runner.py:1] Model loading took 8.1 GiB\n")


@pytest.mark.parametrize("name", sorted(LOGS))
def test_kv_within_1pct_or_the_logs_one_decimal(name):
    """Every log states its KV (the estimate or the allocation): memsight's figure is within 1%, or within
    the log's one printed decimal (1.3 GiB is 1.25-1.35 GiB)."""
    for row in _sheet(name).rows:
        if row.key in ("estimate_kv", "kv_all"):
            fig = _log(name).figure("estimate_kv") if row.key == "estimate_kv" else None
            resolution = 0.05 * (1024 if fig is not None and fig.unit == "GiB" else 1)
            if row.key == "kv_all":
                resolution = 0.05 * 1024 * len(_log(name).devices("kv_cache"))
            assert abs(row.relative) <= 0.01 or abs(row.difference) <= resolution, (name, row)


def test_ollama_estimate_reproduces_the_logged_estimates_exactly():
    """Ollama's own arithmetic (llm/memory.go, fs/ggml GraphSize) on the catalog architectures: the KV
    estimates to the MiB, Gemma 3's sliding layers at parallel x window + batch cells."""
    cases = [
        ("llama-3.1-8b", 8192, 2, 1024.0),
        ("qwen3-4b", 4096, 1, 576.0),
        ("llama-3.1-70b", 2048, 1, 640.0),
        ("gemma-3-12b", 8192, 1, 992.0),  # 40 x (1024 + 512) + 8 x 8192 cells of 8 KiB
        ("gemma-3-12b", 8192, 2, 1312.0),  # logged "1.3 GiB"
    ]
    for model, context, parallel, mib in cases:
        est = ollama_estimate(load_spec(model), None, context, parallel, 512, "f16")
        assert est.kv == mib * MiB, model
    q4 = ollama_estimate(load_spec("llama-3.1-8b"), None, 8192, 1, 512, "q4_0")
    assert q4.kv == 8192 * 32 * 8 * 256 // 2  # Ollama's 0.5 byte per q4_0 element, no block scales


def test_allocation_kv_pads_cells_and_splits_by_layer():
    spec = load_spec("qwen3-30b-a3b")
    layers = ollama_kv_layers(spec, 32768, 1, 512, "f16", True)
    assert sum(c.bytes for c in layers) == 3 * GiB  # logged 1.9 GiB (CUDA0) + 1.1 GiB (CPU)
    padded = ollama_kv_layers(spec, 1000, 1, 512, "q8_0", True)
    assert padded[0].cells == 1024 and padded[0].bytes == 1024 * 4 * 256 * 34 // 32
    on_gpu, output = gpu_layers_from(30, 48)
    assert on_gpu == tuple(range(18, 48)) and not output
    kv = kv_by_device(layers, on_gpu)
    assert kv == {"GPU": 30 * 64 * MiB, "CPU": 18 * 64 * MiB}
    weights = weights_by_device(spec, "q8_0", on_gpu, output)
    assert weights["CPU"] > weights["GPU"] * 0.5  # the embeddings and the output head stay on the CPU


def test_worksheet_of_the_new_engine_log():
    sheet = _sheet("howtorun_a10_qwen3-30b-a3b-q8_0_ctx32k.log")
    rows = {r.key: r for r in sheet.rows}
    assert sheet.line.startswith("Ollama: predicted KV 3,072.0 MiB as allocated")
    assert rows["kv_all"].predicted == 3072.0 and rows["kv_all"].logged == 3072.0
    assert abs(rows["weights_all"].relative) < 0.003
    # the log does not say how many layers went to the GPU: per-device rows are logged, not predicted
    assert rows["kv_gpu"].predicted is None and "how many layers" in rows["kv_gpu"].cause
    assert rows["compute_gpu"].predicted is None and "not derived" in rows["compute_gpu"].cause
    assert rows["total"].cause.startswith("the compute graphs")
    with_split = explain(
        _log("howtorun_a10_qwen3-30b-a3b-q8_0_ctx32k.log"),
        {
            "model": "qwen3-30b-a3b",
            "given": {**LOGS["howtorun_a10_qwen3-30b-a3b-q8_0_ctx32k.log"][1], "gpu_layers": 30},
        },
    )
    split = {r.key: r for r in with_split.rows}
    assert split["kv_gpu"].predicted == 30 * 64 and split["kv_cpu"].predicted == 18 * 64


def test_unpriced_weights_and_missing_inputs():
    sheet = _sheet("ollama5913_llama3-70b-q4_0_rocm_estimate.log")  # llama3:70b is Q4_0: not priced
    rows = {r.key: r for r in sheet.rows}
    assert rows["estimate_kv"].relative == 0 and rows["estimate_weights"].predicted is None
    assert any("not priced" in n for n in sheet.notes)
    with pytest.raises(PlannerError, match="--ctx-size"):
        explain(_log("reddit1kwiff1_qwen3-4b_a2000-4gb_estimate.log"), {"model": "qwen3-4b"})
    with pytest.raises(PlannerError, match="--model"):
        explain(_log("ollama12000_gemma3-12b_estimate_cuda.log"), {})


def test_the_llama_runners_own_lines_are_llama_cpps_arithmetic():
    """The llama runner's buffer lines (llama.cpp's, inside Ollama's log) beside planner.engines.llamacpp's
    arithmetic: the context and sequences from its llama_context lines, the GPU layers from its offload
    line."""
    sheet = _sheet("ollama11292_llama3.1-8b-q4km_windows.log")
    inputs = {name: (value, where) for name, value, where in sheet.inputs}
    assert inputs["runner context"] == (
        "8,192 (num_ctx x parallel)",
        "log (llama.cpp's llama_context: n_ctx)",
    )
    assert inputs["parallel"] == ("2", "log (llama.cpp's llama_context: n_seq_max)")
    rows = {r.key: r for r in sheet.rows}
    assert (rows["runner_weights_gpu"].logged, rows["runner_weights_host"].logged) == (4403.49, 281.81)
    assert round(rows["runner_weights_gpu"].predicted, 2) == 4403.49  # to the printed digit
    assert round(rows["runner_weights_host"].predicted, 2) == 281.81
    from planner.engines.ollama.cache import llama_runner_kv  # noqa: PLC0415

    assert llama_runner_kv(load_spec("llama-3.1-8b"), 8192, 2, 512, "f16", False).bytes == GiB


def test_release_defaults():
    assert defaults_for("0.6.6", None).num_ctx == 2048
    assert (
        defaults_for("0.9.0", 24 * GiB).num_ctx == 4096 and defaults_for("0.9.0", 24 * GiB).num_parallel == 4
    )
    assert defaults_for("0.10.0", 24 * GiB).num_parallel == 1
    assert not defaults_for("0.12.5", None).flash_attention and defaults_for("0.12.6", None).flash_attention
    assert defaults_for("0.15.5", 80 * GiB).num_ctx == 262144
    assert defaults_for("0.15.5", 80 * GiB, train_ctx=40960).num_ctx == 40960
    assert (
        defaults_for("0.15.5", 24 * GiB).num_ctx == 32768 and defaults_for("0.15.5", 16 * GiB).num_ctx == 4096
    )


def test_plan_matches_the_logged_allocation_with_the_same_settings():
    """plan --engine ollama for the A10 log's model and settings: what Ollama logged, device by device, when
    30 layers are given to the GPU (the log does not say; the split is an input of the plan)."""
    plan = predict(
        load_spec("qwen3-30b-a3b"),
        OllamaArguments(version="0.12.6", num_ctx=32768, weight_format="q8_0", gpu_layers=30),
    )
    assert plan.context == 32768 and plan.flash and plan.kv_type == "f16"
    assert sum(plan.kv.values()) == 3 * GiB and plan.estimate.kv == 3 * GiB
    logged = {"GPU": 18.5 * GiB, "CPU": 11.7 * GiB}
    for side in ("GPU", "CPU"):
        assert abs(plan.weights[side] - logged[side]) <= 0.05 * GiB, side
    quantized_without_fa = predict(
        load_spec("llama-3.1-8b"), OllamaArguments(version="0.12.5", kv_cache_type="q8_0")
    )
    assert quantized_without_fa.kv_type == "f16" and any("ignored" in n for n in quantized_without_fa.notes)


def test_live_buckets_from_the_log():
    b = live_buckets(_log("howtorun_a10_qwen3-30b-a3b-q8_0_ctx32k.log"))
    gpu = b.devices[0]
    assert gpu.device == "CUDA0" and gpu.weights == round(18.5 * GiB) and gpu.kv == round(1.9 * GiB)
    assert gpu.activations == round(190.5 * MiB)
    assert [d.device for d in b.devices] == ["CUDA0", "CPU"]


def error_table() -> str:
    return engine_tables.error_table((_sheet(name) for name in LOGS), TABLE_ROWS, ROW_LABELS)


def test_readme_error_table_is_the_one_these_logs_give():
    table = error_table()
    print("\n" + table)
    assert table in README.read_text(), "README's Ollama error table differs: paste the table printed above"


def test_plan_for_the_llama_runner_is_llama_cpps_kv_and_model_buffers(capsys):
    """`plan --engine ollama --ollama-runner llama`: the KV and weights llama.cpp's own arithmetic gives for
    the runner's settings (one unified cache of num_ctx x parallel cells), split by the layers on the GPU."""
    import json  # noqa: PLC0415

    from planner.engines.ollama.cache import llama_runner_kv, llama_runner_weights  # noqa: PLC0415
    from tui.cli import main  # noqa: PLC0415

    args = ["plan", "qwen3-4b", "--engine", "ollama", "--ollama-runner", "llama", "--num-ctx", "8192",
            "--num-parallel", "2", "--kv-cache-type", "q8_0", "--machine", "rtx4090", "--json"]  # fmt: skip
    assert main(args) == 0
    got = json.loads(capsys.readouterr().out)["ollama"]
    spec = load_spec("qwen3-4b")
    kv = llama_runner_kv(spec, 8192 * 2, 2, 512, "q8_0", True)
    assert got["kv_gpu_bytes"] + got["kv_cpu_bytes"] == kv.bytes
    weights = llama_runner_weights(spec, "q4_k_m", got["gpu_layers"])
    assert (got["weights_gpu_bytes"], got["weights_cpu_bytes"]) == (weights.gpu_bytes, weights.cpu_bytes)
