"""planner.engines.vllm.log on real vLLM startup logs (tests/data/vllm_logs, sources in its SOURCES.md):
every figure parsed exactly, with its line; versions, engines, models and engine arguments found in the
wordings of 0.6 to 0.27; partial logs reported with the stage they reached; streaming (line by line, chunk by
chunk) gives the same result as reading the whole text."""

from __future__ import annotations

import pathlib

import pytest

from planner.engines.vllm.log import LogReader, parse_log, strip_line

LOGS = pathlib.Path(__file__).resolve().parent.parent / "data" / "vllm_logs"


def read(name: str):
    return parse_log((LOGS / name).read_text(encoding="utf-8"))


def values(log, name):
    return [(f.text, f.line, f.rank) for f in log.figures.get(name, ())]


def test_every_log_file_is_cited_in_sources():
    sources = (LOGS / "SOURCES.md").read_text(encoding="utf-8")
    logs = sorted(p.name for p in LOGS.glob("*.log"))
    assert len(logs) >= 15
    for name in logs:
        assert f"`{name}`" in sources, name


def test_v065_dev_table_form_and_command_line():
    log = read("pr10511_v0.6.5dev_llama3-8b_h100_tp1.log")
    assert log.is_vllm and log.model == "meta-llama/Meta-Llama-3-8B" and log.engine == "V0"
    assert values(log, "total") == [("79.22", 4, "")]
    assert values(log, "utilization") == [("0.90", 5, "")]
    assert values(log, "requested") == [("71.29", 6, "")]
    assert values(log, "weights") == [("14.96", 7, "")]
    assert values(log, "non_torch") == [("1.79", 8, "")]
    assert values(log, "activation") == [("1.26", 9, "")]
    assert values(log, "kv_pool") == [("53.29", 10, "")]
    cut = read("pr10511_v0.6.5dev_llama3-8b_h100_tp2_cut.log")
    assert cut.args["tensor_parallel_size"] == "2" and "kv_pool" not in cut.figures
    assert cut.stage == "profiling" and not cut.finished


def test_v0_one_line_breakdown_and_blocks():
    log = read("pr12126_v0_llama32-11b-vision_h100.log")
    assert values(log, "requested") == [("71.29", 1, "")]
    assert [f.text for f in log.figures["activation"]] == ["36.63"]
    assert values(log, "kv_pool") == [("14.65", 2, "")]
    assert values(log, "num_blocks") == [("6001", 3, "")]
    assert log.stage == "pool" and log.engine == "V0"


def test_v0_worker_ranks_interleaved():
    log = read("pr14447_v0.8_tp4_workers_24gb.log")
    ranks = [f.rank for f in log.figures["kv_pool"]]
    assert ranks == ["VllmWorkerProcess pid=521", "VllmWorkerProcess pid=507", "VllmWorkerProcess pid=577"]
    assert {f.value for f in log.figures["total"]} == {23.58}
    assert log.first("utilization").value == 0.99


def test_pipeline_stages_and_lowercase_cuda_blocks():
    log = read("issue14452_v0.8.5dev_qwq32b-bnb_pp2_rtx5090.log")
    assert values(log, "weights") == [("10.80", 1, ""), ("10.30", 4, "VllmWorkerProcess pid=12897")]
    assert log.smallest("kv_pool").text == "14.26"
    assert values(log, "num_blocks") == [("7299", 5, "")]
    assert values(log, "max_model_len") == [("50000", 6, "")]
    assert log.first("max_concurrency").text == "2.34"


def test_v1_07_blocks_and_command_line_flags():
    log = read("pr12569_v1_0.7_llama31-70b-w8a8.log")
    assert log.model == "neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8"
    assert log.args["max_model_len"] == "2048" and log.args["gpu_memory_utilization"] == "0.98"
    assert values(log, "weights") == [("67.7229", 3, "")] and log.first("weights").unit == "GB"
    assert values(log, "num_blocks") == [("1381", 9, "")]
    assert log.engine == "V1"


def test_v1_tokens_and_concurrency_with_thousands_separators():
    log = read("pr17122_v1_0.8_llama31-8b_l40s.log")
    assert log.first("weights").value == 14.9889 and log.first("weights").unit == "GiB"
    assert log.first("kv_tokens").value == 158_656
    assert log.first("max_model_len").value == 32_768
    assert log.first("max_concurrency").text == "4.84"


