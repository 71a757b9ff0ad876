"""A model's shape, read from a config.json (or a catalog entry, a checkpoint folder, a HF cache entry).

Everything downstream (parameters, weight bytes, KV cache, plans) is computed from a ModelSpec; this module is
the one place that knows how the config fields of each architecture are spelled. Fields a config leaves
out are taken from transformers' per-architecture defaults (planner/data/transformers_defaults.json) and
listed in ``ModelSpec.assumptions``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from planner import limits
from planner.errors import PlannerError
from planner.units import canonical_dtype

DATA_DIR = pathlib.Path(__file__).resolve().parent / "data"


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


# ----------------------------------------------------------------------------------------------------
# Finding the config


def load_spec(source: str | os.PathLike | Mapping[str, Any], *, allow_download: bool = False) -> ModelSpec:
    """A ModelSpec from a config dict, a config.json path, a checkpoint folder, a catalog name or a repo id
    found in the local Hugging Face cache (downloaded only with allow_download=True)."""
    if isinstance(source, Mapping):
        return spec_from_config(source, name="<config dict>")
    text = os.fspath(source)
    if len(text) > limits.MAX_NAME_CHARS:
        raise PlannerError(
            f"{text[:60]!r}...: a model name of {len(text)} characters, over {limits.bound('MAX_NAME_CHARS')}"
        )
    path = pathlib.Path(text).expanduser()
    kind = _path_kind(path)
    if kind == "dir":
        config_path = path / "config.json"
        if _path_kind(config_path) is None:
            raise PlannerError(f"{path}: a checkpoint folder needs a config.json; none found there")
        return spec_from_config(read_config_file(config_path), name=str(path))
    if kind == "file":
        return spec_from_config(read_config_file(path), name=str(path))

    from planner import catalog  # the catalog loads its JSON lazily, on first use

    entry = catalog.catalog_config(text)
    if entry is not None:
        return spec_from_config(entry, name=text.strip().lower())
    if _looks_like_repo_id(text):
        cached = find_in_hf_cache(text)
        if cached is not None:
            return spec_from_config(read_config_file(cached), name=text)
        if allow_download:
            return spec_from_config(download_config(text), name=text)
        known = catalog.catalog_name_for_repo(text)
        if known is not None:
            # Not cached, but the catalog holds this repo's architecture numbers: use them and say so.
            spec = spec_from_config(catalog.catalog_config(known), name=text)
            note = f"{text} is not in the local HF cache: architecture from the catalog entry {known}"
            return dataclasses.replace(spec, assumptions=(note, *spec.assumptions))
        variant = catalog.catalog_variant_for(text)
        if variant is not None:
            return catalog_variant_spec(text, variant)
        raise PlannerError(
            f"{text!r} is not in the local Hugging Face cache ({hf_hub_cache()}) nor in the catalog: "
            f"`memsight plan {text} --download` fetches only its config.json from the Hub, or give a "
            "config.json path (memsight plan --list searches the catalog)"
        )
    if _looks_like_path(text):
        raise PlannerError(f"{text}: no such file or folder")
    hint = catalog.close_names(text)
    raise PlannerError(
        f"{text!r} is not a config file, a checkpoint folder, a catalog name or an org/name repo id"
        + (
            f"; did you mean {', '.join(hint)}?"
            if hint
            else "; memsight plan --list [PATTERN] searches the catalog"
        )
    )


def catalog_variant_spec(model: str, variant: tuple[str, str]) -> ModelSpec:
    """The spec of a checkpoint the catalog holds only as its base model
    (planner.catalog.catalog_variant_for), with the assumption said."""
    from planner import catalog  # noqa: PLC0415

    name, repo = variant
    spec = spec_from_config(catalog.catalog_config(name), name=model)
    note = (
        f"{model} is not in the local HF cache: architecture from the catalog entry {name} ({repo}), of "
        "which it is a variant: the same shape fields assumed (context length and rope settings may differ)"
    )
    return dataclasses.replace(spec, assumptions=(note, *spec.assumptions))


def _path_kind(path: pathlib.Path) -> str | None:
    """"dir", "file" (anything else that exists: read_config_file refuses FIFOs and devices) or None; a
    name the OS cannot even look up (ENAMETOOLONG, ...) is None: it is then tried as a catalog name."""
    try:
        st = path.stat()
    except (OSError, ValueError):
        return None
    return "dir" if stat.S_ISDIR(st.st_mode) else "file"


def read_config_file(path: pathlib.Path) -> dict[str, Any]:
    """Parse a config.json (a regular file within MAX_CONFIG_BYTES, JSON within the limits); malformed JSON
    is reported with file, line and column."""
    raw = limits.read_regular(path, "MAX_CONFIG_BYTES", PlannerError, "config.json")
    try:
        data = limits.loads_json(raw, finite_only=False)
    except limits.JSONLimitError as exc:
        raise PlannerError(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise PlannerError(f"{path}: a config.json must hold a JSON object, found {type(data).__name__}")
    return data


_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def _looks_like_repo_id(text: str) -> bool:
    return bool(_REPO_ID.match(text)) and not _looks_like_path(text)


_FILE_SUFFIXES = (".json", ".safetensors", ".gguf", ".bin", ".pt", ".pth")


def _looks_like_path(text: str) -> bool:
    """A name the user meant as a file or folder: absolute, relative (./ ../ ~), deeper than org/name, or a
    file name (tiny/config.json)."""
    t = text.strip()
    return (
        t.startswith(("/", "./", "../", "~", ".\\"))
        or t.count("/") > 1
        or "\\" in t
        or t.lower().endswith(_FILE_SUFFIXES)
    )


def hf_hub_cache() -> pathlib.Path:
    """The hub cache folder, resolved as huggingface_hub does: HF_HUB_CACHE, else HF_HOME/hub, else
    XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return pathlib.Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return pathlib.Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = pathlib.Path(xdg).expanduser() if xdg else pathlib.Path.home() / ".cache"
    return base / "huggingface" / "hub"


