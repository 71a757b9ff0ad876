"""Per-version rules of vLLM's dense profile run read from the release sdists: V1 0.7.x computes logits
without a sampler (0.7.0 - 0.7.2 for every dummy token), V1 < 0.9.1 counts the model runner's persistent
input buffers in its absolute torch peak, and V1 < 0.8.5 keys its scheduler defaults on the device name."""

from __future__ import annotations

import pytest

from planner.engines.vllm.activation import (
    CUBLAS_WORKSPACE_HOPPER,
    profile_activation,
    v1_persistent_buffer_bytes,
)
from planner.engines.vllm.scheduler import default_scheduler_limits
from planner.spec import load_spec
from planner.units import GiB

H, FF, V = 8192, 28672, 128256  # Llama-3.1-70B hidden, intermediate, vocabulary (a multiple of 64)
N, R = 8192, 1024  # V1 0.7.1 `vllm serve` on an H100: max_num_batched_tokens, max_num_seqs


@pytest.fixture(scope="module")
def llama70b():
    return load_spec("llama-3.1-70b")


def profile(spec, version, **kw):
    return profile_activation(
        spec,
        max_num_batched_tokens=N,
        max_num_seqs=R,
        version=version,
        engine="V1",
        cuda_capability=(9, 0),
        **kw,
    )


def test_v1_070_to_072_logits_of_every_token_and_no_sampler(llama70b):
    buffers = N * 4 + N * 8 + N * H * 2  # input_ids int32, positions int64, inputs_embeds bf16
    forward = N * 2 * (3 * H + 3 * FF)  # eager decoder layer at act_fn (LlamaMLP)
    for version in ("0.7.0", "0.7.1", "0.7.2"):
        p = profile(llama70b, version)
        assert p.sampler_path == "none" and p.sampler_bytes == 0
        assert p.logits_bytes == N * V * 2  # compute_logits on all 8192 dummy tokens
        assert p.hidden_bytes == N * H * 2
        assert p.buffer_bytes == buffers == 134_316_032
        assert p.kept_bytes == CUBLAS_WORKSPACE_HOPPER
        assert p.forward_bytes == forward
        assert p.peak_bytes == N * H * 2 + N * V * 2 + CUBLAS_WORKSPACE_HOPPER + buffers == 2_403_434_496
        assert p.phase == "sampler"
    # a sampler path given does not apply where no sampler runs
    assert profile(llama70b, "0.7.1", sampler_path="triton").sampler_path == "none"


def test_v1_073_logits_of_one_row_per_dummy_request(llama70b):
    p = profile(llama70b, "0.7.3")
    assert p.sampler_path == "none" and p.sampler_bytes == 0
    assert p.logits_bytes == R * V * 2 and p.hidden_bytes == R * H * 2
    # the forward now sets the peak
    assert p.peak_bytes == N * 2 * (3 * H + 3 * FF) + CUBLAS_WORKSPACE_HOPPER + p.buffer_bytes
    assert p.phase == "forward"


def test_v1_080_runs_the_sampler(llama70b):
    p = profile(llama70b, "0.8.0")
    assert p.sampler_path == "torch-sort" and p.sampler_bytes > 0
    assert p.logits_bytes == R * V * 2


def test_persistent_buffers_by_version(llama70b):
    assert v1_persistent_buffer_bytes(llama70b, "0.8.5", N, R) == N * 4 + N * 8 + N * H * 2
    extra_090 = (R + 1) * 4 + R * 4 + N * 8  # query_start_loc, seq_lens, slot_mapping
    assert v1_persistent_buffer_bytes(llama70b, "0.9.0", N, R) == N * 4 + N * 8 + N * H * 2 + extra_090
    assert profile(llama70b, "0.9.0").buffer_bytes == N * 4 + N * 8 + N * H * 2 + extra_090
    # from 0.9.1 memory_profiling() measures the peak's increase during the run: buffers are not in it
    assert profile(llama70b, "0.9.1").buffer_bytes == 0
    assert (
        profile_activation(
            llama70b, max_num_batched_tokens=N, max_num_seqs=256, version="0.6.6", engine="V0"
        ).buffer_bytes
        == 0
    )