def test_v1_graph_estimate_and_tp_workers():
    log = read("gpustack251_v0.27.1_tp2.log")
    assert values(log, "cudagraph_estimate") == [("0.36", 2, "Worker_TP1"), ("0.36", 4, "Worker_TP0")]
    assert values(log, "kv_pool") == [("6.87", 5, "Worker_TP0")]
    four = read("club3090_127_v0.21plus_tp4.log")
    assert values(four, "kv_pool") == [("15.72", 3, "Worker_TP0")]
    hybrid = read("pr30515_v0.17_hybrid_graphs_estimate.log")
    assert hybrid.first("cudagraph_estimate").text == "0.26" and hybrid.first("kv_tokens").value == 188_640
    assert hybrid.first("kv_pool").rank == "EngineCore"


def test_v064_one_line_results_and_blocks_without_their_hash():
    """vllm #10517: 0.6.4's one-line "Memory profiling results" (the torch peak includes the weights) and the
    block count, whose leading "# " the pasted comment lost on one of its two runs."""
    run = read("issue10517_v0.6.4_llama31-8b_rtx3090_mml20000.log")
    assert run.engine is None and run.version is None and run.stage == "pool"  # bare lines: neither stated
    assert values(run, "weights") == [("14.9888", 1, "")] and run.first("weights").unit == "GB"
    assert values(run, "total") == [("23.58", 2, "")]
    assert values(run, "torch_peak") == [("17.06", 2, "")]
    assert values(run, "non_torch") == [("0.35", 2, "")]
    assert values(run, "kv_pool") == [("3.81", 2, "")]
    assert values(run, "num_blocks") == [("1952", 3, "")]
    assert values(run, "max_model_len") == [("20000", 4, "")]
    longer = read("issue10517_v0.6.4_llama31-8b_rtx3090_mml29000.log")
    assert values(longer, "torch_peak") == [("17.98", 2, "")]
    assert values(longer, "num_blocks") == [("1478", 3, "")]
    assert values(longer, "max_concurrency") == [("0.82", 4, "")]
    assert longer.error is None  # the closing "max seq len ... larger than" line is advice, not an exception


def test_v019_debug_breakdown_and_summary_per_rank_and_stage():
    """vLLM 0.19.0 at DEBUG (llm-d-planner's H100 sweep): the profile's own breakdown ("Total non KV cache
    memory: ..; torch peak memory increase: ..; non-torch forward increase memory: ..; weights memory: ..")
    and the post-capture summary in its pre-0.27 wording ("Actual usage is W GiB for weight, A GiB for peak
    activation, N GiB for non-torch memory, and G GiB for CUDAGraph memory")."""
    one = read("llmdplanner_v0.19.0_h100_llama31-8b_tp1.log")
    assert one.version == "0.19.0" and one.engine == "V1" and one.stage == "ready"
    assert one.model == "meta-llama/Llama-3.1-8B-Instruct" and one.setting("max_seq_len") == "8192"
    assert values(one, "non_kv") == [("17.12", 19, "EngineCore")]
    assert values(one, "activation") == [("1.89", 19, "EngineCore"), ("1.89", 25, "EngineCore")]
    assert values(one, "non_torch") == [("0.25", 19, "EngineCore"), ("0.25", 25, "EngineCore")]
    assert values(one, "weights") == [("14.99", 12, "EngineCore"), ("14.99", 19, "EngineCore"),
                                      ("14.99", 25, "EngineCore")]  # fmt: skip
    assert values(one, "kv_pool") == [("58.11", 20, "EngineCore")]
    assert values(one, "cudagraph_estimate") == [("0.84", 16, "EngineCore"), ("0.84", 24, "EngineCore")]
    assert values(one, "cudagraph_actual") == [("0.91", 23, "EngineCore"), ("0.91", 24, "EngineCore"),
                                               ("0.91", 25, "EngineCore")]  # fmt: skip
    assert values(one, "total") == [("79.19", 25, "EngineCore")]
    assert values(one, "requested") == [("75.23", 25, "EngineCore")]
    assert values(one, "kv_tokens") == [("476,016", 21, "EngineCore")]
    two = read("llmdplanner_v0.19.0_h100_llama31-8b_tp2.log")
    assert two.setting("tensor_parallel_size") == "2"
    assert values(two, "non_torch") == [("2.07", 25, "Worker_TP1"), ("2.07", 28, "Worker_TP0"),
                                        ("2.07", 34, "Worker_TP0"), ("2.07", 36, "Worker_TP1")]  # fmt: skip
    assert values(two, "kv_pool") == [("63.76", 29, "Worker_TP0")]
    stages = read("llmdplanner_v0.19.0_h100_llama31-8b_pp2.log")
    assert stages.setting("pipeline_parallel_size") == "2"
    assert values(stages, "activation") == [
        ("1.1", 21, "Worker_PP0"), ("2.01", 29, "Worker_PP1"), ("2.01", 33, "Worker_PP1"),
        ("1.1", 36, "Worker_PP0"),
    ]  # fmt: skip
    assert values(stages, "non_kv") == [("8.69", 21, "Worker_PP0"), ("9.6", 29, "Worker_PP1")]
    assert values(stages, "kv_pool") == [("66.54", 22, "Worker_PP0")]  # stage 1 does not log its pool
    assert values(stages, "kv_tokens") == [("1,075,312", 30, "EngineCore")]


