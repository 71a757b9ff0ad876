"""Weight bytes per format: the Llama 3.1 8B figures, exact per-matrix rules, sources, errors."""

from __future__ import annotations

import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from planner.errors import PlannerError
from planner.formats import GGML_TYPES, _ggml_bytes, format_info, module_matches, weight_bytes, weight_formats
from planner.params import LINEAR_ROLES, count_params, model_tensors
from planner.spec import load_spec
from planner.units import GB


@pytest.fixture(scope="module")
def llama8b():
    return load_spec("llama-3.1-8b")


def _linear_groups(spec):
    return [g for g in model_tensors(spec).all() if g.role in LINEAR_ROLES]


def test_llama_31_8b_headline_figures(llama8b):
    assert weight_bytes(llama8b, "bf16").total == 16_060_522_496
    assert round(weight_bytes(llama8b, "bf16").total / GB, 2) == 16.06
    assert weight_bytes(llama8b).format == "bf16"  # the config's torch_dtype
    assert weight_bytes(llama8b, "fp8").total / GB == pytest.approx(9.1, abs=0.05)
    assert weight_bytes(llama8b, "awq").total / GB == pytest.approx(5.7, abs=0.05)
    assert weight_bytes(llama8b, "q4_k_m").total / GB == pytest.approx(4.9, abs=0.05)


