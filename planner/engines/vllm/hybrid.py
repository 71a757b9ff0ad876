"""Hybrid models' pages (Mamba-2 / Gated DeltaNet state layers next to attention) as vLLM V1 unifies them."""

from __future__ import annotations

from dataclasses import dataclass

from planner.engines.vllm.version import Version, parse_version
from planner.errors import PlannerError
from planner.kv import STATE_KINDS, layer_kv_bytes
from planner.spec import LayerSpec, ModelSpec
from planner.units import canonical_dtype, ceil_div, dtype_bytes

# ----------------------------------------------------------------------------------------------------
# Hybrid models (Mamba-2 / Gated DeltaNet layers next to attention): vLLM V1 keeps every layer's cache in
# pages of one size. It raises the attention block size until an attention page holds at least one state
# page, then pads the state page to exactly the attention page. Read in the release sdists 0.10.2, 0.11.0,
# 0.12.0, 0.13.0, 0.14.0 and 0.20.0 (model_executor/models/config.py HybridAttentionMambaModelConfig up to
# 0.19, platforms/interface.py _align_hybrid_block_size from 0.20; layers/mamba/mamba_utils.py for the state
# shapes and dtypes; v1/kv_cache_interface.py MambaSpec; v1/core/kv_cache_utils.py for groups and logs).
# 0.26.0 was read too: there hybrids get prefix caching by default (v0.26.0:config/model.py:1895
# is_prefix_caching_supported), which puts the state in mamba_cache_mode "align" (models without Mamba prefix
# caching support: Qwen3-Next, Qwen3.5; two state blocks per request) or "all" (Nemotron-H: chunk-aligned
# blocks and a state block per block of the request, not modelled) (v0.26.0:models/config.py MambaModelConfig,
# kv_cache_interface.py MambaSpec.max_memory_usage_bytes). 0.33.0 adds a prefill-checkpoint alignment to
# "align" and a new KV-cache planner (kv_cache_planning.py): not modelled.
HYBRID_FIRST_VERSION: Version = (0, 10, 2)  # first read version with HybridAttentionMambaModelConfig
HYBRID_LAST_VERSION: Version = (0, 26, 99)
HYBRID_READ_VERSIONS: tuple[str, ...] = ("0.10.2", "0.11.0", "0.12.0", "0.13.0", "0.14.0", "0.20.0", "0.26.0")
# Prefix caching is off by default for hybrids up to 0.20 (v0.20.0:config/model.py:1787) and on in 0.26; the
# versions between were not read, so there the caller has to say which.
HYBRID_PREFIX_CACHING_UNKNOWN: tuple[Version, Version] = ((0, 21, 0), (0, 25, 99))


@dataclass(frozen=True, slots=True)
class HybridPages:
    """vLLM's page unification for a model with Mamba / linear-attention layers (one rank)."""

    block_size: int  # attention block size in tokens after unification
    attention_bytes_per_token: int  # one attention layer, one token (K + V)
    state_bytes: int  # one state layer's MambaSpec page before padding (conv + temporal state)
    page_bytes: int  # the unified page: block_size * attention_bytes_per_token, the state page padded to it
    state_block_size: int  # MambaSpec.block_size: max_model_len without prefix caching, else block_size
    state_blocks_per_request: int  # state blocks one request holds per group
    mamba_cache_mode: str  # "none" (no prefix caching) | "align"
    alignment: int  # the kernel block alignment the block size was rounded to
    conv_dtype: str
    temporal_dtype: str
    log_lines: tuple[str, ...]  # "Setting attention block size ..." / "Padding mamba page size ..."


def _model_dtype_name(spec: ModelSpec) -> str:
    return canonical_dtype(spec.torch_dtype)


def _config_dtype(spec: ModelSpec, key: str) -> str | None:
    value = spec.config.get(key)
    if value is None:
        return None
    try:
        return canonical_dtype(str(value))
    except ValueError:
        raise PlannerError(f"{spec.name}: config field {key!r} has an unknown dtype {value!r}") from None