def find_in_hf_cache(repo_id: str, revision: str = "main") -> pathlib.Path | None:
    """config.json of a repo in the local HF cache (models--org--name/snapshots/<rev>/config.json), or None.

    The revision named by refs/<revision> wins; otherwise the most recently modified snapshot that has one.
    """
    repo_dir = hf_hub_cache() / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo_dir / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo_dir / "refs" / revision
    if ref.is_file():
        commit = ref.read_text(encoding="utf-8").strip()
        candidate = snapshots / commit / "config.json"
        if candidate.is_file():
            return candidate
    found = [p / "config.json" for p in snapshots.iterdir() if (p / "config.json").is_file()]
    if not found:
        return None
    return max(found, key=lambda p: p.stat().st_mtime)


MAX_CONFIG_BYTES = 4 * 2**20  # a config.json is a few KiB; anything this big is not one


def hf_endpoint() -> str:
    """The Hub to download from: $HF_ENDPOINT (as huggingface_hub reads it), else https://huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def download_config(repo_id: str) -> dict[str, Any]:
    """Fetch only config.json of `repo_id` from the Hub (only when asked: allow_download=True, the CLI's
    --download). Every failure is one line that says what to do: no network, no such repo, gated repo."""
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        raise PlannerError(f"{repo_id!r}: not in the local HF cache, and HF_HUB_OFFLINE is set (no download)")
    import socket
    import urllib.error
    import urllib.request

    endpoint = hf_endpoint()
    url = f"{endpoint}/{repo_id}/resolve/main/config.json"
    headers = {"User-Agent": "memsight"}
    token = os.environ.get("HF_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as reply:
            raw = reply.read(MAX_CONFIG_BYTES + 1)
    except urllib.error.HTTPError as exc:
        why = {
            401: "the repo is gated or private: accept its license on the Hub and set HF_TOKEN",
            403: "the repo is gated or private: accept its license on the Hub and set HF_TOKEN",
            404: "no such repo, or it has no config.json",
        }.get(exc.code, f"the Hub answered HTTP {exc.code} {exc.reason}")
        raise PlannerError(f"{repo_id!r}: cannot download {url}: {why}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, socket.gaierror | ConnectionError | TimeoutError | socket.timeout):
            raise PlannerError(
                f"{repo_id!r}: no network to {endpoint} ({reason}); download config.json on a machine that "
                "has one and give its path"
            ) from exc
        raise PlannerError(f"{repo_id!r}: cannot download {url}: {reason}") from exc
    if len(raw) > MAX_CONFIG_BYTES:
        raise PlannerError(f"{url}: over {MAX_CONFIG_BYTES // 2**20} MiB, not a config.json")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise PlannerError(f"{url}: not UTF-8 text, so not a config.json") from exc
    except json.JSONDecodeError as exc:
        raise PlannerError(f"{url}: malformed JSON at line {exc.lineno}, column {exc.colno}") from exc
    if not isinstance(data, dict):
        raise PlannerError(f"{url}: not a JSON object")
    return data


# ----------------------------------------------------------------------------------------------------
# transformers' defaults


@functools.cache
def _transformers_defaults() -> Mapping[str, Any]:
    with open(DATA_DIR / "transformers_defaults.json", encoding="utf-8") as fh:
        return json.load(fh)


def supported_model_types() -> list[str]:
    """Decoder model_types this planner can count (plus wrappers that hold one under text_config)."""
    return sorted(_transformers_defaults()["model_types"])


class _Fields:
    """Reads config fields, falling back to transformers' defaults for the model_type (noting each)."""

    def __init__(self, raw: Mapping[str, Any], model_type: str, name: str) -> None:
        data = _transformers_defaults()
        entry = data["model_types"][model_type]
        self.raw = raw
        self.name = name
        self.defaults: Mapping[str, Any] = entry["defaults"]
        # attribute_map: the class's alias -> canonical name (Mixtral: num_experts -> num_local_experts)
        self.aliases: Mapping[str, str] = entry["attribute_map"]
        self.origin = f"transformers {data['transformers_version']} {entry['class']}"
        self.assumptions: list[str] = []

    def has(self, key: str) -> bool:
        return self._raw_key(key) is not None

    def _raw_key(self, key: str) -> str | None:
        if key in self.raw:
            return key
        for alias, target in self.aliases.items():
            if target == key and alias in self.raw:
                return alias
            if alias == key and target in self.raw:
                return target
        return None

    def get(self, key: str, fallback: Any = None) -> Any:
        raw_key = self._raw_key(key)
        if raw_key is not None:
            return self.raw[raw_key]
        canonical = self.aliases.get(key, key)
        for candidate in (key, canonical):
            if candidate in self.defaults:
                value = self.defaults[candidate]
                if value is not None:
                    self.assumptions.append(f"{key} not in config: {value!r} ({self.origin} default)")
                return value
        return fallback

    def int(self, key: str, *, minimum: int = 1) -> int:
        value = self.get(key)
        if value is None:
            raise PlannerError(f"{self.name}: config field {key!r} is missing and has no default")
        return self._check_int(key, value, minimum)

    def opt_int(self, key: str, *, minimum: int = 0) -> int | None:
        value = self.get(key)
        return None if value is None else self._check_int(key, value, minimum)

    def _check_int(self, key: str, value: Any, minimum: int) -> int:
        return config_int(self.name, key, value, minimum)

    def bool(self, key: str, fallback: bool = False) -> bool:
        value = self.get(key, fallback)
        if value is None:
            return fallback
        if not isinstance(value, bool):
            raise PlannerError(f"{self.name}: config field {key!r} must be true or false, found {value!r}")
        return value

    def note(self, text: str) -> None:
        self.assumptions.append(text)


