"""The vision encoder of a vision-language checkpoint as vLLM holds and profiles it: its weights (from the
config's vision_config) and the PyTorch peak of the encoder's share of the profile run. Stdlib only.

Read in the vLLM 0.24.0 release sdist (vllm-0.24.0.tar.gz from PyPI, unpacked):
* the tower: vllm/model_executor/models/qwen3_vl.py:348-560 (Qwen3_VisionPatchEmbed: Conv3d with bias;
  Qwen3_VisionBlock: two LayerNorms, Qwen2_5_VisionAttention qkv + proj with biases (qwen2_5_vl.py:371-386),
  Qwen3_VisionMLP fc1/fc2 with biases; learned pos_embed [num_position_embeddings, hidden]; the merger:
  LayerNorm, fc1 [4h, 4h], fc2 [4h, out_hidden] with biases, one more merger per deepstack index), used by
  Qwen3-VL, Qwen3-VL-MoE and Qwen3.5 / Qwen3.5-MoE (qwen3_5.py:588, 802);
* the profile run: v1/worker/gpu_model_runner.py:6239-6312 profile_run: the encoder runs first on
  mm_max_items_per_batch dummy items of the modality with the most tokens; its outputs are kept in the
  encoder cache while the decoder's dummy run and the sampler run; multimodal/encoder_budget.py:44-189 and
  v1/core/encoder_cache_manager.py:269-314 (budget = max(max_num_encoder_input_tokens, tokens of one item),
  items = max(1, min(budget // tokens per item, max_num_seqs x items per prompt)));
* the largest image: models/qwen2_vl.py:965-1027 get_image_size_with_most_features / get_max_image_tokens:
  max_pixels // (patch x merge)^2 merged tokens, max_pixels from the checkpoint's preprocessor_config.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planner.errors import PlannerError

BF16 = 2
FP32 = 4
# The published preprocessor_config.json of the Qwen3-VL / Qwen3.5 / Qwen3.6 checkpoints: "size":
# {"longest_edge": 16777216, "shortest_edge": 65536} (4096 x 4096 pixels; quoted in public repositories for
# Qwen/Qwen3.5-2B-Base and Qwen/Qwen3.6-35B-A3B-FP8). preprocessor_config.json is not part of config.json,
# so this is an assumption the caller can replace (max_pixels).
QWEN3_VL_MAX_PIXELS = 16_777_216
QWEN3_VL_FAMILY = frozenset({"qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"})


@dataclass(frozen=True, slots=True)
class VisionTower:
    """A Qwen3-VL-style vision tower's sizes, from vision_config."""

    depth: int
    hidden: int
    intermediate: int
    heads: int
    patch: int
    temporal_patch: int
    in_channels: int
    positions: int
    out_hidden: int
    merge: int
    deepstack: int

    @property
    def patch_elements(self) -> int:
        """Values of one flattened patch (the pixel_values row): channels x temporal x patch x patch."""
        return self.in_channels * self.temporal_patch * self.patch * self.patch

    @property
    def merged_hidden(self) -> int:
        return self.hidden * self.merge * self.merge


def vision_tower(config: Mapping[str, Any]) -> VisionTower | None:
    """The vision tower of a full (multimodal) config.json, or None when it has none. Raises for a
    vision_config of a family whose tower is not modelled."""
    vision = config.get("vision_config")
    if not isinstance(vision, Mapping):
        return None
    family = str(config.get("model_type", ""))
    if family not in QWEN3_VL_FAMILY:
        raise PlannerError(
            f"the vision tower of model_type {family!r} is not modelled (only the Qwen3-VL family: "
            f"{', '.join(sorted(QWEN3_VL_FAMILY))})"
        )

    def field(name: str, default: int | None = None) -> int:
        value = vision.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PlannerError(f"vision_config.{name} must be a positive integer, got {value!r}")
        return value

    deepstack = vision.get("deepstack_visual_indexes") or []
    if not isinstance(deepstack, list):
        raise PlannerError(f"vision_config.deepstack_visual_indexes must be a list, got {deepstack!r}")
    tower = VisionTower(
        depth=field("depth"),
        hidden=field("hidden_size"),
        intermediate=field("intermediate_size"),
        heads=field("num_heads"),
        patch=field("patch_size"),
        temporal_patch=field("temporal_patch_size", 2),
        in_channels=field("in_channels", 3),
        positions=field("num_position_embeddings"),
        out_hidden=field("out_hidden_size"),
        merge=field("spatial_merge_size", 2),
        deepstack=len(deepstack),
    )
    if tower.hidden % tower.heads:
        raise PlannerError(
            f"vision_config.hidden_size {tower.hidden} is not divisible by num_heads {tower.heads}"
        )
    return tower


