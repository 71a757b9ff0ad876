"""How each architecture family's config becomes layers and tensor shapes, one section per family:

- Hugging Face decoders (llama, mistral, mixtral, qwen2/3, gemma2/3, phi3, gpt-oss, deepseek, Qwen3-Next /
  Qwen3.5): _decoder_layers, _layer_types (full / sliding / linear attention per layer), _hf_shapes
- DeepSeek multi-head latent attention: _mla
- mixture of experts: _moe, _moe_layer_mask
- linear attention (Gated DeltaNet) of the hybrid families: _HYBRID_FAMILIES, _linear_attention,
  _linear_attention_spec, _state_dtype
- GPT-2: _gpt2
- Nemotron-H: _nemotron_blocks, _nemotron_h

planner/spec.py's spec_from_config picks the reader; the fields every family reads alike, transformers'
defaults and the ModelSpec assembly (_finish) are in planner/spec_fields.py, quantization_config in
planner/spec_quant.py, finding the config in planner/spec_source.py, the dataclasses in planner/spec_types.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner import limits
from planner.errors import PlannerError
from planner.spec_fields import _Fields, _finish, config_int
from planner.spec_types import (
    ArchShapes,
    AttentionSpec,
    LayerSpec,
    LinearAttentionShapes,
    MambaShapes,
    MLAShapes,
    ModelSpec,
    MoEShapes,
    QuantSpec,
)
from planner.units import canonical_dtype

# ----------------------------------------------------------------------------------------------------
# Hugging Face decoders (llama, mistral, mixtral, qwen2/3, gemma2/3, phi3, gpt-oss, deepseek, qwen3-next):
# their layers, layer types (full / sliding / linear) and tensor shapes


def _decoder_layers(
    f: _Fields,
    decoder: Mapping[str, Any],
    name: str,
    model_type: str,
    num_layers: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    dtype: str,
) -> tuple[list[LayerSpec], int, ArchShapes, int, int]:
    """The layers of a decoder other than GPT-2 and Nemotron-H, its MLP width (the widest: dense, or the
    routed experts of top-k + the shared ones), tensor shapes, number of experts and top-k."""
    layer_types = _layer_types(f, model_type, num_layers, name)
    window = None
    if any(t == "sliding_attention" for t in layer_types):
        window = f.int("sliding_window")
    mla = _mla(f) if model_type in ("deepseek_v2", "deepseek_v3") else None
    linear = _linear_attention(f, name) if model_type in _HYBRID_FAMILIES else None
    num_experts, top_k, moe = _moe(f, model_type, name)
    moe_layers = _moe_layer_mask(f, model_type, num_layers, num_experts)
    dense_width = 0
    if not all(moe_layers):
        dense_width = f.int("intermediate_size")

    state_dtype = _state_dtype(decoder, f)

    def attention_of(layer_type: str) -> AttentionSpec:
        if layer_type == "linear_attention":
            assert linear is not None
            return _linear_attention_spec(linear, state_dtype, dtype)
        if mla is not None:
            return AttentionSpec("mla", heads, 1, mla.kv_lora_rank + mla.qk_rope_head_dim, 0)
        if layer_type == "sliding_attention":
            return AttentionSpec("sliding", heads, kv_heads, head_dim, head_dim, window=window)
        return AttentionSpec("full", heads, kv_heads, head_dim, head_dim)

    # one AttentionSpec per kind of layer, shared by the layers of that kind (the planner works each kind
    # out once: planner/params.py, planner/kv.py)
    attentions = {layer_type: attention_of(layer_type) for layer_type in set(layer_types)}
    layers = [
        LayerSpec(i, attentions[layer_type], "moe" if moe_layers[i] else "dense")
        for i, layer_type in enumerate(layer_types)
    ]
    inner = dense_width
    if moe is not None and any(moe_layers):
        inner = max(inner, moe.expert_intermediate_size * top_k + moe.shared_intermediate_size)
    shapes = _hf_shapes(f, model_type, head_dim, dense_width, mla, linear, moe)
    return layers, inner, shapes, num_experts, top_k


def _layer_types(f: _Fields, model_type: str, num_layers: int, name: str) -> list[str]:
    explicit = f.raw.get("layer_types")
    allowed = {"full_attention", "sliding_attention"}
    if model_type in _HYBRID_FAMILIES:
        allowed = {"full_attention", "linear_attention"}
    if explicit is not None:
        if not isinstance(explicit, list) or len(explicit) != num_layers:
            raise PlannerError(
                f"{name}: config field 'layer_types' must list one type per layer ({num_layers}), "
                f"found {len(explicit) if isinstance(explicit, list) else explicit!r}"
            )
        unknown = sorted({str(t) for t in explicit} - allowed)
        if unknown:
            raise PlannerError(
                f"{name}: config field 'layer_types' has {', '.join(unknown)}, which {model_type} does not "
                f"have; expected {', '.join(sorted(allowed))}"
            )
        return list(explicit)
    if model_type in ("gemma2", "gpt_oss"):
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(num_layers)]
    if model_type == "gemma3_text":
        # five local layers, then a global one (Gemma3TextConfig: sliding_window_pattern, default 6)
        pattern = config_int(name, "sliding_window_pattern", f.raw.get("sliding_window_pattern", 6), 1)
        return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(num_layers)]
    if model_type in _HYBRID_FAMILIES:
        interval = config_int(name, "full_attention_interval", f.raw.get("full_attention_interval", 4), 1)
        return ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(num_layers)]
    if model_type in ("mistral", "mixtral", "phi3"):
        # These attention classes apply config.sliding_window to every layer when it is set.
        window = f.get("sliding_window")
        return ["sliding_attention" if window is not None else "full_attention"] * num_layers
    if model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        if f.bool("use_sliding_window") and f.get("sliding_window") is not None:
            first = f.opt_int("max_window_layers") or 0
            return ["sliding_attention" if i >= first else "full_attention" for i in range(num_layers)]
        return ["full_attention"] * num_layers
    return ["full_attention"] * num_layers


def _hf_shapes(
    f: _Fields,
    model_type: str,
    head_dim: int,
    dense_width: int,
    mla: MLAShapes | None,
    linear: LinearAttentionShapes | None,
    moe: MoEShapes | None,
) -> ArchShapes:
    """The tensor shapes of a Hugging Face decoder family: its biases, fusions and norms as transformers
    builds them."""
    attention_bias = f.bool("attention_bias")
    out_bias = attention_bias
    if model_type == "qwen2_moe":
        attention_bias, out_bias = f.bool("qkv_bias", fallback=True), False
    elif model_type == "qwen2":
        attention_bias, out_bias = True, False  # Qwen2Attention: q/k/v bias=True, o_proj bias=False
    elif model_type in ("mistral", "mixtral", "phi3"):
        attention_bias = out_bias = False  # these attention classes have no bias switch
    return ArchShapes(
        head_dim=head_dim,
        attention_bias=attention_bias,
        attention_out_bias=out_bias,
        fused_qkv=model_type == "phi3",
        qk_norm=model_type in ("qwen3", "qwen3_moe", "gemma3_text") + _HYBRID_FAMILIES,
        attn_output_gate=model_type in _HYBRID_FAMILIES and f.bool("attn_output_gate", fallback=True),
        attention_sinks=model_type == "gpt_oss",
        mlp_gated=True,
        mlp_bias=f.bool("mlp_bias") if model_type in ("llama", "deepseek_v2") else False,
        fused_gate_up=model_type == "phi3",
        norm_with_bias=False,
        norms_per_layer=4 if model_type in ("gemma2", "gemma3_text") else 2,
        position_embeddings=0,
        naming="hf",
        dense_intermediate_size=dense_width,
        mla=mla,
        linear_attention=linear,
        moe=moe,
    )


# ----------------------------------------------------------------------------------------------------
# DeepSeek multi-head latent attention (MLA)


def _mla(f: _Fields) -> MLAShapes:
    q_lora = f.opt_int("q_lora_rank", minimum=1)
    return MLAShapes(
        q_lora_rank=q_lora or 0,
        kv_lora_rank=f.int("kv_lora_rank"),
        qk_nope_head_dim=f.int("qk_nope_head_dim"),
        qk_rope_head_dim=f.int("qk_rope_head_dim"),
        v_head_dim=f.int("v_head_dim"),
    )


# ----------------------------------------------------------------------------------------------------
# Mixture of experts (Mixtral, gpt-oss, Qwen MoE, DeepSeek)


def _moe(f: _Fields, model_type: str, name: str) -> tuple[int, int, MoEShapes | None]:
    if model_type in ("mixtral", "gpt_oss"):
        experts = f.int("num_local_experts")
        top_k = f.int("num_experts_per_tok")
        width = f.int("intermediate_size")
        moe = MoEShapes(width, 0, False, model_type == "gpt_oss", False, model_type == "gpt_oss")
    elif model_type in ("qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe_text"):
        experts = f.int("num_experts", minimum=0)
        if experts == 0:
            return 0, 0, None
        top_k = f.int("num_experts_per_tok")
        shared = 0 if model_type == "qwen3_moe" else (f.opt_int("shared_expert_intermediate_size") or 0)
        # Qwen builds shared_expert_gate (hidden -> 1) whenever it has a shared_expert slot, even of width 0.
        gate = model_type != "qwen3_moe"
        moe = MoEShapes(f.int("moe_intermediate_size"), shared, gate, False, False, False)
    elif model_type in ("deepseek_v2", "deepseek_v3"):
        routed = f.opt_int("n_routed_experts")
        if not routed:
            return 0, 0, None
        experts = routed
        top_k = f.int("num_experts_per_tok")
        width = f.int("moe_intermediate_size")
        shared = (f.opt_int("n_shared_experts") or 0) * width
        moe = MoEShapes(width, shared, False, False, model_type == "deepseek_v3", False)
    else:
        return 0, 0, None
    if top_k > experts:
        raise PlannerError(f"{name}: num_experts_per_tok ({top_k}) exceeds the number of experts ({experts})")
    return experts, top_k, moe


def _moe_layer_mask(f: _Fields, model_type: str, num_layers: int, num_experts: int) -> list[bool]:
    if num_experts == 0:
        return [False] * num_layers
    if model_type in ("mixtral", "gpt_oss"):
        return [True] * num_layers
    if model_type in ("deepseek_v2", "deepseek_v3"):
        first_dense = f.opt_int("first_k_dense_replace") or 0
        freq = config_int(f.name, "moe_layer_freq", f.raw.get("moe_layer_freq") or 1, 1)
        return [i >= first_dense and i % freq == 0 for i in range(num_layers)]
    mlp_only = f.get("mlp_only_layers") or []
    if not isinstance(mlp_only, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in mlp_only
    ):
        raise PlannerError(f"{f.name}: config field 'mlp_only_layers' must be a list of layer indices")
    dense = set(mlp_only)
    step = config_int(f.name, "decoder_sparse_step", f.raw.get("decoder_sparse_step") or 1, 1)
    return [i not in dense and (i + 1) % step == 0 for i in range(num_layers)]


# ----------------------------------------------------------------------------------------------------
# Linear attention (Gated DeltaNet: Qwen3-Next, Qwen3.5 hybrids) and the recurrent state's dtype


_HYBRID_FAMILIES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")


def _linear_attention(f: _Fields, name: str) -> LinearAttentionShapes:
    """The linear-attention (Gated DeltaNet) shapes of a hybrid family's config."""
    linear = LinearAttentionShapes(
        num_key_heads=f.int("linear_num_key_heads"),
        num_value_heads=f.int("linear_num_value_heads"),
        key_head_dim=f.int("linear_key_head_dim"),
        value_head_dim=f.int("linear_value_head_dim"),
        conv_kernel=f.int("linear_conv_kernel_dim"),
    )
    if linear.num_value_heads % linear.num_key_heads:
        raise PlannerError(
            f"{name}: linear_num_value_heads ({linear.num_value_heads}) must be a multiple of "
            f"linear_num_key_heads ({linear.num_key_heads})"
        )
    return linear