def vllm_state_dtypes(
    spec: ModelSpec, kind: str, version: Version, mamba_ssm_cache_dtype: str = "auto"
) -> tuple[str, str, str]:
    """(conv state dtype, temporal/SSM state dtype, why) of one state layer as vLLM `version` allocates it.

    mamba_utils.py MambaStateDtypeCalculator: the conv state takes mamba_cache_dtype ("auto": model dtype);
    Mamba-2's temporal state takes mamba_ssm_cache_dtype ("auto": the conv dtype). Gated DeltaNet's temporal
    state followed mamba_cache_dtype until 0.14 (v0.14.0:mamba_utils.py gated_delta_net_state_dtype returns
    (state_dtype, state_dtype)) and mamba_ssm_cache_dtype in 0.20 (v0.20.0); the versions between were not
    read: the 0.20 rule is applied from 0.15 on (a vLLM 0.17.1 startup log of Qwen3.5-35B-A3B already shows
    the fp32 state, "Setting attention block size to 1056 tokens"). The per-model defaults of
    mamba_ssm_cache_dtype (model_executor/models/config.py): Nemotron-H takes the HF config's
    mamba_ssm_cache_dtype, else float16 in 0.13-0.14 and float32 in 0.20 (none before 0.13);
    Qwen3.5 takes the HF config's mamba_ssm_dtype (0.20, Qwen3_5ForConditionalGenerationConfig)."""
    model = _model_dtype_name(spec)
    conv = model
    ssm = "auto" if mamba_ssm_cache_dtype in ("", "auto") else canonical_dtype(mamba_ssm_cache_dtype)
    why = "--mamba-ssm-cache-dtype given" if ssm != "auto" else ""
    if ssm == "auto" and spec.model_type == "nemotron_h" and version >= (0, 13, 0):
        configured = _config_dtype(spec, "mamba_ssm_cache_dtype")
        default = "float32" if version >= (0, 20, 0) else "float16"
        ssm = configured or default
        why = (
            "the config's mamba_ssm_cache_dtype"
            if configured
            else f"NemotronHForCausalLMConfig default {default} in vLLM {'.'.join(map(str, version))}"
        )
    if ssm == "auto" and spec.model_type.startswith("qwen3_5"):  # vLLM has Qwen3.5 only after 0.14
        configured = _config_dtype(spec, "mamba_ssm_dtype")
        if configured:
            ssm, why = configured, "the config's mamba_ssm_dtype (Qwen3_5ForConditionalGenerationConfig)"
    if kind == "linear" and version < (0, 15, 0):
        return conv, conv, "Gated DeltaNet state in mamba_cache_dtype (auto: model dtype) up to 0.14"
    if ssm == "auto":
        return conv, conv, "mamba_ssm_cache_dtype auto: the model dtype"
    return conv, ssm, why


def _divide(numerator: int, denominator: int, what: str, spec: ModelSpec) -> int:
    # vllm.distributed.divide asserts exact division
    if numerator % denominator:
        raise PlannerError(f"{spec.name}: {what} ({numerator}) is not divisible by tp={denominator}")
    return numerator // denominator


