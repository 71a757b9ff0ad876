"""The vision tower of a vision-language checkpoint as vLLM 0.24.0 holds and profiles it
(planner/vllm_encoder.py), in exact bytes from the published Qwen3.5-35B-A3B config's vision_config."""

from __future__ import annotations

import json

import pytest

from planner.engines.vllm.encoder import (
    encoder_profile,
    full_config,
    images_per_prompt,
    max_image_tokens,
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
        vision_tower({"model_type": "llava", "vision_config": {"depth": 2}})
    with pytest.raises(PlannerError, match="vision_config.depth"):
        vision_tower({"model_type": "qwen3_5_moe", "vision_config": {"depth": "27"}})
    assert vision_tower({"model_type": "llama"}) is None
    assert full_config("llama-3.1-8b") is None  # a catalog name: text decoder only
    assert full_config(str(CONFIG))["vision_config"]["depth"] == 27
