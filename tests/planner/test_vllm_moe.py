"""vLLM's MoE layers as it holds them (planner/vllm_moe.py): the MXFP4 experts padded for the GPU's kernel,
in exact bytes from the shapes vLLM 0.19.0 creates (oracle/mxfp4.py, quantization/mxfp4.py)."""

from __future__ import annotations

import pytest

from planner.engines.vllm.moe import mxfp4_backend, mxfp4_expert_layout, vllm_weight_extras
from planner.errors import PlannerError
from planner.spec import load_spec


def _expert_bytes(hidden: int, width: int) -> int:
    # w13 [2W, H/2] uint8 + scales [2W, H/32]; w2 [H, W/2] + [H, W/32]; bf16 biases [2W] and [H]
    return (
        2 * width * (hidden // 2 + hidden // 32)
        + hidden * (width // 2 + width // 32)
        + (2 * width + hidden) * 2
    )


def test_gpt_oss_on_an_a100_pads_for_marlin():
    spec = load_spec("gpt-oss-20b")  # hidden 2880, 32 experts of width 2880, expert biases
    layout = mxfp4_expert_layout(spec, (0, 19, 0), (8, 0))
    assert layout.backend == "MARLIN"
    assert (layout.hidden, layout.intermediate) == (3072, 2944)  # round_up(2880, 256), round_up(2880, 128)
    assert layout.bytes_per_layer == 32 * _expert_bytes(3072, 2944) == 32 * 14_431_744
    assert layout.config_bytes_per_layer == 32 * _expert_bytes(2880, 2880) == 32 * 13_236_480
    assert layout.extra_bytes_per_layer == 38_248_448
    extras, notes = vllm_weight_extras(spec, "mxfp4", (0, 19, 0), (8, 0), 1, 1)
    rotary = 131_072 * 64 * 4  # gpt_oss.py builds its YaRN cos/sin cache in fp32
    assert extras == [24 * 38_248_448 + rotary]  # 24 MoE layers
    assert "MARLIN" in notes[0] and "oracle/mxfp4.py:376-399" in notes[0]


def test_backend_by_gpu_and_its_padding():
    spec = load_spec("gpt-oss-20b")
    assert mxfp4_backend((0, 19, 0), (9, 0))[0] == "TRITON"
    assert mxfp4_backend((0, 19, 0), (10, 0))[0] == "FLASHINFER_TRTLLM_MXFP4_BF16"
    assert mxfp4_backend((0, 19, 0), (12, 0))[0] == "MARLIN"  # RTX 5090: Triton only for 9.0 <= sm < 11.0
    assert mxfp4_backend((0, 11, 0), (9, 0))[0] == "MARLIN"  # triton_kernels not shipped before 0.14
    hopper = mxfp4_expert_layout(spec, (0, 19, 0), (9, 0))
    assert (hopper.hidden, hopper.intermediate) == (2880, 2880)  # 2880 is a multiple of 64
    # Triton keeps the loaded scales next to the swizzled copy and casts the biases to fp32
    scales = 2 * 2880 * (2880 // 32) + 2880 * (2880 // 32)
    assert hopper.extra_bytes_per_layer == 32 * (scales + (2 * 2880 + 2880) * 2) == 32 * 794_880
    old_hopper = mxfp4_expert_layout(spec, (0, 11, 0), (9, 0))
    assert old_hopper.extra_bytes_per_layer == 38_248_448  # Marlin's padding, as on the A100
    blackwell = mxfp4_expert_layout(spec, (0, 19, 0), (10, 0))
    assert (blackwell.hidden, blackwell.intermediate) == (3072, 3072)
    assert blackwell.bytes_per_layer == 32 * _expert_bytes(3072, 3072)
    tp2 = mxfp4_expert_layout(spec, (0, 19, 0), (8, 0), tp=2)
    assert (tp2.intermediate_config, tp2.intermediate) == (1440, 1536)
    assert tp2.extra_bytes_per_layer == 32 * (_expert_bytes(3072, 1536) - _expert_bytes(2880, 1440))


def test_no_padding_rule_without_mxfp4_or_a_gpu():
    spec = load_spec("gpt-oss-20b")
    with pytest.raises(PlannerError, match="no MXFP4 support"):
        mxfp4_expert_layout(spec, (0, 10, 0), (8, 0))
    with pytest.raises(PlannerError, match="give --gpu"):
        mxfp4_expert_layout(spec, (0, 19, 0), None)
    with pytest.raises(PlannerError, match="not a mixture-of-experts"):
        mxfp4_expert_layout(load_spec("llama-3.1-8b"), (0, 19, 0), (8, 0))
    rotary = 131_072 * 64 * 4
    assert vllm_weight_extras(spec, "mxfp4", (0, 19, 0), None, 1, 1)[0] == [rotary]
    assert vllm_weight_extras(spec, "bf16", (0, 19, 0), (8, 0), 1, 2)[0] == [rotary, rotary]  # every stage


def test_fused_moe_buffers_of_an_fp8_block_moe_exact():
    from planner.engines.vllm.moe import fused_moe_forward_bytes

    spec = load_spec("qwen3-235b-a22b")  # h 4096, 128 experts of width 1536, top-8
    peak = fused_moe_forward_bytes(spec, 8192, tp=4, fmt="fp8_block")
    assert peak is not None and peak.tokens == 8192
    h, k, e, width = 4096, 8, 128, 1536 // 4
    rows = 8192 * k
    expected = (
        3 * 8192 * h * 2  # layer input, residual, normed MoE input
        + 8192 * e * 2
        + 8192 * k * 8  # router logits bf16, top-k weights fp32 + ids int32
        + rows * max(2 * width, h) * 2  # cache13
        + rows * width * 2  # cache2
        + 8192 * h
        + 8192 * (h // 128) * 4
        + rows * width
        + rows * (width // 128) * 4  # fp8 inputs + scales
        + (rows + e * 127) * 4  # sorted_token_ids
    )
    assert peak.peak_bytes == expected == 852_033_024
    assert "fused_moe.py:1339-1526" in peak.terms[0]


def test_fused_moe_chunks_and_formats():
    from planner.engines.vllm.moe import FUSED_MOE_CHUNK, fused_moe_forward_bytes

    spec = load_spec("qwen3-30b-a3b")
    big = fused_moe_forward_bytes(spec, 65536, fmt="bf16")
    assert big is not None and big.tokens == FUSED_MOE_CHUNK  # buffers sized for one chunk of 32768 rows
    assert fused_moe_forward_bytes(spec, 8192, fmt="nvfp4") is None  # 4-bit kernels: not derived
    assert fused_moe_forward_bytes(load_spec("llama-3.1-8b"), 8192) is None


# Real logs that state the weights vLLM loaded (sources in tests/data/vllm_logs/SOURCES.md): the predicted
# weights (checkpoint tensors + the layout of vLLM's MoE kernel for that GPU and version, from the config
# alone) against the logged "Model loading took X GiB"; recorded error, asserted to +-0.5 percentage points.
WEIGHT_CASES = (
    # log, catalog model, vLLM version, compute capability, the error the README quotes (printed with -s)
    ("myoceane_v0.19.0_gpt-oss-20b_a100.log", "gpt-oss-20b", (0, 19, 0), (8, 0), -0.0013),
    ("issue23278_gpt-oss-120b_h100_marlin.log", "gpt-oss-120b", (0, 10, 1), (9, 0), -0.0006),
    ("issue33155_v0.14.1_gpt-oss-120b_h100_triton.log", "gpt-oss-120b", (0, 14, 1), (9, 0), -0.0026),
)


@pytest.mark.parametrize("case", WEIGHT_CASES, ids=[c[0] for c in WEIGHT_CASES])
def test_mxfp4_weights_against_real_logs(case):
    from planner.engines.vllm.log import parse_log
    from planner.formats import weight_bytes
    from tests.conftest import REPO_ROOT

    log_name, model, version, capability, recorded = case
    log = parse_log((REPO_ROOT / "tests" / "data" / "vllm_logs" / log_name).read_text(encoding="utf-8"))
    logged = log.first("weights").value
    spec = load_spec(model)
    extras, _ = vllm_weight_extras(spec, "mxfp4", version, capability, 1, 1)
    predicted = (weight_bytes(spec, "mxfp4").total + extras[0]) / 2**30
    error = predicted / logged - 1
    # the target the README states (within 0.5% of "Model loading took"), not today's error: an improvement
    # passes as it is
    print(f"{log_name}: {error:+.2%} (README: {recorded:+.1%})")
    assert abs(error) <= 0.005, (log_name, predicted, logged, error)


def test_rotary_cos_sin_cache_by_rope_type_exact():
    """vLLM's RotaryEmbedding registers a [positions, rotary_dim] cos/sin buffer when the model is built
    (v0.24.0 rotary_embedding/base.py:58-63), shared by all layers (get_rope's cache): yarn holds
    original_max x factor positions, linear max x factor, mrope 4 x max; rotary_dim follows
    partial_rotary_factor; the dtype is the model's unless the model file passes one (gpt-oss: fp32)."""
    from planner.engines.vllm.moe import rotary_cache_bytes
    from tests.conftest import REPO_ROOT

    assert rotary_cache_bytes(load_spec("llama-3.1-8b"))[0] == 131_072 * 128 * 2
    assert rotary_cache_bytes(load_spec("gpt-oss-20b"))[0] == 131_072 * 64 * 4
    llama = dict(load_spec("llama-3.1-8b").config)
    yarn = {
        **llama,
        "max_position_embeddings": 40_960,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32_768},
    }
    assert rotary_cache_bytes(load_spec(yarn))[0] == 4 * 32_768 * 128 * 2
    linear = {**llama, "max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2.0}}
    assert rotary_cache_bytes(load_spec(linear))[0] == 8192 * 128 * 2
    qwen35 = load_spec(str(REPO_ROOT / "tests" / "data" / "vllm_logs" / "configs" / "Qwen3.5-35B-A3B.json"))
    size, note = rotary_cache_bytes(qwen35)  # mrope, partial_rotary_factor 0.25 of head_dim 256
    assert size == 4 * 262_144 * 64 * 2 and "mrope" in note and "mrope.py:236-246" in note
    longrope = {**llama, "rope_scaling": {"rope_type": "longrope", "long_factor": [1.0]}}
    assert rotary_cache_bytes(load_spec(longrope)) == (
        0,
        "rotary cos/sin cache of rope type 'longrope': not derived",
    )
    size, note = rotary_cache_bytes(load_spec("deepseek-v2-lite"))
    assert size == 0 and "not derived" in note
