"""ModelSpec from configs: sources (dict, file, folder, catalog, HF cache), unwrapping, defaults, errors."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from planner.errors import PlannerError
from planner.spec import ModelSpec, load_spec, supported_model_types
from tests.conftest import SHARED_CONFIGS, needs_shared

LLAMA_31_8B_SHAPES = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def _expected() -> dict:
    return json.loads((SHARED_CONFIGS / "EXPECTED.json").read_text())["models"]


def _layer_type_counts(spec: ModelSpec) -> Counter:
    """In EXPECTED.json's words: full/sliding attention, linear_attention (linear or Mamba), mlp."""
    names = {"full": "full_attention", "mla": "full_attention", "sliding": "sliding_attention",
             "linear": "linear_attention", "mamba": "linear_attention"}  # fmt: skip
    return Counter("mlp" if layer.attention is None else names[layer.attention.kind] for layer in spec.layers)


@needs_shared
def test_every_shared_config_has_the_layer_types_transformers_builds():
    for name, expected in _expected().items():
        spec = load_spec(SHARED_CONFIGS / expected["config"])
        assert _layer_type_counts(spec) == Counter(expected["layer_types"]), name
        assert spec.tie_word_embeddings is expected["tied_embeddings"], name
        if "sliding_window" in expected:
            windows = {layer.attention.window for layer in spec.layers if layer.attention.kind == "sliding"}
            assert windows == {expected["sliding_window"]}, name


@needs_shared
def test_multimodal_config_is_unwrapped_to_its_text_config():
    spec = load_spec(SHARED_CONFIGS / "Qwen3.5-35B-A3B.json")
    assert spec.model_type == "qwen3_5_moe_text"
    assert spec.hidden_size == 2048 and spec.num_layers == 40 and spec.num_experts == 256
    assert spec.torch_dtype == "bfloat16"  # from text_config.dtype
    assert any("text_config" in a for a in spec.assumptions)
    kinds = [layer.attention.kind for layer in spec.layers]
    assert kinds[:4] == ["linear", "linear", "linear", "full"]


def test_llava_style_wrapper_with_a_llama_text_config():
    wrapper = {"model_type": "llava", "text_config": LLAMA_31_8B_SHAPES, "vision_config": {"depth": 2}}
    spec = load_spec(wrapper)
    assert spec.model_type == "llama" and spec.num_layers == 32
    plain = load_spec(LLAMA_31_8B_SHAPES)
    assert spec.layers == plain.layers and spec.hidden_size == plain.hidden_size


def test_gemma3_wrapper_and_its_five_local_one_global_layers():
    text = {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240,
            "num_hidden_layers": 12, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
            "sliding_window": 1024, "vocab_size": 262208}  # fmt: skip
    spec = load_spec({"model_type": "gemma3", "text_config": text, "torch_dtype": "bfloat16"})
    kinds = "".join("S" if layer.attention.kind == "sliding" else "F" for layer in spec.layers)
    assert kinds == "SSSSSFSSSSSF"
    assert spec.torch_dtype == "bfloat16" and spec.tie_word_embeddings  # Gemma3TextConfig default


def test_sources_dict_file_folder_and_catalog_agree(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_31_8B_SHAPES))
    from_dict = load_spec(LLAMA_31_8B_SHAPES)
    from_file = load_spec(tmp_path / "config.json")
    from_folder = load_spec(tmp_path)
    from_catalog = load_spec("llama-3.1-8b")
    assert from_dict.layers == from_file.layers == from_folder.layers == from_catalog.layers
    assert from_folder.name == str(tmp_path)
    assert from_catalog.name == "llama-3.1-8b"
    assert load_spec("LLaMA-3.1-8B").name == "llama-3.1-8b"


def test_folder_without_config_is_an_error(tmp_path):
    with pytest.raises(PlannerError, match="config.json"):
        load_spec(tmp_path)


def _hf_cache(root, repo_id: str, revision: str, config: dict, *, with_ref: bool = True):
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(config))
    if with_ref:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(revision)
    return snapshot


def test_repo_id_found_in_hf_hub_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    config = {**LLAMA_31_8B_SHAPES, "num_hidden_layers": 2}
    _hf_cache(tmp_path / "hub", "someorg/tiny-llama", "0123abcd", config)
    spec = load_spec("someorg/tiny-llama")
    assert spec.num_layers == 2 and spec.name == "someorg/tiny-llama"