def config_int(name: str, key: str, value: Any, minimum: int) -> int:
    """An integer config field within [minimum, its plausible bound] (planner/limits.py names the bound)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        shown = repr(value) if not isinstance(value, int) or value.bit_length() < 200 else "a huge integer"
        raise PlannerError(
            f"{name}: config field {key!r} must be an integer >= {minimum}, found {shown[:80]}"
        )
    limit = limits.config_int_limit(key)
    if value > getattr(limits, limit):
        shown = str(value) if value.bit_length() < 200 else f"an integer of {value.bit_length()} bits"
        raise PlannerError(
            f"{name}: config field {key!r} is {shown}, over {limits.bound(limit)}: not a plausible model"
        )
    return value


# ----------------------------------------------------------------------------------------------------
# Config -> ModelSpec

_HYBRID_FAMILIES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")


def spec_from_config(config: Mapping[str, Any], *, name: str) -> ModelSpec:
    """Build a ModelSpec from a parsed config (multimodal wrappers are unwrapped to their text_config)."""
    if not isinstance(config, Mapping):
        raise PlannerError(f"{name}: a config must be a JSON object, found {type(config).__name__}")
    decoder, model_type, wrapper_notes = _unwrap(config, name)
    f = _Fields(decoder, model_type, name)
    for note in wrapper_notes:
        f.note(note)

    hidden, heads, num_layers, vocab, inner, max_pos = _sizes(f, model_type)
    kv_heads = _kv_heads(f, heads, name)
    head_dim = _head_dim(f, model_type, hidden, heads)
    dtype = _weight_dtype(config, decoder, name, f)
    quant = _quantization(config, decoder, name)
    tie = _tied_embeddings(config, decoder, f, model_type)

    if model_type == "gpt2":
        return _gpt2(f, config, decoder, name, hidden, heads, num_layers, vocab, inner, max_pos, head_dim,
                     tie, dtype, quant)  # fmt: skip

    if model_type == "nemotron_h":
        return _nemotron_h(f, config, decoder, name, hidden, heads, kv_heads, head_dim, vocab, tie, dtype,
                           quant, max_pos)  # fmt: skip

    layers, inner, shapes, num_experts, top_k = _decoder_layers(
        f, decoder, name, model_type, num_layers, heads, kv_heads, head_dim, dtype
    )
    _note_mtp_layers(f, decoder)
    return _finish(f, config, decoder, name, model_type, hidden, inner, vocab, num_layers, heads,
                   tuple(layers), tie, dtype, quant, max_pos, shapes, num_experts=num_experts,
                   top_k=top_k)  # fmt: skip


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


def _kv_heads(f: _Fields, heads: int, name: str) -> int:
    """num_key_value_heads (multi-head attention where absent), a divisor of the attention heads."""
    kv_heads = f.opt_int("num_key_value_heads", minimum=1)
    if kv_heads is None:
        kv_heads = heads
    if heads % kv_heads:
        raise PlannerError(
            f"{name}: num_attention_heads ({heads}) is not a multiple of num_key_value_heads ({kv_heads})"
        )
    return kv_heads


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


def _sizes(f: _Fields, model_type: str) -> tuple[int, int, int, int, int, int | None]:
    """hidden, heads, layers, vocab, GPT-2's MLP width (0 elsewhere: per layer kind later) and the maximum
    position, under each family's own key names."""
    if model_type == "gpt2":
        hidden, heads = f.int("n_embd"), f.int("n_head")
        inner = f.opt_int("n_inner", minimum=1)
        if inner is None:
            inner = 4 * hidden
            f.note("n_inner not set: 4 * n_embd (GPT2Config rule)")
        return hidden, heads, f.int("n_layer"), f.int("vocab_size"), inner, f.int("n_positions")
    hidden, heads = f.int("hidden_size"), f.int("num_attention_heads")
    vocab = f.int("vocab_size")
    max_pos = f.opt_int("max_position_embeddings", minimum=1)
    num_layers = 0 if model_type == "nemotron_h" else f.int("num_hidden_layers")
    return hidden, heads, num_layers, vocab, 0, max_pos


