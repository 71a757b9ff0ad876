"""SGLang: the log reader on real published logs (tests/data/sglang_logs, cited in SOURCES.md), the pool
arithmetic against what those logs state, the release defaults, and the explain worksheet with its error
table (the README's, regenerated here and compared)."""

from __future__ import annotations

import pathlib

import pytest

from planner.engines.sglang.defaults import capture_batch_sizes, defaults_for, era_of
from planner.engines.sglang.explain import explain, stage_problem
from planner.engines.sglang.live import live_buckets
from planner.engines.sglang.log import looks_like_sglang, parse_log
from planner.engines.sglang.pool import PoolInputs, cell_bytes, sglang_pool
from planner.spec import load_spec
from planner.units import GiB
from tests.planner import engine_tables

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "sglang_logs"
README = pathlib.Path(__file__).resolve().parents[2] / "README.md"

# file -> (catalog model of its architecture, the README's name for the log)
LOGS = {
    "llmsinclouds_v0.4.3.post4_qwq32b_tp4_l4.log": ("qwen2.5-32b", "QwQ-32B, TP=4 on 4x L4"),
    "myr1_v0.4.2_r1-distill-qwen7b_rtx3090_wsl.log": ("qwen2.5-7b", "R1-Distill-Qwen-7B, RTX 3090 (WSL2)"),
    "sglangdocs_2026-02_qwen25-0.5b_maxtotal20480.log": (
        "qwen2.5-0.5b",
        "Qwen2.5-0.5B, docs CI H100, 2026-02",
    ),
    "sglangdocs_2025-06-17_qwen25-0.5b_h100_shared_gpu.log": (
        "qwen2.5-0.5b",
        "Qwen2.5-0.5B, docs CI, shared GPU",
    ),
    "sglangdocs_2025-06-15_r1-distill-qwen7b_h100.log": ("qwen2.5-7b", "R1-Distill-Qwen-7B, docs CI H100"),
    "sglangskill_2026-05_qwen3-8b_page64_sm100.log": ("qwen3-8b", "Qwen3-8B, page 64, SM100"),
    "vllm21348_qwen3-235b-a22b-fp8_tp4_h100_kvline.log": (
        "qwen3-235b-a22b",
        "Qwen3-235B-A22B-FP8, TP=4 H100",
    ),
    "ktransformers1804_deepseek-v3_tp2_kt-cpu-experts.log": (
        "deepseek-v3",
        "DeepSeek-V3 (MLA), kt CPU experts",
    ),
}
TABLE_ROWS = (
    "weights",
    "free_after_weights",
    "kv_bytes_per_token",
    "kv_pool",
    "kv_tokens",
    "free_after_pool",
    "max_running_requests",
    "cuda_graph_sizes",
)


def _log(name: str):
    return parse_log((DATA / name).read_text())


def test_reader_figures_of_a_tp4_log():
    log = _log("llmsinclouds_v0.4.3.post4_qwq32b_tp4_l4.log")
    assert log.is_sglang and log.stage == "ready" and log.era == "0.4.3-0.4.5"
    assert log.model == "/home/model/Qwen/QwQ-32B"
    assert (log.setting("tp_size"), log.setting("mem_fraction_static"), log.setting("cuda_graph_max_bs")) == (
        "4",
        "0.85",
        "80",
    )
    assert [f.rank for f in log.figures["kv_tokens"]] == ["TP0", "TP1", "TP2", "TP3"]
    assert {f.value for f in log.figures["kv_tokens"]} == {46611}
    assert (log.smallest("free_before_weights").text, log.smallest("weights").text) == ("21.63", "15.54")
    assert (log.smallest("k_size").text, log.smallest("graphs").text) == ("1.42", "0.93")
    assert log.capture_count == 13  # the progress bar "0/13", glued to TP1's line (line 63)
    assert (log.smallest("max_running_requests").value, log.smallest("context_len").value) == (2049, 131072)