def _linear_attention_spec(linear: LinearAttentionShapes, state_dtype: str, conv_dtype: str) -> AttentionSpec:
    """A linear-attention layer: no KV per token, a recurrent state and a convolution state per sequence."""
    key_dim = linear.num_key_heads * linear.key_head_dim
    value_dim = linear.num_value_heads * linear.value_head_dim
    return AttentionSpec(
        "linear", 0, 0, 0, 0,
        state_elements=linear.num_value_heads * linear.key_head_dim * linear.value_head_dim,
        state_dtype=state_dtype,
        conv_state_elements=(2 * key_dim + value_dim) * linear.conv_kernel,
        conv_state_dtype=conv_dtype,
        state_heads=linear.num_value_heads,
    )  # fmt: skip


def _state_dtype(decoder: Mapping[str, Any], f: _Fields) -> str:
    for key in ("mamba_ssm_dtype", "mamba_ssm_cache_dtype"):
        value = decoder.get(key)
        if value is not None:
            try:
                return canonical_dtype(value)
            except ValueError:
                raise PlannerError(f"{f.name}: config field {key!r} has an unknown dtype {value!r}") from None
    return "float32"  # transformers keeps the recurrent state in fp32


# ----------------------------------------------------------------------------------------------------
# GPT-2


def _gpt2(f, config, decoder, name, hidden, heads, num_layers, vocab, inner, max_pos, head_dim, tie, dtype,
          quant) -> ModelSpec:  # fmt: skip
    """GPT-2: fused QKV with biases, a plain (ungated) MLP, learned position embeddings, multi-head."""
    shapes = ArchShapes(
        head_dim=head_dim, attention_bias=True, attention_out_bias=True, fused_qkv=True, qk_norm=False,
        attn_output_gate=False, attention_sinks=False, mlp_gated=False, mlp_bias=True,
        fused_gate_up=False, norm_with_bias=True, norms_per_layer=2, position_embeddings=max_pos,
        naming="gpt2", dense_intermediate_size=inner,
    )  # fmt: skip
    attention = AttentionSpec("full", heads, heads, head_dim, head_dim)
    layers = tuple(LayerSpec(i, attention, "dense") for i in range(num_layers))
    return _finish(f, config, decoder, name, "gpt2", hidden, inner, vocab, num_layers, heads, layers, tie,
                   dtype, quant, max_pos, shapes)  # fmt: skip