def test_repo_id_found_under_hf_home(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    _hf_cache(tmp_path / "hf" / "hub", "org/m", "feed", {**LLAMA_31_8B_SHAPES, "num_hidden_layers": 3},
              with_ref=False)  # fmt: skip
    assert load_spec("org/m").num_layers == 3


def test_repo_id_missing_from_cache_is_a_clear_error_and_download_needs_consent(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(PlannerError, match="not in the local Hugging Face cache|no config.json"):
        load_spec("meta-llama/Not-There")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PlannerError, match="HF_HUB_OFFLINE"):
        load_spec("meta-llama/Not-There", allow_download=True)


def test_uncached_repo_of_a_catalog_model_uses_the_catalog_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    spec = load_spec("meta-llama/Llama-3.1-8B")
    assert spec.name == "meta-llama/Llama-3.1-8B" and spec.layers == load_spec("llama-3.1-8b").layers
    assert "not in the local HF cache" in spec.assumptions[0] and "llama-3.1-8b" in spec.assumptions[0]
    # a cached copy wins over the catalog
    cached = {**LLAMA_31_8B_SHAPES, "num_hidden_layers": 4}
    _hf_cache(tmp_path / "empty", "meta-llama/Llama-3.1-8B", "abc", cached)
    assert load_spec("meta-llama/Llama-3.1-8B").num_layers == 4


def test_unknown_name_suggests_catalog_names():
    with pytest.raises(PlannerError, match="llama-3.1-8b"):
        load_spec("llama-3.1-8")


def test_short_config_takes_transformers_defaults_and_says_so():
    spec = load_spec({"model_type": "llama"})
    # LlamaConfig() of transformers 5.24.0: 32 layers, hidden 4096, 32 heads, kv heads = heads, 11008, 32000
    shape = (spec.num_layers, spec.hidden_size, spec.intermediate_size, spec.vocab_size)
    assert shape == (32, 4096, 11008, 32000)
    assert spec.layers[0].attention.num_kv_heads == 32 and spec.layers[0].attention.k_head_dim == 128
    assert any("LlamaConfig" in a and "hidden_size" in a for a in spec.assumptions)
    assert any("head_dim" in a for a in spec.assumptions)

    moe = load_spec({"model_type": "qwen3_moe", "num_hidden_layers": 2, "torch_dtype": "bfloat16"})
    assert moe.num_experts == 128 and moe.experts_per_token == 8 and moe.hidden_size == 2048
    assert any("Qwen3MoeConfig" in a for a in moe.assumptions)


def test_attribute_map_alias_num_experts_for_mixtral():
    spec = load_spec({"model_type": "mixtral", "num_experts": 4, "num_experts_per_tok": 1,
                      "num_hidden_layers": 1})  # fmt: skip
    assert spec.num_experts == 4


def test_dtype_and_quantization_config_set_the_default_format():
    assert load_spec({**LLAMA_31_8B_SHAPES, "torch_dtype": "float16"}).default_format == "fp16"
    no_dtype = {k: v for k, v in LLAMA_31_8B_SHAPES.items() if k != "torch_dtype"}
    assert load_spec({**no_dtype, "dtype": "bfloat16"}).default_format == "bf16"
    fp32 = load_spec(no_dtype)
    assert fp32.torch_dtype == "float32" and any("float32" in a for a in fp32.assumptions)

    fp8 = load_spec({**LLAMA_31_8B_SHAPES, "quantization_config": {"quant_method": "fp8",
                                                                     "weight_block_size": [128, 128]}})
    assert fp8.default_format == "fp8_block" and fp8.quantization.block_size == (128, 128)
    per_tensor = load_spec({**LLAMA_31_8B_SHAPES, "quantization_config": {"quant_method": "fp8"}})
    assert per_tensor.default_format == "fp8"
    awq = load_spec({**LLAMA_31_8B_SHAPES, "torch_dtype": "float16",
                     "quantization_config": {"quant_method": "awq", "bits": 4,
                                             "group_size": 64}})  # fmt: skip
    assert awq.default_format == "awq" and awq.quantization.group_size == 64
    gptq = load_spec({**LLAMA_31_8B_SHAPES, "quantization_config": {"quant_method": "gptq", "bits": 4,
                                                                      "group_size": 128, "desc_act": True}})
    assert gptq.default_format == "gptq" and gptq.quantization.desc_act
    nvfp4 = load_spec({**LLAMA_31_8B_SHAPES, "quantization_config": {"quant_method": "modelopt",
                                                                       "quant_algo": "NVFP4"}})
    assert nvfp4.default_format == "nvfp4"


@needs_shared
def test_gpt_oss_mxfp4_keeps_modules_to_not_convert():
    spec = load_spec(SHARED_CONFIGS / "gpt-oss-20b.json")
    assert spec.default_format == "mxfp4"
    assert "model.layers.*.self_attn" in spec.quantization.modules_to_not_convert
    assert spec.torch_dtype == "bfloat16"  # quantized config without torch_dtype


def test_unmodelled_quantization_is_an_error_naming_the_field():
    with pytest.raises(PlannerError, match="quant_method 'bitsandbytes'"):
        load_spec({**LLAMA_31_8B_SHAPES, "quantization_config": {"quant_method": "bitsandbytes"}})
    with pytest.raises(PlannerError, match="bits=3"):
        load_spec({**LLAMA_31_8B_SHAPES, "quantization_config": {"quant_method": "awq", "bits": 3}})
    with pytest.raises(PlannerError, match="weight_block_size"):
        qc = {"quant_method": "fp8", "weight_block_size": 128}
        load_spec({**LLAMA_31_8B_SHAPES, "quantization_config": qc})


def test_malformed_json_names_file_and_line(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{\n  "model_type": "llama",\n  "hidden_size": 4096,,\n}\n')
    with pytest.raises(PlannerError) as err:
        load_spec(bad)
    assert str(bad) in str(err.value) and "line 3" in str(err.value)
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(PlannerError, match="JSON object"):
        load_spec(tmp_path / "list.json")


def test_missing_and_malformed_fields_are_named():
    with pytest.raises(PlannerError, match="model_type"):
        load_spec({"hidden_size": 4096})
    with pytest.raises(PlannerError, match="'hidden_size'"):
        load_spec({**LLAMA_31_8B_SHAPES, "hidden_size": None})
    with pytest.raises(PlannerError, match="'num_hidden_layers'"):
        load_spec({**LLAMA_31_8B_SHAPES, "num_hidden_layers": "32"})
    with pytest.raises(PlannerError, match="'torch_dtype'"):
        load_spec({**LLAMA_31_8B_SHAPES, "torch_dtype": "float7"})


def test_contradictory_fields_are_errors():
    with pytest.raises(PlannerError, match="num_key_value_heads"):
        load_spec({**LLAMA_31_8B_SHAPES, "num_key_value_heads": 5})
    with pytest.raises(PlannerError, match="layer_types"):
        load_spec({"model_type": "gemma2", "num_hidden_layers": 4, "layer_types": ["full_attention"] * 3})
    with pytest.raises(PlannerError, match="layer_types"):
        types = ["full_attention", "chunked"]
        load_spec({"model_type": "gemma2", "num_hidden_layers": 2, "layer_types": types})
    with pytest.raises(PlannerError, match="contradicts hybrid_override_pattern"):
        load_spec({"model_type": "nemotron_h", "num_hidden_layers": 5, "hybrid_override_pattern": "M-*"})
    with pytest.raises(PlannerError, match="num_experts_per_tok"):
        load_spec({"model_type": "mixtral", "num_local_experts": 2, "num_experts_per_tok": 4})


def test_unknown_model_type_is_never_treated_as_llama():
    with pytest.raises(PlannerError) as err:
        load_spec({**LLAMA_31_8B_SHAPES, "model_type": "mamba_llama_9000"})
    message = str(err.value)
    assert "mamba_llama_9000" in message
    for known in ("llama", "qwen3_moe", "deepseek_v3", "nemotron_h", "gpt2"):
        assert known in message
    assert set(supported_model_types()) >= {"llama", "mistral", "qwen3_next", "gpt_oss", "gemma2", "phi3"}


def test_spec_is_an_immutable_hashable_value():
    spec = load_spec("qwen3-8b")
    with pytest.raises(AttributeError):
        spec.hidden_size = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.config["hidden_size"] = 1  # type: ignore[index]
    assert hash(spec) == hash(load_spec("qwen3-8b"))
