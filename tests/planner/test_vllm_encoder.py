"""The vision tower of a vision-language checkpoint as vLLM 0.24.0 holds and profiles it
(planner/vllm_encoder.py), in exact bytes from the published Qwen3.5-35B-A3B config's vision_config."""

from __future__ import annotations

import json

import pytest

from planner.catalog import catalog_multimodal_config
from planner.engines.vllm.encoder import (
    encoder_profile,
    full_config,
    images_per_prompt,
    max_image_tokens,
    plain_vision_tower,
    plain_vision_weight_bytes,
    vision_tower,
    vision_weight_bytes,
)
from planner.errors import PlannerError
from tests.conftest import REPO_ROOT

CONFIG = REPO_ROOT / "tests" / "data" / "vllm_logs" / "configs" / "Qwen3.5-35B-A3B.json"


def tower():
    found = vision_tower(json.loads(CONFIG.read_text(encoding="utf-8")))
    assert found is not None
    return found


def test_vision_tower_weights_exact():
    t = tower()  # depth 27, hidden 1152, intermediate 4304, patch 16x16x2, 2304 positions, out 2048
    d, i = 1152, 4304
    patch_embed = 3 * 2 * 16 * 16 * d + d
    block = 4 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * i + i) + (i * d + d)
    merger = 2 * d + 4608 * 4608 + 4608 + 4608 * 2048 + 2048
    params = patch_embed + 2304 * d + 27 * block + merger
    assert vision_weight_bytes(t) == 2 * params == 893_142_496


def test_encoder_profile_exact():
    t = tower()
    assert max_image_tokens(t) == 16_384  # 16,777,216 px / (16 x 2)^2
    p = encoder_profile(
        t, max_num_batched_tokens=8192, max_num_seqs=1, images_per_prompt=2, max_model_len=131072
    )
    assert (p.items, p.tokens_per_item, p.patches) == (1, 16_384, 65_536)
    patches, d, i = 65_536, 1152, 4304
    # the block's worst step is the attention call (10h = 11,520 per patch) above the MLP's 2h + 2I = 10,912
    assert 10 * d > 2 * d + 2 * i
    expected = patches * 1536 * (4 + 2) + patches * d * 2 + patches * 36 * 2 * 2 + patches * 10 * d * 2
    assert p.peak_bytes == expected == 2_274_361_344
    assert "the attention call (10h)" in p.terms[1]
    assert p.output_bytes == 16_384 * 2048 * 2
    # a smaller image (max_pixels from a preprocessor_config): budget max(8192, 1024) // 1024 = 8 images, but
    # one request x 2 images per prompt allows only 2
    small = encoder_profile(
        t, max_num_batched_tokens=8192, max_num_seqs=1, images_per_prompt=2, max_model_len=131072,
        max_pixels=1024 * 1024,
    )  # fmt: skip
    assert (small.tokens_per_item, small.items) == (1024, 2) and small.peak_bytes == expected // 8


def test_encoder_budget_fits_more_small_images():
    t = tower()
    p = encoder_profile(
        t, max_num_batched_tokens=8192, max_num_seqs=256, images_per_prompt=999, max_model_len=8192,
        max_pixels=1024 * 1024,
    )  # fmt: skip
    assert p.items == 8  # budget max(8192, 1024) // 1024 tokens; 256 requests x 8 images per prompt allow it


def test_limits_and_bad_input():
    assert images_per_prompt("{'image': 2, 'audio': 0}")[0] == 2
    assert images_per_prompt(None)[0] == 999
    assert images_per_prompt("{'image': {'count': 3}}")[0] == 3
    with pytest.raises(PlannerError, match="cannot read limit_mm_per_prompt"):
        images_per_prompt("{image: 2")
    with pytest.raises(PlannerError, match="only the Qwen3-VL family"):
        vision_tower({"model_type": "idefics3", "vision_config": {"depth": 2}})
    with pytest.raises(PlannerError, match="vision_config.depth"):
        vision_tower({"model_type": "qwen3_5_moe", "vision_config": {"depth": "27"}})
    assert vision_tower({"model_type": "llama"}) is None
    assert full_config("llama-3.1-8b") is None  # a catalog name: text decoder only
    assert full_config(str(CONFIG))["vision_config"]["depth"] == 27


# A LLaVA-NeXT config.json's tower (llava-hf/llava-v1.6-mistral-7b-hf: CLIP ViT-L/14 at 336 px, feature
# layer -2, a Mistral-7B decoder of hidden 4096) and Gemma 3 27B's (SigLIP So400m/14 at 896 px, decoder 5376).
LLAVA_NEXT = {
    "model_type": "llava_next", "vision_feature_layer": -2,
    "vision_config": {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
                      "num_attention_heads": 16, "patch_size": 14, "image_size": 336},
    "text_config": {"hidden_size": 4096},
}  # fmt: skip


def test_siglip_and_clip_towers_as_vllm_builds_them():
    gemma = plain_vision_tower(catalog_multimodal_config("google/gemma-3-27b-it"))
    assert (gemma.kind, gemma.layers, gemma.patches, gemma.post_norm) == ("siglip", 27, 4096, True)
    d, i, t = 1152, 4304, 5376
    layer = 4 * d + 3 * d * d + 3 * d + d * d + d + d * i + i + i * d + d
    params = 3 * 14 * 14 * d + d + 4096 * d + 27 * layer + 2 * d + d * t + d
    assert plain_vision_weight_bytes(gemma)[0] == 2 * params == 846_120_672  # 0.79 GiB in bf16
    llava = plain_vision_tower(LLAVA_NEXT)
    # vision_feature_layer -2 builds 23 of the 24 layers, without the post-layernorm (llava_next.py)
    assert (llava.kind, llava.layers, llava.post_norm) == ("clip", 23, False)
    d, i, t = 1024, 4096, 4096
    layer = 4 * d + 3 * d * d + 3 * d + d * d + d + d * i + i + i * d + d
    params = 3 * 14 * 14 * d + d + 577 * d + 23 * layer + (d * t + t) + (t * t + t) + 2 * d + t
    assert plain_vision_weight_bytes(llava)[0] == 2 * params  # 0.58 GiB: the -0.6 GiB of issue 22
    assert abs(2 * params / 2**30 - 0.58) < 0.01


def test_explain_adds_the_tower_of_a_catalog_gemma_3():
    """Predicted from the catalog's text decoder, a Gemma 3 log's weights now hold the SigLIP tower too."""
    from tests.tui.test_explain import LOGS, _explained  # noqa: PLC0415

    args = ("--model", "google/gemma-3-27b-it", "--gpu", "h100", "--max-model-len", "8192")
    out = _explained("llmdplanner_v0.19.0_h100_gemma2-9b_tp1.log", args)
    weights = {t["name"]: t for t in out["terms"]}["weights"]
    assert "SIGLIP vision tower and projector 846,120,672 B" in weights["source"]
    assert LOGS.exists()