def vllm_state_page_bytes(
    spec: ModelSpec, kind: str, tp: int, version: Version, mamba_ssm_cache_dtype: str = "auto"
) -> tuple[int, str, str]:
    """(MambaSpec page bytes, conv dtype, temporal dtype) of one state layer on one rank, from vLLM's shapes.

    vLLM keeps conv_kernel - 1 columns of the convolution window (transformers keeps conv_kernel, as
    planner.kv counts) and may keep the recurrent state in the model dtype instead of transformers' fp32, so
    its page is computed here from the shapes (mamba_utils.py MambaStateShapeCalculator, the same in 0.10.2 -
    0.33.0 apart from speculative-decoding columns, which are 0 without spec decode):
    * Gated DeltaNet: conv (conv_kernel - 1, (2*k_heads*k_dim + v_heads*v_dim) / tp),
      temporal (v_heads / tp, k_dim, v_dim);
    * Mamba-2: n_groups grows to tp when tp does not divide it (extra_groups_for_head_shards),
      conv (conv_kernel - 1, (heads*head_dim + 2*n_groups*state) / tp),
      temporal (heads / tp, head_dim, state)."""
    shapes = spec.shapes
    conv_dtype, temporal_dtype, _ = vllm_state_dtypes(spec, kind, version, mamba_ssm_cache_dtype)
    if kind == "linear":
        if shapes is None or shapes.linear_attention is None:
            raise PlannerError(f"{spec.name}: linear-attention layers without their shapes")
        la = shapes.linear_attention
        conv_dim = 2 * la.num_key_heads * la.key_head_dim + la.num_value_heads * la.value_head_dim
        conv = (la.conv_kernel - 1) * _divide(conv_dim, tp, "the convolution width", spec)
        temporal = _divide(la.num_value_heads, tp, "linear_num_value_heads", spec) * la.key_head_dim
        temporal *= la.value_head_dim
    elif kind == "mamba":
        if shapes is None or shapes.mamba is None:
            raise PlannerError(f"{spec.name}: Mamba layers without their shapes")
        m = shapes.mamba
        groups = m.n_groups if m.n_groups % tp == 0 else m.n_groups + (tp - m.n_groups)
        conv_dim = m.num_heads * m.head_dim + 2 * groups * m.state_size
        conv = (m.conv_kernel - 1) * _divide(conv_dim, tp, "the convolution width", spec)
        temporal = _divide(m.num_heads, tp, "mamba_num_heads", spec) * m.head_dim * m.state_size
    else:
        raise PlannerError(f"{spec.name}: {kind!r} is not a state layer")
    page = conv * dtype_bytes(conv_dtype) + temporal * dtype_bytes(temporal_dtype)
    return page, conv_dtype, temporal_dtype


def _attention_and_state_kind(spec: ModelSpec, version: Version) -> tuple[list[LayerSpec], str]:
    """The hybrid's attention layers and its one kind of state layer, refusing the mixes not modelled."""
    attention_layers = [
        layer
        for layer in spec.layers
        if layer.attention is not None and layer.attention.kind not in STATE_KINDS
    ]
    state_kinds = sorted(
        {
            layer.attention.kind
            for layer in spec.layers
            if layer.attention is not None and layer.attention.kind in STATE_KINDS
        }
    )
    if not attention_layers:
        raise PlannerError(f"{spec.name}: no attention layers; attention-free models are not modelled")
    if len(state_kinds) != 1 or any(layer.attention.kind != "full" for layer in attention_layers):  # type: ignore[union-attr]
        raise PlannerError(
            f"{spec.name}: only full attention next to one kind of state layer is modelled for vLLM hybrids"
        )
    if spec.model_type.startswith("qwen3_5") and version < (0, 15, 0):
        shown = ".".join(map(str, version))
        raise PlannerError(f"{spec.name}: vLLM {shown} has no Qwen3.5 model (0.14.0 has none)")
    return attention_layers, state_kinds[0]


def _kernel_block_alignment(
    version: Version, head_size: int, cuda_capability: tuple[int, int] | None, block_size: int
) -> int:
    """The multiple the attention block size is rounded up to so that its page holds a state page."""
    # 16 by default (FlashAttention needs multiples of 16; v0.11.0:models/config.py:363-368).
    # 0.12-0.14: 32 on Blackwell (compute capability 10.0 in 0.12, the 10.x family from 0.13) for head size
    # 256 with the default / FlashInfer backend (v0.12.0:models/config.py, flashinfer issue 1993).
    # 0.20: max(the smallest kernel block size the attention backend supports, cache block_size)
    # (v0.20.0:platforms/interface.py:577-583); FlashAttention's smallest is 16 (MultipleOf(16), or
    # [16, 32, 64] for fp32-state hybrids: v0.20.0:v1/attention/backends/flash_attn.py:75-92; v0.26.0 the
    # same), FlashInfer's too ([16, 32, 64]: flashinfer.py:338-341); the backend is not modelled.
    alignment = 16
    if (0, 12, 0) <= version < (0, 20, 0) and head_size == 256 and cuda_capability is not None:
        blackwell = cuda_capability == (10, 0) if version < (0, 13, 0) else cuda_capability[0] == 10
        if blackwell:
            alignment = 32
    if version >= (0, 20, 0):
        alignment = max(16, block_size)
    return alignment