def _tied_embeddings(
    config: Mapping[str, Any], decoder: Mapping[str, Any], f: _Fields, model_type: str
) -> bool:
    if "tie_word_embeddings" not in decoder and isinstance(config.get("tie_word_embeddings"), bool):
        return config["tie_word_embeddings"]  # multimodal wrappers keep it at the top level
    return f.bool("tie_word_embeddings", fallback=model_type == "gpt2")


def _note_mtp_layers(f: _Fields, decoder: Mapping[str, Any]) -> None:
    for key in ("mtp_num_hidden_layers", "num_nextn_predict_layers"):
        extra = decoder.get(key)
        if isinstance(extra, int) and extra > 0:
            f.note(f"{key}={extra}: the multi-token-prediction layer(s) are not counted (transformers does "
                   "not build them; vLLM loads them only for speculative decoding)")  # fmt: skip


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


def _finish(
    f: _Fields, config: Mapping[str, Any], decoder: Mapping[str, Any], name: str, model_type: str,
    hidden: int, inner: int, vocab: int, num_layers: int, heads: int, layers: tuple[LayerSpec, ...],
    tie: bool, dtype: str,
    quant: QuantSpec | None, max_pos: int | None, shapes: ArchShapes, *, num_experts: int = 0, top_k: int = 0,
) -> ModelSpec:  # fmt: skip
    if quant is not None:
        default_format = quant.method
    else:
        default_format = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(dtype)
        if default_format is None:
            raise PlannerError(f"{name}: torch_dtype {dtype!r} is not a weight dtype the planner knows")
    return ModelSpec(
        name=name,
        model_type=model_type,
        hidden_size=hidden,
        intermediate_size=inner,
        vocab_size=vocab,
        num_layers=num_layers,
        num_attention_heads=heads,
        layers=layers,
        tie_word_embeddings=tie,
        torch_dtype=dtype,
        default_format=default_format,
        max_position_embeddings=max_pos,
        num_experts=num_experts,
        experts_per_token=top_k,
        assumptions=tuple(dict.fromkeys(f.assumptions)),
        shapes=shapes,
        quantization=quant,
        config=MappingProxyType(dict(decoder)),
    )