def vision_weight_bytes(tower: VisionTower, bytes_per_value: int = BF16) -> int:
    """The tower's parameters x bytes (bf16: the published quantized checkpoints of this family keep the
    vision tower unquantized). Counted as vLLM 0.24.0 creates them (qwen3_vl.py:348-560)."""
    d, i = tower.hidden, tower.intermediate
    patch_embed = tower.patch_elements * d + d  # Conv3d weight + bias
    pos_embed = tower.positions * d
    block = (
        4 * d  # norm1, norm2: LayerNorm weight + bias
        + d * 3 * d
        + 3 * d  # attn.qkv
        + d * d
        + d  # attn.proj
        + d * i
        + i  # mlp.linear_fc1
        + i * d
        + d  # mlp.linear_fc2
    )
    m = tower.merged_hidden

    def merger(norm_width: int) -> int:
        return 2 * norm_width + m * m + m + m * tower.out_hidden + tower.out_hidden

    mergers = merger(d) + tower.deepstack * merger(m)  # deepstack mergers norm after the shuffle (4h)
    return (patch_embed + pos_embed + tower.depth * block + mergers) * bytes_per_value


@dataclass(frozen=True, slots=True)
class EncoderProfile:
    """The encoder's share of vLLM's profile run (one rank, bytes)."""

    items: int  # dummy images
    tokens_per_item: int  # merged tokens per image (what the decoder sees)
    patches: int  # patches through the tower, all items
    peak_bytes: int  # PyTorch peak while the tower runs
    output_bytes: int  # the encoder outputs kept while the decoder's dummy run follows
    terms: tuple[str, ...]