def hybrid_pages(
    spec: ModelSpec,
    *,
    version: Version,
    kv_dtype: str,
    tp: int,
    block_size: int,
    max_model_len: int,
    cuda_capability: tuple[int, int] | None = None,
    mamba_ssm_cache_dtype: str = "auto",
    mamba_cache_mode: str = "none",
) -> HybridPages:
    """The attention block size and the unified page of a hybrid model, as vLLM `version` sets them.
    mamba_cache_mode: "none" (prefix caching off) or "align" (on, for models without Mamba prefix caching)."""
    if mamba_cache_mode not in ("none", "align"):
        raise PlannerError(f"mamba_cache_mode {mamba_cache_mode!r} is not modelled (none, align)")
    if mamba_cache_mode == "align" and version < (0, 20, 0):
        raise PlannerError("mamba_cache_mode 'align' exists from vLLM 0.20 (in the versions read)")
    attention_layers, kind = _attention_and_state_kind(spec, version)
    # FullAttentionSpec(block_size=1, ...).page_size_bytes: K and V of one token of one layer (planner.kv).
    per_token = layer_kv_bytes(attention_layers[0], 1, kv_dtype, spec, tp)
    state, conv_dtype, temporal_dtype = vllm_state_page_bytes(spec, kind, tp, version, mamba_ssm_cache_dtype)
    head_size = attention_layers[0].attention.k_head_dim  # type: ignore[union-attr]
    alignment = _kernel_block_alignment(version, head_size, cuda_capability, block_size)
    attention_block = alignment * ceil_div(state, alignment * per_token)
    log: list[str] = []
    chosen = block_size
    if chosen < attention_block:
        chosen = attention_block
        log.append(
            f"Setting attention block size to {attention_block} tokens to ensure that attention page size "
            "is >= mamba page size."
        )
    page = chosen * per_token
    if page != state:
        log.append(
            f"Padding mamba page size by {100 * (page - state) / state:.2f}% to ensure that mamba page size "
            "and attention page size are exactly equal."
        )
    # MambaSpec.block_size is max_model_len without prefix caching (v0.11.0:gpu_model_runner.py:4127-4133,
    # v0.12.0+: cache_config.mamba_block_size = max_model_len), so every request holds one state block per
    # group (max_memory_usage_bytes: v0.11.0 page_size_bytes; v0.12.0 cdiv(mml, mml) * page; v0.20.0 / v0.26.0
    # mamba_cache_mode "none": 1 + speculative blocks). "align" sets mamba_block_size = block_size
    # (v0.20.0:platforms/interface.py:612-613) and holds 2 + speculative blocks (kv_cache_interface.py).
    align = mamba_cache_mode == "align"
    return HybridPages(
        block_size=chosen,
        attention_bytes_per_token=per_token,
        state_bytes=state,
        page_bytes=page,
        state_block_size=chosen if align else max_model_len,
        state_blocks_per_request=2 if align else 1,
        mamba_cache_mode=mamba_cache_mode,
        alignment=alignment,
        conv_dtype=conv_dtype,
        temporal_dtype=temporal_dtype,
        log_lines=tuple(log),
    )


def _mamba_cache_mode(
    spec: ModelSpec, version: str, ver: Version, enable_prefix_caching: bool | None
) -> tuple[str, str]:
    """(mamba_cache_mode, why): whether prefix caching is on for this hybrid, and what it makes vLLM keep."""
    low, high = HYBRID_PREFIX_CACHING_UNKNOWN
    if enable_prefix_caching is None:
        if low <= ver <= high:
            raise PlannerError(
                f"{spec.name}: vLLM {version}: prefix caching for hybrids is off by default in 0.20 and on "
                "in 0.26; the versions between were not read: say whether it is on (enable_prefix_caching)"
            )
        enable_prefix_caching = ver >= (0, 26, 0)
        why = "the default of this version for hybrids"
    else:
        why = "given"
    # Models with Mamba prefix caching support (SupportsMambaPrefixCaching: Nemotron-H from 0.12; not
    # Qwen3-Next / Qwen3.5) keep the state of every block ("all" from 0.20); the others are switched off
    # (0.12-0.14: MambaModelConfig disables prefix caching) or use "align" (0.20, 0.26).
    mode = "none"
    if enable_prefix_caching and ver < (0, 12, 0):
        why += "; vLLM 0.10-0.11 switch it off for hybrids (models/config.py MambaModelConfig)"
    if enable_prefix_caching and ver >= (0, 12, 0):
        if spec.model_type == "nemotron_h":
            raise PlannerError(
                f"{spec.name}: with prefix caching vLLM keeps Nemotron-H's state per chunk-aligned block "
                "(mamba_cache_mode 'all'), which is not modelled; plan it with prefix caching off "
                "(--no-enable-prefix-caching)"
            )
        if ver >= (0, 20, 0):
            mode = "align"
        else:
            why += "; vLLM switches it off for hybrids without Mamba prefix caching support"
    return mode, why