def test_reader_old_wording_json_notebook_lines_and_a_continued_command():
    old = _log("myr1_v0.4.2_r1-distill-qwen7b_rtx3090_wsl.log")
    assert old.era == "<=0.4.2" and old.first("weights") is None and old.first("kv_tokens") is None
    assert (old.smallest("k_size").text, old.smallest("max_total_num_tokens").value) == ("2.82", 105531)
    notebook = _log("sglangdocs_2025-06-17_qwen25-0.5b_h100_shared_gpu.log")
    assert notebook.era == ">=0.4.7" and notebook.setting("max_total_tokens") == "20480"
    assert notebook.smallest("weights").text == "30.33"
    kt = _log("ktransformers1804_deepseek-v3_tp2_kt-cpu-experts.log")
    assert (kt.setting("tp_size"), kt.setting("max_total_tokens"), kt.setting("kt_method")) == (
        "2",
        "10000",
        "AMXINT8",
    )
    assert kt.smallest("kv_size").text == "0.65"
    skill = _log("sglangskill_2026-05_qwen3-8b_page64_sm100.log")
    assert skill.setting("page_size") == "64" and skill.setting("mem_fraction_static") is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("hello\nworld\n", "not an SGLang server log"),
        (
            "[2025-03-08 12:29:04] server_args=ServerArgs(model_path='m', tp_size=1)\n"
            "[2025-03-08 12:29:13 TP0] Load weight begin. avail mem=21.63 GB\n",
            "the log stops after the server arguments, before the weights finished loading",
        ),
        (
            "[2025-03-08 12:29:04] server_args=ServerArgs(model_path='m')\n"
            "[2025-03-08 12:29:21 TP0] Load weight end. type=X, dtype=torch.bfloat16, avail mem=6.09 GB\n"
            "[2025-03-08 12:29:21 TP0] RuntimeError: Not enough memory. Please try to increase "
            "--mem-fraction-static.\n",
            "SGLang died after loading the weights, before the KV cache was allocated (line 3): RuntimeError",
        ),
    ],
)
def test_partial_and_unknown_logs_are_one_line(text, problem):
    assert problem in stage_problem(parse_log(text))


def test_recognition():
    assert looks_like_sglang((DATA / "myr1_v0.4.2_r1-distill-qwen7b_rtx3090_wsl.log").read_text())
    assert not looks_like_sglang("INFO 01-30 03:18:12 [gpu_worker.py:123] Available KV cache memory: 5 GiB\n")