def max_image_tokens(tower: VisionTower, max_pixels: int = QWEN3_VL_MAX_PIXELS) -> int:
    """qwen2_vl.py:965-1027: max_pixels // (patch x merge)^2, lowered until an aspect ratio <= 200 fits."""
    unit = tower.patch * tower.merge
    seq = max_pixels // (unit * unit)
    for n in range(seq, 0, -1):
        low = max(d for d in range(1, int(n**0.5) + 1) if n % d == 0)
        if (n // low) / low <= 200:
            return n
    return 1


def encoder_profile(
    tower: VisionTower,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    images_per_prompt: int,
    max_model_len: int,
    chunked_prefill: bool = True,
    max_pixels: int = QWEN3_VL_MAX_PIXELS,
) -> EncoderProfile:
    """The PyTorch peak of the encoder's dummy run, PREDICTED from vLLM 0.24.0's code (eager tower).

    Alive at the tower's worst moment (inside a block):
    * pixel_values as the processor gives them (fp32) and their bf16 copy (_process_image_input casts to
      the tower's dtype): patches x patch_elements x (4 + 2);
    * the position embeddings and the rotary cos/sin kept in the encoder metadata: patches x hidden x 2 and
      patches x (head_dim / 2) x 2 x 2;
    * in the block, the larger of two steps, bf16: the MLP after its activation (the residual stream,
      norm2's output, fc1's output and the activation: 2 x hidden + 2 x intermediate), and the attention call
      (v0.24.0 models/qwen3_vl.py:455 and qwen2_5_vl.py:410-443: the residual stream, norm1's output, the
      qkv projection (3 x hidden), the contiguous q/k copy and its rotated copy (2 + 2 x hidden;
      vllm_flash_attn's apply_rotary_emb is not in place, layers/rotary_embedding/common.py:229-247) and the
      attention output: 10 x hidden).
    The outputs (tokens x out_hidden x (1 + deepstack), bf16) stay in the encoder cache during the decoder's
    dummy run."""
    if images_per_prompt < 1:
        raise PlannerError(
            "the encoder is profiled only when images are allowed (limit_mm_per_prompt image >= 1)"
        )
    tokens = max_image_tokens(tower, max_pixels)
    budget = max(max_num_batched_tokens, tokens)  # encoder_cache_manager.py:309-314
    per_prompt = max(1, min(images_per_prompt, max_model_len // tokens))
    requests = max_num_seqs if chunked_prefill else min(max_num_seqs, max_num_batched_tokens // tokens)
    items = max(1, min(budget // tokens, requests * per_prompt))  # encoder_budget.py:140-180
    patches = items * tokens * tower.merge * tower.merge
    d, i = tower.hidden, tower.intermediate
    pixels = patches * tower.patch_elements * (FP32 + BF16)
    positions = patches * d * BF16
    rotary = patches * (d // tower.heads // 2) * 2 * BF16
    mlp_step, attention_step = 2 * d + 2 * i, 10 * d
    block = patches * max(mlp_step, attention_step) * BF16
    step = "the MLP activation (2h + 2I)" if mlp_step >= attention_step else "the attention call (10h)"
    peak = pixels + positions + rotary + block
    output = items * tokens * tower.out_hidden * (1 + tower.deepstack) * BF16
    terms = (
        f"encoder profile: {items} dummy image(s) of {tokens:,} tokens ({max_pixels:,} px max, "
        f"{patches:,} patches); budget max({max_num_batched_tokens}, {tokens}) = {budget}",
        f"pixel_values fp32 + bf16 copy {pixels:,} B; pos embeds {positions:,} B; "
        f"rotary cos/sin {rotary:,} B; block at {step} {block:,} B -> peak {peak:,} B",
        f"encoder outputs kept for the decoder's dummy run: {output:,} B",
    )
    return EncoderProfile(items, tokens, patches, peak, output, terms)


def full_config(model_id: str) -> dict[str, Any] | None:
    """The whole config.json (vision_config included) of a config path, a checkpoint folder or a repo in the
    local Hugging Face cache; None for catalog names (the catalog keeps the text decoder only)."""
    import pathlib  # noqa: PLC0415

    from planner.spec import _looks_like_repo_id, _path_kind, find_in_hf_cache, read_config_file  # noqa: PLC0415

    path = pathlib.Path(model_id).expanduser()
    kind = _path_kind(path)
    if kind == "dir":
        return read_config_file(path / "config.json")
    if kind == "file":
        return read_config_file(path)
    if _looks_like_repo_id(model_id):
        cached = find_in_hf_cache(model_id)
        if cached is not None:
            return read_config_file(cached)
    return None


def images_per_prompt(limit_text: str | None) -> tuple[int, str]:
    """limit_mm_per_prompt's image count from the engine args ({'image': 2, ...}); vLLM's default allows 999
    per modality (v0.24.0:config/multimodal.py get_limit_per_prompt)."""
    import ast  # noqa: PLC0415

    if not limit_text:
        return 999, "limit_mm_per_prompt not set: 999 images per prompt (vLLM's default)"
    try:
        value = ast.literal_eval(limit_text)
    except (ValueError, SyntaxError):
        raise PlannerError(f"cannot read limit_mm_per_prompt {limit_text!r}") from None
    if not isinstance(value, dict):
        raise PlannerError(f"limit_mm_per_prompt must be a mapping, got {limit_text!r}")
    image = value.get("image", 999)
    if isinstance(image, dict):  # the newer {'image': {'count': 2, 'width': ...}} form
        image = image.get("count", 999)
    if isinstance(image, bool) or not isinstance(image, int) or image < 0:
        raise PlannerError(f"limit_mm_per_prompt image count must be a whole number, got {image!r}")
    return image, f"limit_mm_per_prompt image={image} (engine args)"