# ----------------------------------------------------------------------------------------------------
# Nemotron-H (Mamba-2 / attention / MLP blocks)


def _nemotron_blocks(decoder: Mapping[str, Any], name: str) -> str:
    """Nemotron-H's block pattern, one symbol per block, from hybrid_override_pattern or layers_block_type."""
    pattern = decoder.get("hybrid_override_pattern")
    block_types = decoder.get("layers_block_type") or decoder.get("layer_types")
    symbol = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-",
              "moe": "E"}  # fmt: skip
    if isinstance(pattern, str):
        blocks = pattern
    elif isinstance(block_types, list):
        if len(block_types) > limits.MAX_LAYERS:
            raise PlannerError(
                f"{name}: layers_block_type lists {len(block_types)} blocks, "
                f"over {limits.bound('MAX_LAYERS')}"
            )
        try:
            blocks = "".join(symbol[str(t)] for t in block_types)
        except KeyError as exc:
            raise PlannerError(f"{name}: layers_block_type has an unknown block {exc.args[0]!r}") from None
    else:
        raise PlannerError(f"{name}: nemotron_h needs 'hybrid_override_pattern' or 'layers_block_type'")
    if len(blocks) > limits.MAX_LAYERS:
        raise PlannerError(
            f"{name}: hybrid_override_pattern has {len(blocks)} blocks, over {limits.bound('MAX_LAYERS')}"
        )
    bad = sorted(set(blocks) - set("M*-E"))
    if bad:
        raise PlannerError(
            f"{name}: hybrid_override_pattern has {''.join(bad)!r}; "
            "expected M (Mamba), * (attention), - (MLP)"
        )
    if "E" in blocks:
        raise PlannerError(
            f"{name}: hybrid_override_pattern has MoE blocks (E); "
            "Nemotron-H MoE variants are not supported yet"
        )
    declared = decoder.get("num_hidden_layers")
    if declared is not None and declared != len(blocks):
        raise PlannerError(
            f"{name}: num_hidden_layers ({declared}) contradicts "
            f"hybrid_override_pattern ({len(blocks)} blocks)"
        )
    return blocks