def test_exact_rules_for_llama_31_8b(llama8b):
    params = count_params(llama8b).total
    linear = _linear_groups(llama8b)
    linear_params = sum(g.numel for g in linear)
    rest = params - linear_params  # embeddings, lm_head, norms: bf16 in fp8/awq/...
    assert weight_bytes(llama8b, "fp16").total == 2 * params
    assert weight_bytes(llama8b, "fp32").total == 4 * params
    assert weight_bytes(llama8b, "bf16").bits_per_weight == 16.0
    # fp8 per-tensor: one byte per weight + fp32 weight_scale and input_scale per Linear
    assert weight_bytes(llama8b, "fp8").total == linear_params + 8 * len(linear) + 2 * rest
    # 128x128 blocks: one fp32 per block (4096 and 14336 and 1024 are multiples of 128)
    blocks = sum(g.rows // 128 * (g.cols // 128) for g in linear)
    assert weight_bytes(llama8b, "fp8_block").total == linear_params + 4 * blocks + 2 * rest
    # AWQ g128: int4 + fp16 scale + int4 zero per group of 128 inputs
    awq = sum(g.numel // 2 + 2 * g.rows * g.cols // 128 + g.rows * g.cols // 128 // 2 for g in linear)
    assert weight_bytes(llama8b, "awq").total == awq + 2 * rest
    gptq = awq + sum(4 * g.cols for g in linear)  # + int32 g_idx per input column
    assert weight_bytes(llama8b, "gptq").total == gptq + 2 * rest
    # int8: one bf16 scale per output channel
    assert weight_bytes(llama8b, "int8").total == linear_params + sum(2 * g.rows for g in linear) + 2 * rest
    # mxfp4: 4.25 bits; nvfp4: 4.5 bits + two fp32 per Linear
    assert weight_bytes(llama8b, "mxfp4").total == linear_params * 17 // 32 + 2 * rest
    assert weight_bytes(llama8b, "nvfp4").total == linear_params * 9 // 16 + 8 * len(linear) + 2 * rest
    # q8_0: every matrix (embeddings and output too) at 34 bytes / 32, norms F32
    matrices = params - 266_240
    assert weight_bytes(llama8b, "q8_0").total == matrices * 34 // 32 + 4 * 266_240


def test_q4_k_m_mix_for_llama_31_8b(llama8b):
    # use_more_bits over 32 layers: 0-3, 28-31 and 6, 9, ..., 27 -> 16 layers get Q6_K attn_v and ffn_down
    q4k, q6k = 144 / 256, 210 / 256
    h, kv, inner, vocab = 4096, 1024, 14336, 128256
    per_layer_q4 = (h * h + h * kv + h * h + 2 * h * inner) * q4k
    layer = [per_layer_q4 + (h * kv + h * inner) * (q6k if more else q4k) for more in
             [i < 4 or i >= 28 or (i - 4) % 3 == 2 for i in range(32)]]  # fmt: skip
    total = vocab * h * q4k + vocab * h * q6k + sum(layer) + 4 * (65 * h)
    assert weight_bytes(llama8b, "q4_k_m").total == int(total)


def test_mxfp4_honours_modules_to_not_convert():
    spec = load_spec("gpt-oss-20b")
    assert spec.default_format == "mxfp4"
    kept = weight_bytes(spec)  # attention kept bf16 by the config
    everything = weight_bytes(load_spec({**spec.config, "quantization_config": {"quant_method": "mxfp4"}}))
    attention = sum(g.numel for g in model_tensors(spec).layers[0] if g.component == "attention"
                    and g.role in LINEAR_ROLES)  # fmt: skip
    assert kept.per_layer[0] - everything.per_layer[0] == 2 * attention - attention * 17 // 32
    # experts: e2m1 pairs + one e8m0 scale per 32 -> 13.76 GB in all (the published checkpoint is 13.8 GB)
    assert kept.total / GB == pytest.approx(13.76, abs=0.01)


def test_module_patterns():
    assert module_matches("model.layers.3.self_attn.q_proj", ("model.layers.*.self_attn",))
    assert module_matches("lm_head", ("lm_head",))
    assert module_matches("model.layers.0.mlp.gate", ("gate",))
    assert not module_matches("model.layers.0.mlp.gate_proj", ("gate",))
    assert not module_matches("model.layers.0.mlp.experts", ("model.layers.*.self_attn",))
    assert module_matches("model.layers.0.mlp.gate", ("re:.*mlp.gate$",))
    assert not module_matches("model.layers.0.mlp.gate_proj", ("re:.*mlp.gate$",))


def test_fp8_block_scales_round_up():
    spec = load_spec("deepseek-v2-lite")
    kv_a = next(g for g in model_tensors(spec).layers[0] if g.name.endswith("kv_a_proj_with_mqa.weight"))
    assert (kv_a.rows, kv_a.cols) == (576, 2048)  # 576 rows: 5 blocks of 128, the last one partial
    layer0 = [g for g in model_tensors(spec).layers[0] if g.role in LINEAR_ROLES]
    blocks = {g.name: -(-g.rows // 128) * -(-g.cols // 128) for g in layer0}
    assert blocks["model.layers.0.self_attn.kv_a_proj_with_mqa.weight"] == 5 * 16
    v3 = load_spec("deepseek-v3")
    assert v3.default_format == "fp8_block" and weight_bytes(v3).format == "fp8_block"


def test_gguf_fallback_for_rows_that_do_not_fill_k_blocks():
    # gpt-oss rows of 2880 are not a multiple of 256: llama.cpp stores Q4_K as Q5_0 and Q6_K as Q8_0
    assert _ggml_bytes("Q4_K", 1, 2880) == 2880 // 32 * 22
    assert _ggml_bytes("Q6_K", 1, 2880) == 2880 // 32 * 34
    assert _ggml_bytes("Q4_K", 2, 4096) == 2 * 16 * 144


def test_ggml_type_table_matches_gguf_py():
    for type_id, (name, block, size) in GGML_TYPES.items():
        quant = GGMLQuantizationType(type_id)
        assert quant.name == name
        assert GGML_QUANT_SIZES[quant] == (block, size)


def test_every_format_has_a_one_line_source_and_unknown_formats_fail(llama8b):
    assert weight_formats()[:3] == ["bf16", "fp16", "fp32"]
    assert {"fp8", "int8", "q8_0", "q4_k_m", "awq", "gptq", "mxfp4", "nvfp4"} <= set(weight_formats())
    for fmt in weight_formats():
        wb = weight_bytes(llama8b, fmt)
        assert wb.source == format_info(fmt).source and wb.source and "\n" not in wb.source
        assert wb.total == wb.embed + wb.head + wb.final_norm + sum(wb.per_layer)
    with pytest.raises(PlannerError, match="unknown weight format 'int3'.*bf16"):
        weight_bytes(llama8b, "int3")


def test_tied_embeddings_have_no_head_bytes():
    wb = weight_bytes(load_spec("llama-3.2-1b"), "awq")
    assert wb.head == 0 and wb.embed == 2 * 128256 * 2048


def test_deepseek_v3_score_bias_has_bytes_but_is_not_a_parameter():
    spec = load_spec("deepseek-v3")
    buffers = [g for g in model_tensors(spec).all() if g.buffer]
    assert len(buffers) == 58 and all(g.rows == 256 for g in buffers)  # one per MoE layer, fp32
    params = count_params(spec).total
    assert params == 671_026_404_352  # transformers' count: the buffer is not a parameter
    assert weight_bytes(spec, "bf16").total == 2 * params + 4 * 58 * 256
