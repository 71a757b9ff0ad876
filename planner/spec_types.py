"""The values a model's shape is made of: ModelSpec, its layers (LayerSpec, AttentionSpec), the resolved
per-architecture tensor shapes (ArchShapes with MLAShapes, LinearAttentionShapes, MambaShapes, MoEShapes) and
the parsed quantization_config (QuantSpec). Frozen dataclasses, no logic.

Import them from planner.spec, which re-exports them. Where they are built: planner/spec.py (load_spec,
spec_from_config), with planner/spec_source.py (finding the config), planner/spec_fields.py (transformers'
defaults, the fields every family reads alike), planner/spec_families.py (each architecture family) and
planner/spec_quant.py (quantization_config).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True, slots=True)
class AttentionSpec:
    """One layer's token mixer, as far as the cache is concerned."""

    kind: str  # "full" | "sliding" | "mla" | "linear" (fixed state) | "mamba" (fixed state)
    num_q_heads: int  # 0 for linear/mamba if not applicable
    num_kv_heads: int  # KV heads stored (MLA: 1 latent "head")
    k_head_dim: int  # per-head key width stored in the cache (MLA: kv_lora_rank + qk_rope_head_dim)
    v_head_dim: int  # per-head value width stored (MLA: 0)
    window: int | None = None  # sliding window W (tokens), kind == "sliding"
    state_elements: int = 0  # per-sequence fixed recurrent/SSM state elements (linear / mamba)
    state_dtype: str = ""  # dtype of that state, e.g. "float32"
    # Linear attention and Mamba also keep a short convolution window per sequence. transformers keeps it in
    # the activation dtype (the model's torch_dtype), not in fp32 like the recurrent state: counted apart.
    conv_state_elements: int = 0
    conv_state_dtype: str = ""
    # Heads the fixed state is split over (tensor parallelism shards the state by these): linear attention's
    # value heads, Mamba's heads. 0 for attention layers.
    state_heads: int = 0


@dataclass(frozen=True, slots=True)
class LayerSpec:
    index: int
    attention: AttentionSpec | None  # None: an MLP-only block (Nemotron-H "-")
    mlp_kind: str  # "dense" | "moe" | "none"


@dataclass(frozen=True, slots=True)
class MLAShapes:
    """DeepSeek multi-head latent attention."""

    q_lora_rank: int  # 0: q is projected directly from the hidden state
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True, slots=True)
class LinearAttentionShapes:
    """Gated DeltaNet (Qwen3-Next, Qwen3.5)."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int


@dataclass(frozen=True, slots=True)
class MambaShapes:
    """Mamba-2 mixer (Nemotron-H)."""

    num_heads: int
    head_dim: int
    n_groups: int
    state_size: int
    conv_kernel: int
    conv_bias: bool
    proj_bias: bool


@dataclass(frozen=True, slots=True)
class MoEShapes:
    expert_intermediate_size: int  # width of one routed expert
    shared_intermediate_size: int  # width of the always-on shared expert(s) together; 0: none
    shared_expert_gate: bool  # Qwen: a sigmoid gate (hidden -> 1) on the shared expert
    router_bias: bool  # gpt-oss: router Linear has a bias
    router_score_bias: bool  # DeepSeek-V3: e_score_correction_bias (one fp32 per expert)
    expert_bias: bool  # gpt-oss: biases on the experts' projections


@dataclass(frozen=True, slots=True)
class ArchShapes:
    """What a parameter count needs beyond ModelSpec's headline numbers, config spellings resolved."""

    head_dim: int  # query/output head width of softmax attention layers
    attention_bias: bool  # biases on q, k, v
    attention_out_bias: bool  # bias on o_proj
    fused_qkv: bool  # one qkv matrix (Phi-3, GPT-2): same numbers, different tensor names
    qk_norm: bool  # per-head RMSNorm on q and k (Qwen3, ...)
    attn_output_gate: bool  # Qwen3-Next / Qwen3.5: q_proj also emits a per-channel output gate
    attention_sinks: bool  # gpt-oss: one learned sink logit per head
    mlp_gated: bool  # gate/up/down (SwiGLU, GeGLU) vs up/down (GPT-2, relu2)
    mlp_bias: bool
    fused_gate_up: bool  # Phi-3: one gate_up matrix
    norm_with_bias: bool  # LayerNorm (weight + bias) instead of RMSNorm (weight)
    norms_per_layer: int  # 2 (pre-attention, pre-MLP); Gemma 2: 4; Nemotron-H: 1 per block
    position_embeddings: int  # learned absolute positions (GPT-2); 0: RoPE
    naming: str  # tensor naming scheme: "hf" (model.layers.N...), "gpt2" (transformer.h.N...), "nemotron_h"
    dense_intermediate_size: int = 0  # width of the dense MLP layers (0: none)
    mla: MLAShapes | None = None
    linear_attention: LinearAttentionShapes | None = None
    mamba: MambaShapes | None = None
    moe: MoEShapes | None = None


@dataclass(frozen=True, slots=True)
class QuantSpec:
    """A checkpoint's quantization_config, reduced to what the weight bytes depend on."""

    method: str  # our format name: "fp8", "fp8_block", "int8", "awq", "gptq", "mxfp4", "nvfp4"
    bits: int
    group_size: int = 0  # elements per scale along the input dimension (awq/gptq); 0: n/a
    block_size: tuple[int, int] | None = None  # fp8 block scales (rows, cols)
    modules_to_not_convert: tuple[str, ...] = ()  # module name patterns kept in the activation dtype
    zero_point: bool = True  # awq/gptq: a 4-bit zero point per group
    desc_act: bool = False  # gptq act-order (g_idx tensor is stored either way)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str  # catalog name or config path/repo id
    model_type: str  # HF model_type of the decoder ("llama", "qwen3_moe", ...)
    hidden_size: int
    # Widest MLP a token passes through in one layer: the dense width, or for MoE layers the routed expert
    # width times experts_per_token plus the shared expert width. Used for activation sizes.
    intermediate_size: int
    vocab_size: int
    num_layers: int
    num_attention_heads: int
    layers: tuple[LayerSpec, ...]
    tie_word_embeddings: bool
    torch_dtype: str  # "bfloat16", ...
    default_format: str  # weight format implied by torch_dtype / quantization_config ("bf16", "fp8", ...)
    max_position_embeddings: int | None
    num_experts: int = 0
    experts_per_token: int = 0
    assumptions: tuple[str, ...] = ()  # defaults taken from transformers' config classes, etc.
    shapes: ArchShapes | None = field(default=None, compare=False, repr=False)
    quantization: QuantSpec | None = None
    # The decoder config (text_config already unwrapped) as given, read-only; not part of equality/hash.
    config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), compare=False, repr=False)