def _unwrap(config: Mapping[str, Any], name: str) -> tuple[Mapping[str, Any], str, list[str]]:
    """The decoder config and its model_type; multimodal checkpoints keep the decoder under text_config."""
    data = _transformers_defaults()
    known = data["model_types"]
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):  # a list is unhashable (fuzz suite)
        raise PlannerError(
            f"{name}: config field 'model_type' must be a string, found {str(model_type)[:40]}"
        )
    notes: list[str] = []
    decoder = config
    text_config = config.get("text_config")
    if isinstance(text_config, Mapping) and (model_type not in known):
        decoder = text_config
        inner = text_config.get("model_type")
        if not isinstance(inner, str):
            inner = data["text_config_model_types"].get(model_type) if isinstance(model_type, str) else None
        if not isinstance(inner, str):
            raise PlannerError(
                f"{name}: text_config has no 'model_type', so the decoder architecture is unknown"
            )
        notes.append(f"multimodal config ({model_type}): only the text decoder under text_config is counted")
        model_type = inner
    elif text_config is not None and not isinstance(text_config, Mapping):
        raise PlannerError(f"{name}: config field 'text_config' must be an object, found {text_config!r}")
    if not isinstance(model_type, str):
        raise PlannerError(f"{name}: config has no 'model_type' string, so the architecture is unknown")
    if model_type not in known:
        raise PlannerError(
            f"{name}: unsupported model_type {model_type!r}; supported: {', '.join(supported_model_types())} "
            "(and multimodal configs whose text_config is one of these)"
        )
    return decoder, model_type, notes


def _head_dim(f: _Fields, model_type: str, hidden: int, heads: int) -> int:
    # Nemotron-H configs written before transformers 5 spell it attention_head_dim.
    key = "attention_head_dim" if model_type == "nemotron_h" and f.has("attention_head_dim") else "head_dim"
    value = f.get(key)
    if value is None:
        if hidden % heads:
            raise PlannerError(
                f"{f.name}: head_dim is not set and hidden_size ({hidden}) is not a multiple of "
                f"num_attention_heads ({heads})"
            )
        if model_type not in ("gpt2", "deepseek_v2", "deepseek_v3"):  # MLA sizes its heads itself
            f.note("head_dim not in config: hidden_size / num_attention_heads (transformers' rule)")
        return hidden // heads
    return f._check_int(key, value, 1)


def _weight_dtype(config: Mapping[str, Any], decoder: Mapping[str, Any], name: str, f: _Fields) -> str:
    for source in (decoder, config):
        for key in ("torch_dtype", "dtype"):
            value = source.get(key)
            if value is not None:
                try:
                    return canonical_dtype(value)
                except ValueError:
                    raise PlannerError(f"{name}: config field {key!r}: unknown dtype {value!r}") from None
    if "quantization_config" in decoder or "quantization_config" in config:
        # Quantized checkpoints keep their unquantized tensors (embeddings, norms, ...) in bf16 in practice.
        f.note("no torch_dtype/dtype in a quantized config: bfloat16 for unquantized tensors and activations")
        return "bfloat16"
    f.note("no torch_dtype/dtype in config: float32 (what transformers loads when the config names none)")
    return "float32"


def _state_dtype(decoder: Mapping[str, Any], f: _Fields) -> str:
    for key in ("mamba_ssm_dtype", "mamba_ssm_cache_dtype"):
        value = decoder.get(key)
        if value is not None:
            try:
                return canonical_dtype(value)
            except ValueError:
                raise PlannerError(f"{f.name}: config field {key!r} has an unknown dtype {value!r}") from None
    return "float32"  # transformers keeps the recurrent state in fp32


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