def test_journald_and_compose_prefixes_banner_and_args():
    log = read("onecat237_journald_v100x4.log")
    assert values(log, "kv_pool") == [("5.35", 1, "Worker_TP0")]
    assert log.first("kv_tokens").value == 215_401 and log.first("max_concurrency").text == "26.29"
    cut = read("gguf101_v0.18.0_compose_cut.log")
    assert cut.version == "0.18.0" and cut.engine == "V1"
    assert cut.model == "/models/unsloth/Qwen3-8B-GGUF/Qwen3-8B-Q4_K_M.gguf"
    assert cut.args["max_model_len"] == 16384 and cut.args["kv_cache_dtype"] == "fp8"
    assert cut.stage == "config" and not cut.figures


def test_config_line_with_nested_values():
    log = read("kserve4470_v0.8.5.post1_qwen3-14b_config.log")
    assert log.version == "0.8.5.post1" and log.engine == "V0" and log.model == "Qwen/Qwen3-14B"
    assert log.config["max_seq_len"] == "4096" and log.config["tensor_parallel_size"] == "1"
    assert log.config["decoding_config"].startswith("DecodingConfig(guided_decoding_backend='xgrammar'")
    assert log.setting("kv_cache_dtype") == "auto" and log.setting("quantization") is None


def test_a_config_line_cut_inside_a_value_keeps_the_args_model():
    # the post stops inside "model='~/.cache/huggin": the cut value is dropped, the non-default args
    # name the model
    log = read("club3090_652_v0.24.0_qwen36-35b-a3b-nvfp4_rtx5090.log")
    assert log.version == "0.24.0" and "model" not in log.config
    assert log.model == "~/.cache/huggingface/qwen3.6-35b-a3b-nvfp4"
    assert log.first("kv_pool").value == 6.01 and log.first("kv_tokens").value == 569_878


def test_non_default_args_hard_wrapped_by_a_terminal_copy():
    # dennislee22/vLLM-benchmarking's logs were copied from a terminal that wrapped every line at a fixed
    # width, inside words too: "... 'model': 'Qwe" / "n2-7B-Instruct', 'max_model_len': 16384, ...}"
    one = read("dennislee_v0.10.1.1_qwen2-7b_a100-80gb_gmu0.25.log")
    assert one.version == "0.10.1.1" and one.engine == "V1" and one.model == "Qwen2-7B-Instruct"
    assert one.args == {
        "model_tag": "Qwen2-7B-Instruct", "port": 8081, "model": "Qwen2-7B-Instruct", "max_model_len": 16384,
        "gpu_memory_utilization": 0.25,
    }  # fmt: skip
    assert one.setting("gpu_memory_utilization") == "0.25" and one.setting("tensor_parallel_size") is None
    assert values(one, "weights") == [("14.2488", 31, "")]
    assert values(one, "kv_pool") == [("5.01", 42, "")]
    assert values(one, "kv_tokens") == [("93,872", 43, "")]
    assert values(one, "max_concurrency") == [("5.73", 44, "")]
    ray = read("dennislee_v0.10.1.1_qwen2-7b_a100-40gb_tp2_ray.log")
    assert ray.args["tensor_parallel_size"] == 2 and ray.args["gpu_memory_utilization"] == 0.5
    # a figure line the wrap cut ("Model loading " / "took 7.1217 GiB") is not read; the other rank's is
    assert values(ray, "weights") == [("7.1217", 90, "RayWorkerWrapper")]
    assert values(ray, "kv_pool") == [("11.03", 115, "RayWorkerWrapper")]
    # an args dict that never closes (a post cut there) does not swallow the vLLM lines after it
    cut = parse_log(
        "INFO 09-04 01:02:21 [utils.py:326] non-default args: {'model': 'Qwen2-7B-Instruct', 'max_mo\n"
        "INFO 09-04 01:04:29 [gpu_worker.py:276] Available KV cache memory: 5.01 GiB\n"
    )
    assert cut.args == {} and values(cut, "kv_pool") == [("5.01", 2, "")]