def test_v1_defaults_before_085_follow_the_device_name():
    limits = default_scheduler_limits
    h100 = dict(total_bytes=round(79.22 * GiB), device_name="NVIDIA H100 80GB HBM3")
    a100 = dict(total_bytes=round(79.15 * GiB), device_name="NVIDIA A100-SXM4-80GB")
    h200 = dict(total_bytes=round(139.8 * GiB), device_name="NVIDIA H200")
    rtx = dict(total_bytes=round(23.58 * GiB), device_name="NVIDIA GeForce RTX 3090")
    assert limits("0.7.1", "V1", max_model_len=2048, **h100)[:2] == (8192, 1024)
    assert limits("0.7.1", "V1", max_model_len=2048, usage_context="llm", **h100)[:2] == (16384, 1024)
    assert limits("0.7.3", "V1", max_model_len=2048, **h200)[:2] == (8192, 1024)
    # an 80 GB A100 is not named H100: the small token budget, but still 1024 sequences
    assert limits("0.7.1", "V1", max_model_len=2048, **a100)[:2] == (2048, 1024)
    assert limits("0.8.0", "V1", max_model_len=2048, **rtx)[:2] == (2048, 1024)
    assert limits("0.8.0", "V1", max_model_len=2048, usage_context="llm", **rtx)[:2] == (8192, 1024)
    # 0.8.5 switches to the total memory; 0.9.0 sends the A100 back to the small defaults (PR #17885)
    assert limits("0.8.5", "V1", max_model_len=2048, **a100)[:2] == (8192, 1024)
    assert limits("0.8.5", "V1", max_model_len=2048, **rtx)[:2] == (2048, 256)
    assert limits("0.9.0", "V1", max_model_len=2048, **a100)[:2] == (2048, 256)
    *_, why = limits("0.7.1", "V1", max_model_len=2048, total_bytes=round(79.22 * GiB))
    assert "2048" in why[-2] and "1024" in why[-1]
    assert any(
        "not an H100/H200 assumed" in w
        for w in limits("0.7.1", "V1", max_model_len=2048, total_bytes=round(79.22 * GiB))[2]
    )


def test_non_torch_eras_say_what_is_counted_and_that_the_size_is_empirical():
    from planner.engines.vllm.overheads import predicted_non_torch  # noqa: PLC0415

    context = predicted_non_torch("0.7.1", "V1", 1)
    assert "v0.7.1:vllm/v1/worker/gpu_worker.py:180-187" in context.source
    assert "EMPIRICAL" in context.source and "#10517" in context.source
    fragmentation = predicted_non_torch("0.6.5", "V0", 1)
    assert "ALLOCATED" in fragmentation.source and "v0.6.5:vllm/utils.py:1736" in fragmentation.source
    reserved = predicted_non_torch("0.7.0", "V0", 1)
    assert "reserved" in reserved.source and "EMPIRICAL" in reserved.source
    assert predicted_non_torch("0.9.0", "V1", 1).source == context.source
    assert predicted_non_torch("0.9.1", "V1", 1).source == reserved.source


def test_pipeline_stages_before_the_last_run_the_forward_only():
    from planner.engines.vllm.pool import vllm_pool  # noqa: PLC0415

    spec = load_spec("qwen2.5-32b")  # 64 layers: 32 / 32 under PP=2 (get_pp_indices)
    kw = dict(version="0.8.5", engine="V0", cuda_capability=(12, 0))
    pool = vllm_pool(
        spec,
        total_bytes=round(31.37 * GiB),
        gpu_memory_utilization=0.85,
        weights_bytes=[10 * GiB, 10 * GiB],
        pp=2,
        max_model_len=50000,
        **kw,
    )
    profile = profile_activation(spec, max_num_batched_tokens=2048, max_num_seqs=256, **kw)
    receive = 2 * 2048 * 5120 * 2  # hidden_states + residual sent to stage 1, bf16
    stage0, stage1 = (r for r in pool.ranks)
    assert stage0.activation_bytes == profile.forward_only_peak_bytes
    assert (
        profile.forward_only_peak_bytes
        == profile.forward_bytes + profile.input_bytes + CUBLAS_WORKSPACE_HOPPER
    )
    assert stage1.activation_bytes == profile.peak_bytes + receive
    assert stage0.num_blocks > stage1.num_blocks  # the sampler's stage limits
    assert pool.activation_bytes == stage1.activation_bytes and pool.num_blocks == stage1.num_blocks
    # one stage: the whole profile run, nothing received
    single = vllm_pool(
        spec, total_bytes=round(31.37 * GiB), weights_bytes=10 * GiB, max_model_len=50000, **kw
    )
    assert single.activation_bytes == profile.peak_bytes