def _mla(f: _Fields) -> MLAShapes:
    q_lora = f.opt_int("q_lora_rank", minimum=1)
    return MLAShapes(
        q_lora_rank=q_lora or 0,
        kv_lora_rank=f.int("kv_lora_rank"),
        qk_nope_head_dim=f.int("qk_nope_head_dim"),
        qk_rope_head_dim=f.int("qk_rope_head_dim"),
        v_head_dim=f.int("v_head_dim"),
    )


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


# ----------------------------------------------------------------------------------------------------
# quantization_config


def _quantization(config: Mapping[str, Any], decoder: Mapping[str, Any], name: str) -> QuantSpec | None:
    """The quantization_config (the decoder's wins over a wrapper's) by its method, each read by a helper of
    its own; a method that is not priced is refused, never taken for 16-bit weights."""
    qc = decoder.get("quantization_config", config.get("quantization_config"))
    if qc is None:
        return None
    if not isinstance(qc, Mapping):
        raise PlannerError(f"{name}: config field 'quantization_config' must be an object")
    method = str(qc.get("quant_method", "")).lower()
    skip = _modules_kept(qc, name)
    if method == "fp8":
        return _fp8(qc, skip, name)
    if method == "mxfp4":
        return QuantSpec("mxfp4", 4, group_size=32, modules_to_not_convert=skip)
    if method in ("awq", "gptq"):
        return _awq_gptq(qc, method, skip, name)
    if method == "modelopt":
        return _modelopt(qc, skip, name)
    if method == "compressed-tensors":
        return _compressed_tensors(qc, skip, name)
    if method == "bitsandbytes" and qc.get("load_in_4bit"):
        return _bitsandbytes_4bit(qc, skip, name)
    raise PlannerError(
        f"{name}: quantization_config.quant_method {method or None!r} is not modelled; "
        "known: fp8, mxfp4, awq, gptq, modelopt (FP8/NVFP4), compressed-tensors (fp8/int8/nvfp4/int4 "
        "groups), "
        "bitsandbytes 4-bit"
    )


def _modules_kept(qc: Mapping[str, Any], name: str) -> tuple[str, ...]:
    """The module patterns a checkpoint keeps unquantized, under whichever of the three names its tool
    writes; read before the method, so a malformed list is refused whatever the method."""
    skip = qc.get("modules_to_not_convert") or qc.get("ignored_layers") or qc.get("ignore") or ()
    if not isinstance(skip, Sequence) or isinstance(skip, str):
        raise PlannerError(f"{name}: quantization_config.modules_to_not_convert must be a list of names")
    return tuple(str(s) for s in skip)


def _fp8(qc: Mapping[str, Any], skip: tuple[str, ...], name: str) -> QuantSpec:
    """Per-tensor fp8, or block-scaled fp8 when the config gives weight_block_size: the scales' bytes
    differ, so a malformed block shape is refused rather than read as per-tensor."""
    block = qc.get("weight_block_size")
    if block is None:
        return QuantSpec("fp8", 8, modules_to_not_convert=skip)
    if (
        not isinstance(block, Sequence)
        or len(block) != 2
        or not all(isinstance(b, int) and 0 < b <= limits.MAX_CONFIG_INT for b in block)
    ):
        raise PlannerError(f"{name}: quantization_config.weight_block_size must be [rows, cols]")
    return QuantSpec("fp8_block", 8, block_size=(block[0], block[1]), modules_to_not_convert=skip)


def _awq_gptq(qc: Mapping[str, Any], method: str, skip: tuple[str, ...], name: str) -> QuantSpec:
    """4-bit AWQ / GPTQ: AutoAWQ writes w_bit / q_group_size where GPTQ writes bits / group_size, and only
    grouped 4-bit packing is priced (per-channel scales, other widths are refused, not guessed)."""

    def need_int(key: str, default: int | None = None) -> int:
        value = qc.get(key, default)
        return config_int(name, f"quantization_config.{key}", value, 1)

    bits = need_int("bits", 4) if "bits" in qc else need_int("w_bit", 4)
    group = qc.get("group_size", qc.get("q_group_size", 128))
    if group == -1:
        raise PlannerError(
            f"{name}: quantization_config.group_size -1 (one scale per output channel) is not modelled"
        )
    group = config_int(name, "quantization_config.group_size", group, 1)
    if bits != 4:
        raise PlannerError(f"{name}: quantization_config.bits={bits}: only 4-bit {method} is modelled")
    # GPTQ checkpoints store qzeros even when symmetric; AWQ only with zero_point (the default).
    zero = bool(qc.get("zero_point", True)) if method == "awq" else True
    return QuantSpec(method, bits, group_size=group, modules_to_not_convert=skip, zero_point=zero,
                     desc_act=bool(qc.get("desc_act", False)))  # fmt: skip