def test_startup_refusal_and_zero_blocks():
    refused = read("kvcached29_v0.9.2_free_memory_error.log")
    assert refused.is_vllm and refused.stage == "start" and refused.error_line == 3
    assert refused.error.startswith("ValueError: Free memory on device (59.32/79.15 GiB)")
    zero = read("issue12095_v0_whisper_8gb_no_kv.log")
    assert zero.first("kv_pool").text == "-0.00" and zero.first("num_blocks").value == 0
    assert zero.first("max_concurrency").text == "0.00"


def test_bare_lines_and_multiline_command():
    log = read("issue21348_qwen3-235b-fp8_tp4_h100.log")
    assert log.model == "/path/to/Qwen3-235B-A22B-FP8" and log.args["tensor_parallel_size"] == "4"
    assert values(log, "kv_pool") == [("8.11", 4, "")] and log.first("kv_tokens").value == 178_880


def test_not_vllm():
    assert not parse_log("hello\nworld\n").is_vllm
    assert not parse_log("").is_vllm
    assert not parse_log("INFO 01-01 00:00:00 [x.py:1] nothing about memory\n").is_vllm


def test_ansi_colours_and_header_are_stripped():
    raw = (
        "\x1b[1;36m(EngineCore_DP0 pid=5)\x1b[0;0m INFO 07-01 10:00:00 [gpu_worker.py:276] "
        "Available KV cache memory: 18.38 GiB"
    )
    assert strip_line(raw) == ("Available KV cache memory: 18.38 GiB", "EngineCore")
    assert parse_log(raw).first("kv_pool").value == 18.38


@pytest.mark.parametrize("name", sorted(p.name for p in LOGS.glob("*.log")))
def test_streaming_chunks_give_the_same_result(name):
    text = (LOGS / name).read_text(encoding="utf-8")
    reader = LogReader()
    for i in range(0, len(text), 7):  # chunks that cut lines (and multi-byte characters' neighbours) anywhere
        reader.feed_text(text[i : i + 7])
    reader.flush()
    assert reader.result() == parse_log(text)


def test_the_sampler_line_says_whether_flashinfer_samples():
    """'Using FlashInfer for top-p & top-k sampling.' (TopKTopPSampler.__init__) is where the log states which
    top-k/top-p implementation the dummy sampler run uses; the fallback warning is not that line."""
    read = lambda name: parse_log((LOGS / name).read_text(encoding="utf-8"))  # noqa: E731
    assert read("dennislee_v0.10.1.1_qwen2-7b_a100-80gb_gmu0.25.log").flashinfer_sampler_line == 26
    assert read("dennislee_v0.10.1.1_qwen2-7b_a100-40gb_tp2_ray.log").flashinfer_sampler_line is None
    assert read("llmdplanner_v0.19.0_h100_llama31-8b_tp1.log").flashinfer_sampler_line is None


def test_a_negative_figure_is_read_only_where_vllm_can_log_one():
    """The pool and V0's non-torch growth can be below zero in a real log (vllm #23278: "Available KV cache
    memory: -2.14 GiB"; "non_torch_memory takes -0.51GiB"); a negative size or count anywhere else is no
    figure vLLM prints: it is left out and named in `refused`, so explain refuses the log at that line."""
    pool = read("issue23278_gpt-oss-120b_h100_marlin.log")
    assert pool.first("kv_pool").value == -2.14 and pool.refused == ()
    v0 = parse_log(
        "INFO 03-13 08:56:40 [worker.py:267] model weights take 5.43GiB; non_torch_memory takes -0.51GiB; "
        "PyTorch activation peak memory takes 1.42GiB; the rest of the memory reserved for KV Cache is "
        "-0.94GiB.\n"
    )
    assert (v0.first("non_torch").value, v0.first("kv_pool").value, v0.refused) == (-0.51, -0.94, ())
    graphs = parse_log(
        "INFO 01-16 14:20:28 [gpu_model_runner.py:4587] Graph capturing finished in 3 secs, took -0.22 GiB\n"
    )
    assert (graphs.first("cudagraph_actual").value, graphs.refused) == (-0.22, ())
    text = (LOGS / "mlops_v0.22.1_qwen3-30b-a3b-fp8_h100.log").read_bytes().decode()  # keeps its \r
    bad = parse_log(
        text.replace("Model loading took 29.08 GiB", "Model loading took -29.08 GiB").replace(
            "Estimated CUDA graph memory: 0.14 GiB", "Estimated CUDA graph memory: -0.14 GiB"
        )
    )
    assert bad.first("weights") is None and bad.first("cudagraph_estimate") is None
    assert bad.refused == (
        "line 55: -29.08 GiB is a weights figure out of range (vLLM logs sizes and counts of 0 or more, "
        "finite)",
        "line 65: -0.14 GiB is a cudagraph-estimate figure out of range (vLLM logs sizes and counts of 0 or "
        "more, finite)",
    )
