"""The layer walk done once (issue 20 item 5): parameters, weight bytes and KV are worked out once per kind of
layer and must equal, to the byte, the walk over every layer they replace, for every model and format."""

from __future__ import annotations

import dataclasses

import pytest

from planner.catalog import catalog_config, catalog_names
from planner.formats import _sizer, weight_bytes
from planner.kv import kv_bytes_for_sequence, layer_kv_bytes, sequence_kv
from planner.params import count_params, model_tensors
from planner.spec import load_spec, spec_from_config

TOKENS = (0, 1, 511, 4096, 131_072)


def _walked_bytes(spec, fmt):
    """The old way: every layer's tensors named in full, each sized with its own index."""
    info_name = weight_bytes(spec, fmt).format
    quant = spec.quantization if spec.quantization and spec.quantization.method == info_name else None
    tensors = model_tensors(spec)
    size, _ = _sizer(spec, info_name, quant, tensors)
    return tuple(sum(size(g, i) for g in tensors.layer(i)) for i in range(spec.num_layers))


@pytest.mark.parametrize("name", catalog_names())
def test_each_kind_of_layer_once_equals_every_layer(name):
    spec = load_spec(name)
    tensors = model_tensors(spec)
    assert len(tensors.shapes) <= 4 < spec.num_layers or spec.num_layers <= 4  # kinds, not layers
    params = count_params(spec)
    walked = [sum(g.numel for g in layer if not g.buffer) for layer in tensors.layers]
    assert params.per_layer == tuple(walked)
    assert params.total == sum(g.numel for g in tensors.all() if not g.buffer)
    for fmt in ("bf16", "fp8", "awq", "q4_k_m", "q8_0", "nvfp4"):
        assert weight_bytes(spec, fmt).per_layer == _walked_bytes(spec, fmt), fmt
    for kv_dtype in ("auto", "fp8"):
        for tp in (1, 2):
            try:
                seq = sequence_kv(spec, kv_dtype, tp)
            except ValueError:  # the model does not split over tp: the per-layer walk refuses it too
                with pytest.raises(ValueError):
                    [layer_kv_bytes(layer, 1, kv_dtype, spec, tp) for layer in spec.layers]
                continue
            for tokens in TOKENS:
                walked_kv = sum(layer_kv_bytes(layer, tokens, kv_dtype, spec, tp) for layer in spec.layers)
                assert seq.bytes(tokens) == walked_kv == kv_bytes_for_sequence(spec, tokens, kv_dtype, tp)


def test_layers_a_quantization_config_names_are_sized_on_their_own():
    """modules_to_not_convert names layer 3's attention: that layer alone keeps it in bf16."""
    config = dict(catalog_config("llama-3.1-8b"))
    skip = ["model.layers.3.self_attn"]
    awq = {"quant_method": "awq", "bits": 4, "group_size": 128}
    config["quantization_config"] = {**awq, "modules_to_not_convert": skip}
    spec = spec_from_config(config, name="llama-awq")
    per_layer = weight_bytes(spec, "awq").per_layer
    assert per_layer == _walked_bytes(spec, "awq")
    assert per_layer[3] > per_layer[2] == per_layer[4]


def test_a_deep_q4_k_m_model_gives_more_bits_by_place_as_llama_cpp():
    """4,096 layers: the first and last eighth, and every third between, get Q6_K attn_v / ffn_down."""
    config = dict(catalog_config("llama-3.1-8b"), num_hidden_layers=4096)
    spec = spec_from_config(config, name="deep")
    per_layer = weight_bytes(spec, "q4_k_m").per_layer
    assert per_layer == _walked_bytes(spec, "q4_k_m")
    assert len(set(per_layer)) == 2 and per_layer[0] == per_layer[511] > per_layer[512] == per_layer[513]


def test_equal_but_distinct_attention_specs_are_still_exact():
    """A spec built by hand with one AttentionSpec object per layer: nothing shared, nothing wrong."""
    spec = load_spec("gemma-2-2b")
    copied = [dataclasses.replace(a, attention=dataclasses.replace(a.attention)) for a in spec.layers]
    alone = dataclasses.replace(spec, layers=tuple(copied))
    assert model_tensors(alone).layers == model_tensors(spec).layers
    assert sequence_kv(alone).bytes(9000) == sequence_kv(spec).bytes(9000)
    assert weight_bytes(alone, "q4_k_m") == weight_bytes(spec, "q4_k_m")