def _nemotron_h(
    f: _Fields, config: Mapping[str, Any], decoder: Mapping[str, Any], name: str, hidden: int, heads: int,
    kv_heads: int, head_dim: int, vocab: int, tie: bool, dtype: str, quant: QuantSpec | None,
    max_pos: int | None,
) -> ModelSpec:  # fmt: skip
    """Nemotron-H: a stack of single-mixer blocks, M (Mamba-2), * (attention), - (MLP), E (MoE)."""
    blocks = _nemotron_blocks(decoder, name)
    mamba = MambaShapes(
        num_heads=f.int("mamba_num_heads"),
        head_dim=f.int("mamba_head_dim"),
        n_groups=f.int("n_groups"),
        state_size=f.int("ssm_state_size"),
        conv_kernel=f.int("conv_kernel"),
        conv_bias=f.bool("use_conv_bias", fallback=True),
        proj_bias=f.bool("use_bias"),  # in_proj/out_proj use config.use_bias (mamba_proj_bias is unused)
    )
    if mamba.num_heads % mamba.n_groups:
        raise PlannerError(f"{name}: mamba_num_heads ({mamba.num_heads}) is not a multiple of n_groups")
    state_dtype = _state_dtype(decoder, f)
    inner = mamba.num_heads * mamba.head_dim
    conv_dim = inner + 2 * mamba.n_groups * mamba.state_size
    ssm = AttentionSpec(
        "mamba", 0, 0, 0, 0,
        state_elements=mamba.num_heads * mamba.head_dim * mamba.state_size,
        state_dtype=state_dtype,
        conv_state_elements=conv_dim * mamba.conv_kernel,
        conv_state_dtype=dtype,
        state_heads=mamba.num_heads,
    )  # fmt: skip
    full = AttentionSpec("full", heads, kv_heads, head_dim, head_dim)
    layers = []
    for i, block in enumerate(blocks):
        if block == "M":
            layers.append(LayerSpec(i, ssm, "none"))
        elif block == "*":
            layers.append(LayerSpec(i, full, "none"))
        else:
            layers.append(LayerSpec(i, None, "dense"))
    dense_width = f.int("intermediate_size") if "-" in blocks else 0
    shapes = ArchShapes(
        head_dim=head_dim,
        attention_bias=False,  # NemotronHAttention: q/k/v/o_proj bias=False whatever the config says
        attention_out_bias=False,
        fused_qkv=False,
        qk_norm=False,
        attn_output_gate=False,
        attention_sinks=False,
        mlp_gated=False,  # relu2: up_proj, down_proj
        mlp_bias=f.bool("mlp_bias"),
        fused_gate_up=False,
        norm_with_bias=False,
        norms_per_layer=1,
        position_embeddings=0,
        naming="nemotron_h",
        dense_intermediate_size=dense_width,
        mamba=mamba,
    )
    return _finish(f, config, decoder, name, "nemotron_h", hidden, dense_width, vocab, len(blocks), heads,
                   tuple(layers), tie, dtype, quant, max_pos, shapes)  # fmt: skip