def test_v1_017_on_samples_with_the_triton_kernel():
    """0.17 - 0.25: the dummy sampler's top-k/top-p runs apply_top_k_top_p_triton for >= 8 rows
    (v0.19.0:vllm/v1/sample/ops/topk_topp_sampler.py:251-252; absent from the 0.16.0 sdist). Llama-3.1-8B at
    the H100 `vllm serve` defaults (8192 tokens, 1024 rows) on 132 SMs: llm-d-planner's 0.19.0 log says
    'torch peak memory increase: 1.89GiB'."""
    spec = load_spec("llama-3.1-8b")
    h, v = 4096, 128256

    def run(version, rows=R, **kw):
        return profile_activation(
            spec, max_num_batched_tokens=N, max_num_seqs=rows, version=version, engine="V1",
            cuda_capability=(9, 0), sm_count=132, **kw,
        )  # fmt: skip

    p = run("0.19.0")
    assert p.sampler_path == "triton" and p.phase == "sampler"
    # profile_run keeps hidden_states and hidden_states[logit_indices]; the sampler run adds rand_like of it
    assert p.hidden_bytes == N * h * 2 + 2 * R * h * 2 == 83_886_080
    assert p.logits_bytes == R * v * 2  # compute_logits output, bf16, still referenced while sampling
    assert p.sampler_bytes == R * v * 4 * 3  # fp32 copy, softmax probs, random_sample's q
    assert p.kept_bytes == 132 * v * 4 + CUBLAS_WORKSPACE_HOPPER == 101_273_600  # Triton buffer + cuBLAS
    assert p.peak_bytes == 2_023_837_696  # 1.885 GiB against the logged 1.89
    assert abs(p.peak_bytes / GiB - 1.89) < 0.01
    # every V1 TP rank all-gathers the logits and samples: both ranks of the TP=2 log say 1.89
    tp2 = run("0.19.0", tp=2)
    assert tp2.non_driver_peak_bytes == tp2.peak_bytes
    assert run("0.17.0").sampler_path == "triton"
    assert run("0.16.0").sampler_path == "torch-sort"  # no Triton kernel yet: the PyTorch sort
    assert run("0.16.0").peak_bytes > p.peak_bytes + 2 * GiB
    assert run("0.19.0", rows=4).sampler_path == "torch-sort"  # fewer than 8 rows keep the sort
    # without the SM count the buffer is bounded by next_pow2(rows), and said so
    loose = profile_activation(spec, max_num_batched_tokens=N, max_num_seqs=R, version="0.19.0",
                               engine="V1", cuda_capability=(9, 0))  # fmt: skip
    assert loose.kept_bytes == 1024 * v * 4 + CUBLAS_WORKSPACE_HOPPER
    assert any("SM count not given" in t for t in loose.terms)


def test_v0_tp_ranks_other_than_the_driver_skip_the_sampler():
    spec = load_spec("llama-3.1-8b")
    p = profile_activation(spec, max_num_batched_tokens=8192, max_num_seqs=256, version="0.6.6", engine="V0",
                           tp=2)  # fmt: skip
    assert p.non_driver_peak_bytes < p.peak_bytes
    assert p.non_driver_peak_bytes == p.forward_only_peak_bytes


def test_non_torch_018_to_026_profiles_graphs_inside_the_window():
    """From 0.18 the CUDA-graph estimate runs inside memory_profiling(), so what its captures leave counts;
    the sizes are EMPIRICAL (llm-d-planner's 0.19.0 H100 logs) and say so; enforce_eager and the other eras
    keep their constants."""
    from planner.engines.vllm.overheads import predicted_non_torch  # noqa: PLC0415

    one = predicted_non_torch("0.19.0", "V1", 1)
    assert one.bytes == round(0.25 * GiB) and "EMPIRICAL" in one.source and "H100" in one.source
    assert "v0.18.0:vllm/v1/worker/gpu_worker.py:384-399" in one.source
    assert predicted_non_torch("0.19.0", "V1", 2, tp=2).bytes == round(2.1 * GiB)
    assert predicted_non_torch("0.26.0", "V1", 4).bytes == round(2.1 * GiB)  # tp defaults to the world
    assert predicted_non_torch("0.19.0", "V1", 2, tp=1).bytes == round(0.07 * GiB)  # pipeline stages only
    older = predicted_non_torch("0.17.0", "V1", 1)
    assert older.bytes == round(0.10 * GiB) and older.source != one.source
    assert predicted_non_torch("0.19.0", "V1", 1, enforce_eager=True).bytes == older.bytes
    assert predicted_non_torch("0.27.0", "V1", 1).bytes == older.bytes  # 0.27+: another accounting
