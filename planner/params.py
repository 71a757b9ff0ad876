"""Exact parameter counts, by component, from a ModelSpec.

The model is first listed as tensor groups (model_tensors): every weight, bias and norm of the decoder
with its Hugging Face name, its shape and what it does. Counting parameters (here) and bytes per weight format
(planner/formats.py) both read that one list, so the two can never disagree about what a model holds.
Counts follow what transformers builds (tied embeddings counted once, multi-token-prediction layers
not built).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from planner.errors import PlannerError
from planner.spec import ArchShapes, LayerSpec, ModelSpec

# Roles of weight matrices that Linear-layer quantization formats convert. Everything else (embeddings, the LM
# head, routers, norms, biases, convolutions, SSM parameters, sinks) stays in high precision unless a format
# says otherwise (GGUF formats also quantize token embeddings and the output head).
LINEAR_ROLES = frozenset(
    {
        "attn_q", "attn_k", "attn_v", "attn_qkv", "attn_o",
        "attn_q_a", "attn_q_b", "attn_kv_a", "attn_kv_b",
        "ffn_gate", "ffn_up", "ffn_down", "ffn_gate_up",
        "expert_gate", "expert_up", "expert_down", "expert_gate_up",
        "shared_gate", "shared_up", "shared_down",
        "ssm_in", "ssm_out", "linear_in", "linear_out",
    }
)  # fmt: skip
MATRIX_ROLES = LINEAR_ROLES | {"embed", "pos_embed", "head", "router"}


@dataclass(frozen=True, slots=True)
class TensorGroup:
    """``count`` identical tensors of shape (rows, cols): one weight, bias or norm (or a stack of experts)."""

    name: str  # Hugging Face parameter name, e.g. "model.layers.3.self_attn.q_proj.weight"
    component: str  # the params_breakdown key it counts under ("attention", "mlp", ...)
    role: str  # what it does: a LINEAR_ROLES name, "embed", "head", "router", "norm", "bias", "conv", ...
    rows: int  # output features (matrices) or elements (vectors)
    cols: int = 1  # input features; 1 for vectors
    count: int = 1  # identical copies: routed experts
    replicated: bool = False  # kept whole on every rank under tensor parallelism
    # A checkpoint tensor that transformers keeps as a buffer, not a parameter (DeepSeek-V3's fp32
    # e_score_correction_bias): it has bytes but is not in the parameter count.
    buffer: bool = False

    @property
    def numel(self) -> int:
        return self.rows * self.cols * self.count

    @property
    def module(self) -> str:
        """The module the tensor belongs to (name without .weight / .bias / a parameter suffix)."""
        return self.name.rsplit(".", 1)[0] if self.name.endswith((".weight", ".bias")) else self.name


@dataclass(frozen=True, slots=True)
class ModelTensors:
    """The decoder's tensor groups. Decoder layers repeat: each distinct layer's tensors are listed once
    (`shapes`, named from after the layer's index: ".self_attn.q_proj.weight") and each layer points at its
    own (`layer_shape`), so a 4,096-layer model costs one layer's walk, not 4,096; `layer(i)` names them in
    full."""

    embed: tuple[TensorGroup, ...]  # token (+ position) embeddings
    head: tuple[TensorGroup, ...]  # LM head; empty when tied to the embeddings
    final_norm: tuple[TensorGroup, ...]
    prefix: str  # a layer tensor's name before its index: "model.layers"
    shapes: tuple[tuple[TensorGroup, ...], ...]
    layer_shape: tuple[int, ...]  # decoder layer i holds shapes[layer_shape[i]]

    def layer(self, i: int) -> tuple[TensorGroup, ...]:
        """Layer i's tensor groups, named in full ("model.layers.3.self_attn.q_proj.weight")."""
        return tuple(replace(g, name=f"{self.prefix}.{i}{g.name}") for g in self.shapes[self.layer_shape[i]])

    @property
    def layers(self) -> tuple[tuple[TensorGroup, ...], ...]:
        """Every layer's groups named in full: a walk of every layer (sums go through `shapes` instead)."""
        return tuple(self.layer(i) for i in range(len(self.layer_shape)))

    def all(self) -> tuple[TensorGroup, ...]:
        out = list(self.embed) + list(self.head) + list(self.final_norm)
        for layer in self.layers:
            out.extend(layer)
        return tuple(out)

    def per_layer(self, value: Callable[[tuple[TensorGroup, ...]], int]) -> tuple[int, ...]:
        """value(a layer's groups) for each layer, computed once per distinct layer (the groups' names
        stop at the layer's index: `value` must not read them)."""
        once = [value(shape) for shape in self.shapes]
        return tuple(once[k] for k in self.layer_shape)


@dataclass(frozen=True, slots=True)
class ParamCount:
    total: int
    by_component: Mapping[str, int]  # keys as in shared/configs/EXPECTED.json params_breakdown (nonzero only)
    active_per_token: int  # == total for dense models
    embed: int  # input embeddings (+ position embeddings)
    head: int  # 0 when tied
    final_norm: int
    per_layer: tuple[int, ...]  # parameters of each decoder layer
    per_layer_replicated: tuple[int, ...]  # of which not sharded by tensor parallelism (norms, routers...)


def count_params(spec: ModelSpec, tensors: ModelTensors | None = None) -> ParamCount:
    """Exact parameter count of the decoder, by component, per layer, and active per token. `tensors`:
    model_tensors(spec) when the caller has it already."""
    tensors = tensors if tensors is not None else model_tensors(spec)
    per_layer = tensors.per_layer(lambda groups: sum(g.numel for g in groups if not g.buffer))
    replicated = tensors.per_layer(
        lambda groups: sum(g.numel for g in groups if g.replicated and not g.buffer)
    )
    # A token runs experts_per_token of the num_experts routed experts of each MoE layer.
    idle = sum(
        tensors.per_layer(
            lambda groups: sum(
                g.numel // g.count * (g.count - spec.experts_per_token)
                for g in groups
                if g.component == "moe_routed_experts"
            )
        )
    )
    by_component: dict[str, int] = {}
    uses = [0] * len(tensors.shapes)  # how many layers hold each distinct layer
    for k in tensors.layer_shape:
        uses[k] += 1
    groups = [(g, 1) for g in (*tensors.embed, *tensors.head, *tensors.final_norm)]
    groups += [(g, n) for shape, n in zip(tensors.shapes, uses, strict=True) for g in shape]
    for group, n in groups:
        if not group.buffer:
            by_component[group.component] = by_component.get(group.component, 0) + group.numel * n
    embed = sum(g.numel for g in tensors.embed)
    head = sum(g.numel for g in tensors.head)
    final_norm = sum(g.numel for g in tensors.final_norm)
    total = embed + head + final_norm + sum(per_layer)
    return ParamCount(
        total=total,
        by_component=MappingProxyType({k: v for k, v in sorted(by_component.items()) if v}),
        active_per_token=total - idle,
        embed=embed,
        head=head,
        final_norm=final_norm,
        per_layer=per_layer,
        per_layer_replicated=replicated,
    )


def model_tensors(spec: ModelSpec) -> ModelTensors:
    """Every tensor group of the decoder, named as in the Hugging Face checkpoint."""
    s = spec.shapes
    if s is None:
        raise PlannerError(f"{spec.name}: ModelSpec has no shapes; build it with planner.spec.load_spec")
    h, v = spec.hidden_size, spec.vocab_size
    if s.naming == "gpt2":
        prefix, embed_name, norm_name = "transformer.h", "transformer.wte.weight", "transformer.ln_f"
    elif s.naming == "nemotron_h":
        prefix, embed_name, norm_name = "backbone.layers", "backbone.embeddings.weight", "backbone.norm_f"
    else:
        prefix, embed_name, norm_name = "model.layers", "model.embed_tokens.weight", "model.norm"
    embed = [TensorGroup(embed_name, "embed_tokens", "embed", v, h)]
    if s.position_embeddings:
        positions = s.position_embeddings
        embed.append(TensorGroup("transformer.wpe.weight", "pos_embed", "pos_embed", positions, h))
    head = () if spec.tie_word_embeddings else (TensorGroup("lm_head.weight", "lm_head", "head", v, h),)
    final_norm = tuple(_norm(norm_name, h, s, component="norm"))
    # a layer's tensors follow from its attention and MLP kinds (and the model's shapes): layers sharing them
    # (load_spec gives the layers of one kind one AttentionSpec) share one list. Keyed by the object's id:
    # hashing a dataclass per layer would cost what the sharing saves; equal but distinct objects are only
    # worked out twice.
    shapes: dict[tuple[int, str], int] = {}  # (id of the attention spec, MLP kind) -> its place in `listed`
    listed: list[tuple[TensorGroup, ...]] = []
    layer_shape = []
    for i, layer in enumerate(spec.layers):
        if layer.index != i:
            raise PlannerError(f"{spec.name}: layer {i} says it is layer {layer.index}")
        key = (id(layer.attention), layer.mlp_kind)
        if key not in shapes:
            shapes[key] = len(listed)
            listed.append(tuple(_layer(spec, s, layer, "")))  # names from after the index
        layer_shape.append(shapes[key])
    return ModelTensors(tuple(embed), head, final_norm, prefix, tuple(listed), tuple(layer_shape))


def _norm(name: str, width: int, s: ArchShapes, *, component: str) -> list[TensorGroup]:
    out = [TensorGroup(f"{name}.weight", component, "norm", width, replicated=True)]
    if s.norm_with_bias:
        out.append(TensorGroup(f"{name}.bias", component, "norm", width, replicated=True))
    return out


def _linear(
    name: str, component: str, role: str, rows: int, cols: int, *, bias: bool, row_parallel: bool = False,
    count: int = 1, replicated: bool = False,
) -> list[TensorGroup]:  # fmt: skip
    """A Linear layer (out=rows, in=cols). Row-parallel layers keep their bias whole on every rank."""
    out = [TensorGroup(f"{name}.weight", component, role, rows, cols, count, replicated)]
    if bias:
        out.append(TensorGroup(f"{name}.bias", component, "bias", rows, 1, count, replicated or row_parallel))
    return out


def _layer(spec: ModelSpec, s: ArchShapes, layer: LayerSpec, p: str) -> list[TensorGroup]:
    h = spec.hidden_size
    out: list[TensorGroup] = []
    if s.naming == "nemotron_h":
        out += _norm(f"{p}.norm", h, s, component="norm")
    elif s.naming == "gpt2":
        out += _norm(f"{p}.ln_1", h, s, component="norm") + _norm(f"{p}.ln_2", h, s, component="norm")
    else:
        names = ["input_layernorm", "post_attention_layernorm"]
        if s.norms_per_layer == 4:
            names += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
        for norm in names:
            out += _norm(f"{p}.{norm}", h, s, component="norm")

    attention = layer.attention
    if attention is not None:
        if attention.kind in ("full", "sliding"):
            out += _softmax_attention(spec, s, p)
        elif attention.kind == "mla":
            out += _mla_attention(spec, s, p)
        elif attention.kind == "linear":
            out += _gated_deltanet(spec, s, p)
        elif attention.kind == "mamba":
            out += _mamba2(spec, s, p)
        else:
            raise PlannerError(f"{spec.name}: layer {layer.index}: unknown attention kind {attention.kind!r}")
    if layer.mlp_kind == "dense":
        out += _dense_mlp(spec, s, p)
    elif layer.mlp_kind == "moe":
        out += _moe(spec, s, p)
    elif layer.mlp_kind != "none":
        raise PlannerError(f"{spec.name}: layer {layer.index} has unknown mlp kind {layer.mlp_kind!r}")
    return out


def _softmax_attention(spec: ModelSpec, s: ArchShapes, p: str) -> list[TensorGroup]:
    h, heads = spec.hidden_size, spec.num_attention_heads
    kv = _kv_heads(spec)
    q_width, kv_width = heads * s.head_dim, kv * s.head_dim
    if s.naming == "gpt2":
        return _linear(f"{p}.attn.c_attn", "attention", "attn_qkv", 3 * h, h, bias=True) + _linear(
            f"{p}.attn.c_proj", "attention", "attn_o", h, h, bias=True, row_parallel=True
        )
    a = f"{p}.mixer" if s.naming == "nemotron_h" else f"{p}.self_attn"
    q_rows = q_width * (2 if s.attn_output_gate else 1)
    out: list[TensorGroup] = []
    if s.fused_qkv:
        rows = q_rows + 2 * kv_width
        out += _linear(f"{a}.qkv_proj", "attention", "attn_qkv", rows, h, bias=s.attention_bias)
    else:
        out += _linear(f"{a}.q_proj", "attention", "attn_q", q_rows, h, bias=s.attention_bias)
        out += _linear(f"{a}.k_proj", "attention", "attn_k", kv_width, h, bias=s.attention_bias)
        out += _linear(f"{a}.v_proj", "attention", "attn_v", kv_width, h, bias=s.attention_bias)
    out += _linear(
        f"{a}.o_proj", "attention", "attn_o", h, q_width, bias=s.attention_out_bias, row_parallel=True
    )
    if s.qk_norm:
        out += [
            TensorGroup(f"{a}.q_norm.weight", "attention", "norm", s.head_dim, replicated=True),
            TensorGroup(f"{a}.k_norm.weight", "attention", "norm", s.head_dim, replicated=True),
        ]
    if s.attention_sinks:
        # vLLM shards the sinks with the heads (one per local head), so they are not replicated.
        out.append(TensorGroup(f"{a}.sinks", "attention", "sink", heads))
    return out


def _kv_heads(spec: ModelSpec) -> int:
    for layer in spec.layers:
        if layer.attention is not None and layer.attention.kind in ("full", "sliding"):
            return layer.attention.num_kv_heads
    raise PlannerError(f"{spec.name}: no softmax attention layer to take num_key_value_heads from")


def _mla_attention(spec: ModelSpec, s: ArchShapes, p: str) -> list[TensorGroup]:
    m = s.mla
    assert m is not None
    h, heads = spec.hidden_size, spec.num_attention_heads
    a = f"{p}.self_attn"
    qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
    out: list[TensorGroup] = []
    if m.q_lora_rank:
        # q_a_proj and kv_a_proj_with_mqa are ReplicatedLinear in vLLM: every rank holds them whole.
        out += _linear(f"{a}.q_a_proj", "attention", "attn_q_a", m.q_lora_rank, h, bias=s.attention_bias,
                       replicated=True)  # fmt: skip
        out.append(
            TensorGroup(f"{a}.q_a_layernorm.weight", "attention", "norm", m.q_lora_rank, replicated=True)
        )
        out += _linear(f"{a}.q_b_proj", "attention", "attn_q_b", heads * qk_head, m.q_lora_rank, bias=False)
    else:
        out += _linear(f"{a}.q_proj", "attention", "attn_q", heads * qk_head, h, bias=False)
    latent = m.kv_lora_rank + m.qk_rope_head_dim
    out += _linear(f"{a}.kv_a_proj_with_mqa", "attention", "attn_kv_a", latent, h, bias=s.attention_bias,
                   replicated=True)  # fmt: skip
    out.append(
        TensorGroup(f"{a}.kv_a_layernorm.weight", "attention", "norm", m.kv_lora_rank, replicated=True)
    )
    out += _linear(f"{a}.kv_b_proj", "attention", "attn_kv_b", heads * (m.qk_nope_head_dim + m.v_head_dim),
                   m.kv_lora_rank, bias=False)  # fmt: skip
    out += _linear(f"{a}.o_proj", "attention", "attn_o", h, heads * m.v_head_dim, bias=s.attention_bias,
                   row_parallel=True)  # fmt: skip
    return out


def _gated_deltanet(spec: ModelSpec, s: ArchShapes, p: str) -> list[TensorGroup]:
    """Qwen3-Next / Qwen3.5 Gated DeltaNet (transformers Qwen3NextGatedDeltaNet)."""
    g = s.linear_attention
    assert g is not None
    h = spec.hidden_size
    a = f"{p}.linear_attn"
    key_dim = g.num_key_heads * g.key_head_dim
    value_dim = g.num_value_heads * g.value_head_dim
    conv_dim = 2 * key_dim + value_dim
    c = "linear_attention"
    return [
        *_linear(f"{a}.in_proj_qkvz", c, "linear_in", 2 * key_dim + 2 * value_dim, h, bias=False),
        *_linear(f"{a}.in_proj_ba", c, "linear_in", 2 * g.num_value_heads, h, bias=False),
        TensorGroup(f"{a}.conv1d.weight", c, "conv", conv_dim, g.conv_kernel),  # depthwise, no bias
        TensorGroup(f"{a}.dt_bias", c, "ssm_param", g.num_value_heads),
        TensorGroup(f"{a}.A_log", c, "ssm_param", g.num_value_heads),
        # one RMSNorm over head_v_dim shared by all heads: vLLM keeps it whole on every rank
        TensorGroup(f"{a}.norm.weight", c, "norm", g.value_head_dim, replicated=True),
        *_linear(f"{a}.out_proj", c, "linear_out", h, value_dim, bias=False, row_parallel=True),
    ]


def _mamba2(spec: ModelSpec, s: ArchShapes, p: str) -> list[TensorGroup]:
    """Nemotron-H Mamba-2 mixer (transformers NemotronHMamba2Mixer)."""
    m = s.mamba
    assert m is not None
    h = spec.hidden_size
    a = f"{p}.mixer"
    inner = m.num_heads * m.head_dim
    conv_dim = inner + 2 * m.n_groups * m.state_size
    c = "mamba_mixer"
    out = _linear(f"{a}.in_proj", c, "ssm_in", inner + conv_dim + m.num_heads, h, bias=m.proj_bias)
    out.append(TensorGroup(f"{a}.conv1d.weight", c, "conv", conv_dim, m.conv_kernel))
    if m.conv_bias:
        out.append(TensorGroup(f"{a}.conv1d.bias", c, "bias", conv_dim))
    out += [
        TensorGroup(f"{a}.dt_bias", c, "ssm_param", m.num_heads),
        TensorGroup(f"{a}.A_log", c, "ssm_param", m.num_heads),
        TensorGroup(f"{a}.D", c, "ssm_param", m.num_heads),
        TensorGroup(f"{a}.norm.weight", c, "norm", inner),  # gated RMSNorm, sharded with the heads in vLLM
    ]
    out += _linear(f"{a}.out_proj", c, "ssm_out", h, inner, bias=m.proj_bias, row_parallel=True)
    return out


def _dense_mlp(spec: ModelSpec, s: ArchShapes, p: str) -> list[TensorGroup]:
    h = spec.hidden_size
    width = s.dense_intermediate_size
    if s.naming == "gpt2":
        return _linear(f"{p}.mlp.c_fc", "mlp", "ffn_up", width, h, bias=True) + _linear(
            f"{p}.mlp.c_proj", "mlp", "ffn_down", h, width, bias=True, row_parallel=True
        )
    m = f"{p}.mixer" if s.naming == "nemotron_h" else f"{p}.mlp"
    out: list[TensorGroup] = []
    if s.mlp_gated and s.fused_gate_up:
        out += _linear(f"{m}.gate_up_proj", "mlp", "ffn_gate_up", 2 * width, h, bias=s.mlp_bias)
    elif s.mlp_gated:
        out += _linear(f"{m}.gate_proj", "mlp", "ffn_gate", width, h, bias=s.mlp_bias)
        out += _linear(f"{m}.up_proj", "mlp", "ffn_up", width, h, bias=s.mlp_bias)
    else:
        out += _linear(f"{m}.up_proj", "mlp", "ffn_up", width, h, bias=s.mlp_bias)
    out += _linear(f"{m}.down_proj", "mlp", "ffn_down", h, width, bias=s.mlp_bias, row_parallel=True)
    return out


def _moe(spec: ModelSpec, s: ArchShapes, p: str) -> list[TensorGroup]:
    moe = s.moe
    assert moe is not None
    h, e, w = spec.hidden_size, spec.num_experts, moe.expert_intermediate_size
    m = f"{p}.mlp"
    router = f"{m}.router" if spec.model_type == "gpt_oss" else f"{m}.gate"
    out = _linear(router, "moe_router", "router", e, h, bias=moe.router_bias, replicated=True)
    if moe.router_score_bias:
        # DeepSeek-V3 keeps one fp32 correction per expert: a buffer in transformers (not a parameter), a
        # tensor in the checkpoint and in vLLM, so it has bytes but no parameter count.
        name = f"{router}.e_score_correction_bias"
        out.append(TensorGroup(name, "moe_router", "router_bias", e, replicated=True, buffer=True))
    x = f"{m}.experts"
    c = "moe_routed_experts"
    if spec.model_type == "gpt_oss":
        # gpt-oss stores the experts as 3-D tensors: gate_up_proj [E, H, 2W] (+ bias [E, 2W]),
        # down_proj [E, W, H] (+ bias [E, H]).
        out += [
            TensorGroup(f"{x}.gate_up_proj", c, "expert_gate_up", 2 * w, h, e),
            TensorGroup(f"{x}.gate_up_proj_bias", c, "bias", 2 * w, 1, e),
            TensorGroup(f"{x}.down_proj", c, "expert_down", h, w, e),
            TensorGroup(f"{x}.down_proj_bias", c, "bias", h, 1, e, replicated=True),
        ]
    else:
        out += [
            TensorGroup(f"{x}.gate_proj.weight", c, "expert_gate", w, h, e),
            TensorGroup(f"{x}.up_proj.weight", c, "expert_up", w, h, e),
            TensorGroup(f"{x}.down_proj.weight", c, "expert_down", h, w, e),
        ]
    c = "moe_shared_experts"
    if moe.shared_intermediate_size:
        shared = f"{m}.shared_experts" if spec.model_type.startswith("deepseek") else f"{m}.shared_expert"
        sw = moe.shared_intermediate_size
        # the shared expert is the family's dense MLP class (DeepSeek-V2: with config.mlp_bias)
        bias = s.mlp_bias
        out += _linear(f"{shared}.gate_proj", c, "shared_gate", sw, h, bias=bias)
        out += _linear(f"{shared}.up_proj", c, "shared_up", sw, h, bias=bias)
        out += _linear(f"{shared}.down_proj", c, "shared_down", h, sw, bias=bias, row_parallel=True)
    if moe.shared_expert_gate:
        out += _linear(f"{m}.shared_expert_gate", c, "router", 1, h, bias=False, replicated=True)
    return out