def hybrid_for_pool(
    spec: ModelSpec,
    *,
    version: str,
    ver: Version,
    engine: str,
    kv_dtype: str,
    tp: int,
    block_size: int,
    max_model_len: int,
    cuda_capability: tuple[int, int] | None,
    mamba_ssm_cache_dtype: str,
    enable_prefix_caching: bool | None,
    hybrid_manager: bool,
    notes: list[str],
) -> HybridPages:
    """vllm_pool's checks and notes around hybrid_pages(): which versions, prefix caching, the cache mode."""
    first = ".".join(map(str, HYBRID_FIRST_VERSION))
    if engine != "V1":
        raise PlannerError(f"{spec.name}: hybrid Mamba/linear-attention models are modelled for V1 only")
    if not HYBRID_FIRST_VERSION <= ver <= HYBRID_LAST_VERSION:
        raise PlannerError(
            f"{spec.name}: vLLM {version}'s KV pages for hybrid Mamba/linear-attention models are not "
            f"modelled (covered: V1 {first} - 0.26.x; 0.33 aligns the block to the prefill checkpoints and "
            "plans the pool anew); pass --vllm-version 0.26.0 or earlier, or plan without --engine vllm"
        )
    if not hybrid_manager:
        # unify_hybrid_kv_cache_specs can only turn sliding-window layers into full attention; with Mamba
        # layers it raises (v0.11.0:kv_cache_utils.py:1096-1147).
        raise PlannerError(f"{spec.name}: vLLM runs Mamba hybrids only with the hybrid KV-cache manager")
    mode, why = _mamba_cache_mode(spec, version, ver, enable_prefix_caching)
    hybrid = hybrid_pages(
        spec,
        version=ver,
        kv_dtype=kv_dtype,
        tp=tp,
        block_size=block_size,
        max_model_len=max_model_len,
        cuda_capability=cuda_capability,
        mamba_ssm_cache_dtype=mamba_ssm_cache_dtype,
        mamba_cache_mode=mode,
    )
    known = [v for v in HYBRID_READ_VERSIONS if parse_version(v) <= ver]
    nearest = max(known, key=parse_version)
    if nearest != ".".join(map(str, ver)):
        notes.append(f"hybrid page rules of vLLM {nearest} (the nearest read version before {version})")
    state = "one state block" if mode == "none" else "two state blocks (mamba_cache_mode align)"
    notes.append(
        f"hybrid: state page {hybrid.state_bytes:,} B (conv {hybrid.conv_dtype}, SSM state "
        f"{hybrid.temporal_dtype}); attention {hybrid.attention_bytes_per_token:,} B/token/layer; block size "
        f"{hybrid.block_size} tokens (multiple of {hybrid.alignment}); page {hybrid.page_bytes:,} B; prefix "
        f"caching {'on' if mode == 'align' else 'off'} ({why}): {state} per request and group"
    )
    if cuda_capability is None and (0, 12, 0) <= ver < (0, 20, 0):
        notes.append("compute capability not given: the 16-token alignment (not Blackwell's 32) is used")
    if ver >= (0, 20, 0):
        notes.append(
            "vLLM >= 0.20 aligns to the attention backend's smallest kernel block size: 16 assumed "
            "(FlashAttention, FlashInfer); a backend preferring larger blocks raises the block size"
        )
    return hybrid