def _modelopt(qc: Mapping[str, Any], skip: tuple[str, ...], name: str) -> QuantSpec:
    """NVIDIA ModelOpt names its scheme in quant_algo, not quant_method: FP8 and NVFP4 are priced."""
    algo = str(qc.get("quant_algo", "")).upper()
    if algo == "FP8":
        return QuantSpec("fp8", 8, modules_to_not_convert=skip)
    if algo == "NVFP4":
        return QuantSpec("nvfp4", 4, group_size=16, modules_to_not_convert=skip)
    raise PlannerError(f"{name}: quantization_config.quant_algo {algo!r} (modelopt) is not modelled")


def _bitsandbytes_4bit(qc: Mapping[str, Any], skip: tuple[str, ...], name: str) -> QuantSpec:
    """bitsandbytes 4-bit (nf4 / fp4): the layers it leaves in 16 bit and its block size set the bytes."""
    # llm_int8_skip_modules: the layers a checkpoint keeps in 16 bit (Unsloth's dynamic 4-bit lists some)
    kept = qc.get("llm_int8_skip_modules") or ()
    if not isinstance(kept, Sequence) or isinstance(kept, str):
        raise PlannerError(f"{name}: quantization_config.llm_int8_skip_modules must be a list of names")
    quant_type = str(qc.get("bnb_4bit_quant_type", "fp4")).lower()  # bitsandbytes' own default is fp4
    if quant_type not in ("nf4", "fp4"):
        raise PlannerError(f"{name}: quantization_config.bnb_4bit_quant_type {quant_type!r} is not nf4/fp4")
    block = qc.get("bnb_4bit_blocksize", 64)
    if isinstance(block, bool) or not isinstance(block, int) or block <= 0:
        raise PlannerError(f"{name}: quantization_config.bnb_4bit_blocksize must be a positive integer")
    return QuantSpec(f"bnb_{quant_type}", 4, group_size=block,
                     modules_to_not_convert=(*skip, *(str(k) for k in kept)))  # fmt: skip


def _compressed_tensors(qc: Mapping[str, Any], skip: tuple[str, ...], name: str) -> QuantSpec:
    groups = qc.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise PlannerError(f"{name}: quantization_config.config_groups (compressed-tensors) is missing")
    weights = [g.get("weights") for g in groups.values() if isinstance(g, Mapping)]
    if not weights or not all(isinstance(w, Mapping) for w in weights):
        raise PlannerError(f"{name}: quantization_config.config_groups.*.weights is missing")
    w = weights[0]
    if any(other != w for other in weights[1:]):
        raise PlannerError(f"{name}: compressed-tensors with several weight schemes is not modelled")
    bits, kind, strategy = w.get("num_bits"), w.get("type"), w.get("strategy")
    if bits == 8 and kind == "float":
        block = w.get("block_structure")
        if strategy == "block" and isinstance(block, Sequence) and len(block) == 2:
            rows = config_int(name, "quantization_config block_structure[0]", block[0], 1)
            cols = config_int(name, "quantization_config block_structure[1]", block[1], 1)
            return QuantSpec("fp8_block", 8, block_size=(rows, cols), modules_to_not_convert=skip)
        return QuantSpec("fp8", 8, modules_to_not_convert=skip)
    if bits == 8 and kind == "int":
        return QuantSpec("int8", 8, modules_to_not_convert=skip)
    if bits == 4 and kind == "float" and w.get("group_size") == 16:
        return QuantSpec("nvfp4", 4, group_size=16, modules_to_not_convert=skip)
    if bits == 4 and kind == "int" and strategy == "group":
        group = config_int(name, "compressed-tensors group_size", w.get("group_size"), 1)
        return QuantSpec("gptq", 4, group_size=group, modules_to_not_convert=skip,
                         zero_point=not bool(w.get("symmetric", True)))  # fmt: skip
    raise PlannerError(
        f"{name}: compressed-tensors weights num_bits={bits} type={kind} strategy={strategy} is not modelled"
    )