def _window(free_before: float, free_after: float, fraction: float, cell: int) -> tuple[int, int]:
    """The tokens SGLang's formula gives for every free-memory pair the log's 2-decimal figures allow."""
    ends = []
    for b in (free_before - 0.005, free_before + 0.005):
        for a in (free_after - 0.005, free_after + 0.005):
            ends.append(int((a - b * (1 - fraction)) * GiB // cell))
    return min(ends), max(ends)


@pytest.mark.parametrize(
    ("name", "model", "tp"),
    [
        ("llmsinclouds_v0.4.3.post4_qwq32b_tp4_l4.log", "qwen2.5-32b", 4),
        ("myr1_v0.4.2_r1-distill-qwen7b_rtx3090_wsl.log", "qwen2.5-7b", 1),
    ],
)
def test_the_pool_formula_reproduces_the_logged_tokens_from_the_logged_free_memory(name, model, tp):
    """Given the free memory the log states before and after loading (not a prediction: a check of the
    formula), SGLang's rest // cell lands on the logged token count within the logs' rounding."""
    log = _log(name)
    spec = load_spec(model)
    cell, _ = cell_bytes(spec, "auto", tp)
    before, after = log.smallest("free_before_weights").value, log.smallest("free_after_weights").value
    fraction = float(log.setting("mem_fraction_static"))
    low, high = _window(before, after, fraction, cell)
    logged = int(log.smallest("max_total_num_tokens").value)
    assert low <= logged <= high
    era = era_of(None, log.era)
    pool = sglang_pool(
        PoolInputs(
            spec,
            round(before * GiB),
            fraction,
            int(log.smallest("context_len").value),
            era,
            tp=tp,
            weights_override=round((before - after) * GiB),
        )
    )
    assert low <= pool.tokens <= high
    assert pool.max_running_requests == log.smallest("max_running_requests").value == 2049
    assert round(pool.k_bytes / GiB, 2) == log.smallest("k_size").value


def test_release_defaults_against_the_logs():
    l4 = defaults_for("0.4.3.post4", 23034, tp=4)  # NVIDIA L4: 23,034 MiB (nvidia-smi memory.total)
    assert (l4.mem_fraction_static, l4.chunked_prefill_size, l4.cuda_graph_max_bs) == (0.85, 2048, 80)
    assert len([bs for bs in l4.capture_bs if bs <= 2049]) == 13  # the log's progress bar: 0/13
    rtx3090 = defaults_for("0.4.2", 24576)
    assert (rtx3090.mem_fraction_static, rtx3090.chunked_prefill_size, rtx3090.cuda_graph_max_bs) == (
        0.88,
        2048,
        8,
    )
    assert rtx3090.capture_bs == (1, 2, 4, 8)  # the log's 0/4
    # docs CI 2026-02 (0.5.x): cuda_graph_max_bs 4 on an H100 80GB (81,559 MiB) gives the logged 0.841
    assert defaults_for("0.5.6", 81559, cuda_graph_max_bs=4).mem_fraction_static == 0.841
    assert capture_batch_sizes("0.5.6", 81559, 4) == (1, 2, 4)
    assert defaults_for("0.4.5", 81559).source.endswith(
        "(follows 0.4.3.post4, the nearest earlier release read)"
    )


def _sheet(name: str):
    model, _ = LOGS[name]
    return explain(_log(name), {"model": model})


@pytest.mark.parametrize("name", sorted(LOGS))
def test_kv_bytes_per_token_within_1pct_or_the_logs_rounding(name):
    """Every log states its KV buffers: the per-token bytes of the config's architecture match them within
    1%, or within the 0.01 GiB the log prints K and V to (pools of 0.1 GiB)."""
    row = next(r for r in _sheet(name).rows if r.key == "kv_bytes_per_token")
    assert row.relative is not None
    assert abs(row.relative) <= 0.01 or row.cause.startswith("same architecture (within the log's 0.01 GiB")


def test_worksheet_of_a_complete_log():
    sheet = _sheet("llmsinclouds_v0.4.3.post4_qwq32b_tp4_l4.log")
    assert sheet.line.startswith("SGLang: predicted KV pool 3.07 GiB / 50,220 tokens (65,536 B per token")
    rows = {r.key: r for r in sheet.rows}
    assert rows["kv_tokens"].logged == 46611 and rows["kv_tokens"].predicted == 50220
    assert rows["max_running_requests"].relative == 0
    assert rows["weights"].cause.startswith(
        "SGLang's figure is the drop in free memory across loading: 0.22 GiB"
    )
    assert rows["cuda_graph_sizes"].logged == rows["cuda_graph_sizes"].predicted == 13


def test_a_shared_gpu_is_named_as_the_cause():
    rows = {r.key: r for r in _sheet("sglangdocs_2025-06-17_qwen25-0.5b_h100_shared_gpu.log").rows}
    assert "another process allocated on this GPU meanwhile" in rows["weights"].cause


def test_partial_logs_predict_what_they_can_and_say_what_is_missing():
    sheet = _sheet("vllm21348_qwen3-235b-a22b-fp8_tp4_h100_kvline.log")
    assert [r.key for r in sheet.rows if r.logged is not None] == ["kv_bytes_per_token"]
    assert any("give --free-gib" in n for n in sheet.notes)
    kt = _sheet("ktransformers1804_deepseek-v3_tp2_kt-cpu-experts.log")
    assert any(n.startswith("ktransformers (--kt-* arguments)") for n in kt.notes)
    assert kt.line.startswith("SGLang: predicted 70,272 B per token (MLA latent)")


def test_live_buckets_from_the_log():
    b = live_buckets(_log("llmsinclouds_v0.4.3.post4_qwq32b_tp4_l4.log"))
    gpu = b.gpu
    assert (gpu.weights, gpu.kv, gpu.activations) == (round(15.54 * GiB), round(1.42 * GiB) * 2, None)
    # overhead: the graphs' 0.93 + what fell beyond the KV buffers between the weights and the pool end
    assert gpu.overhead == round(6.09 * GiB) - round(2.09 * GiB) - 2 * round(1.42 * GiB) + round(0.93 * GiB)
    assert b.ranks == 4 and b.accounted == 4 * gpu.total


def error_table() -> str:
    from planner.engines.sglang.explain import ROW_LABELS  # noqa: PLC0415

    return engine_tables.error_table((_sheet(name) for name in LOGS), TABLE_ROWS, ROW_LABELS)


def test_readme_error_table_is_the_one_these_logs_give():
    table = error_table()
    print("\n" + table)
    assert table in README.read_text(), "README's SGLang error table differs: paste the table printed above"
