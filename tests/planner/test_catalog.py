"""The built-in catalog: every entry loads and counts; entries with a published config match it exactly."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from planner import catalog
from planner.catalog import catalog_entry, catalog_names, close_names
from planner.kv import kv_bytes_per_token, kv_bytes_per_token_beyond_window, state_bytes_per_sequence
from planner.params import count_params
from planner.spec import DATA_DIR, load_spec
from tests.conftest import REPO_ROOT, SHARED_CONFIGS, needs_shared

# Exact figures (transformers 5.24.0 meta-device counts and measured caches, ../shared/configs/EXPECTED.json),
# asserted here from the catalog alone so they hold without ../shared. (params_total, bf16 KV bytes per token,
# the same beyond the window, fixed state per sequence)
KEY_FIGURES = {
    "llama-3.1-8b": (8_030_261_248, 131_072, 131_072, 0),
    "llama-3.2-1b": (1_235_814_400, 32_768, 32_768, 0),
    "llama-3.1-70b": (70_553_706_496, 327_680, 327_680, 0),
    "qwen3-30b-a3b": (30_532_122_624, 98_304, 98_304, 0),
    "qwen3-8b": (8_190_735_360, 147_456, 147_456, 0),
    "qwen2.5-7b": (7_615_616_512, 57_344, 57_344, 0),
    "mistral-7b": (7_241_732_096, 131_072, 0, 0),
    "mixtral-8x7b": (46_702_792_704, 131_072, 131_072, 0),
    "gemma-2-9b": (9_241_705_984, 344_064, 172_032, 0),
    "phi-4": (14_659_507_200, 204_800, 204_800, 0),
    "deepseek-v2-lite": (15_706_484_224, 31_104, 31_104, 0),
    "gpt-oss-20b": (20_914_757_184, 49_152, 24_576, 0),
    "qwen3.5-35b-a3b": (34_660_610_688, 20_480, 20_480, 64_880_640),
    "nemotron-h-56b": (56_324_350_464, 40_960, 40_960, 914_817_024),
    "gpt2": (124_439_808, 36_864, 36_864, 0),
}


# Every catalog entry built with transformers 5.24.0 on the meta device (AutoModelForCausalLM.from_config
# with the entry's config, sum of parameter numel), measured once by hand for this table.
TRANSFORMERS_PARAM_COUNTS = {
    "deepseek-v2-lite": 15706484224,
    "deepseek-v3": 671026404352,
    "gemma-2-27b": 27227128320,
    "gemma-2-2b": 2614341888,
    "gemma-2-9b": 9241705984,
    "gemma-2b": 2506172416,
    "gemma-3-12b": 11766034176,
    "gemma-3-1b": 999885952,
    "gemma-3-27b": 27009346304,
    "gemma-3-4b": 3880263168,
    "gemma-7b": 8537680896,
    "gpt-oss-120b": 116829156672,
    "gpt-oss-20b": 20914757184,
    "gpt2": 124439808,
    "gpt2-large": 774030080,
    "gpt2-medium": 354823168,
    "gpt2-xl": 1557611200,
    "llama-2-13b": 13015864320,
    "llama-2-70b": 68976648192,
    "llama-2-7b": 6738415616,
    "llama-3.1-405b": 405853388800,
    "llama-3.1-70b": 70553706496,
    "llama-3.1-8b": 8030261248,
    "llama-3.2-1b": 1235814400,
    "llama-3.2-3b": 3212749824,
    "llama-3.3-70b": 70553706496,
    "mistral-7b": 7241732096,
    "mistral-7b-v0.3": 7248023552,
    "mixtral-8x22b": 140630071296,
    "mixtral-8x7b": 46702792704,
    "nemotron-h-56b": 56324350464,
    "nemotron-h-8b": 8100852736,
    "phi-3-mini": 3821079552,
    "phi-4": 14659507200,
    "qwen1.5-moe-a2.7b": 14315784192,
    "qwen2.5-0.5b": 494032768,
    "qwen2.5-1.5b": 1543714304,
    "qwen2.5-14b": 14770033664,
    "qwen2.5-32b": 32763876352,
    "qwen2.5-3b": 3085938688,
    "qwen2.5-72b": 72706203648,
    "qwen2.5-7b": 7615616512,
    "qwen3-0.6b": 596049920,
    "qwen3-1.7b": 1720574976,
    "qwen3-14b": 14768307200,
    "qwen3-235b-a22b": 235093634560,
    "qwen3-30b-a3b": 30532122624,
    "qwen3-32b": 32762123264,
    "qwen3-4b": 4022468096,
    "qwen3-8b": 8190735360,
    "qwen3-next-80b-a3b": 79674391296,
    "qwen3.5-35b-a3b": 34660610688,
}


def test_every_catalog_entry_matches_transformers_parameter_count():
    assert set(TRANSFORMERS_PARAM_COUNTS) == set(catalog_names())
    for name, expected in TRANSFORMERS_PARAM_COUNTS.items():
        assert count_params(load_spec(name)).total == expected, name


def test_catalog_covers_the_families_asked_for():
    names = set(catalog_names())
    wanted = {
        "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "qwen2.5-0.5b",
        "qwen2.5-7b", "qwen2.5-72b", "qwen3-0.6b", "qwen3-8b", "qwen3-32b", "qwen3-30b-a3b",
        "qwen3-235b-a22b", "mistral-7b", "mixtral-8x7b", "mixtral-8x22b", "gemma-2-2b", "gemma-2-9b",
        "gemma-2-27b", "gemma-3-1b", "gemma-3-27b", "phi-3-mini",
        "phi-4", "deepseek-v2-lite", "deepseek-v3", "gpt-oss-20b", "gpt-oss-120b", "qwen3-next-80b-a3b",
        "qwen3.5-35b-a3b", "nemotron-h-8b", "nemotron-h-56b", "gpt2",
    }  # fmt: skip
    assert wanted <= names


@pytest.mark.parametrize("name", catalog_names())
def test_every_catalog_entry_loads_counts_and_says_where_it_comes_from(name):
    entry = catalog_entry(name)
    assert entry is not None and "/" in entry.hf_repo and entry.source.strip()
    spec = load_spec(name)
    params = count_params(spec)
    assert params.total > 0 and params.total == params.embed + params.head + params.final_norm + sum(
        params.per_layer
    )
    assert 0 < params.active_per_token <= params.total
    assert kv_bytes_per_token(spec) >= kv_bytes_per_token_beyond_window(spec) >= 0


@pytest.mark.parametrize("name", sorted(KEY_FIGURES))
def test_key_figures_from_the_catalog_alone(name):
    total, kv, kv_beyond, state = KEY_FIGURES[name]
    spec = load_spec(name)
    assert count_params(spec).total == total
    assert kv_bytes_per_token(spec, "bf16") == kv
    assert kv_bytes_per_token_beyond_window(spec, "bf16") == kv_beyond
    assert state_bytes_per_sequence(spec) == state


def test_published_totals_of_entries_without_a_local_config():
    # Parameter counts the model cards / safetensors indexes publish (rounded there, exact here).
    assert count_params(load_spec("llama-3.1-405b")).total == 405_853_388_800
    assert count_params(load_spec("llama-3.2-3b")).total == 3_212_749_824
    assert count_params(load_spec("nemotron-h-8b")).total == 8_100_852_736
    assert round(count_params(load_spec("gpt-oss-120b")).total / 1e9, 1) == 116.8
    assert round(count_params(load_spec("deepseek-v3")).total / 1e9) == 671
    assert round(count_params(load_spec("qwen3-235b-a22b")).active_per_token / 1e9) == 22


@needs_shared
def test_entries_with_a_shared_config_match_it_exactly():
    checked = 0
    for name in catalog_names():
        entry = catalog_entry(name)
        if entry.shared_config is None:
            continue
        ours, published = load_spec(name), load_spec(SHARED_CONFIGS / entry.shared_config)
        a, b = count_params(ours), count_params(published)
        assert (a.total, dict(a.by_component), a.per_layer, a.per_layer_replicated, a.active_per_token) == (
            b.total, dict(b.by_component), b.per_layer, b.per_layer_replicated, b.active_per_token,
        ), name  # fmt: skip
        assert ours.layers == published.layers, name
        for dtype in ("auto", "fp8"):
            assert kv_bytes_per_token(ours, dtype) == kv_bytes_per_token(published, dtype), name
        assert state_bytes_per_sequence(ours) == state_bytes_per_sequence(published), name
        assert ours.default_format == published.default_format, name
        checked += 1
    assert checked == 15


@needs_shared
def test_every_shared_config_has_a_catalog_entry():
    shared = {p.name for p in SHARED_CONFIGS.glob("*.json")} - {"EXPECTED.json"}
    covered = {catalog_entry(n).shared_config for n in catalog_names()}
    assert shared <= covered


def test_catalog_data_is_small_and_loaded_lazily():
    assert (DATA_DIR / "catalog.json").stat().st_size < 64 * 1024
    json.loads((DATA_DIR / "catalog.json").read_text())
    code = (
        "import planner.spec, planner.params, planner.kv, planner.formats, planner.catalog as c, sys;"
        "print(c._catalog.cache_info().currsize, 'torch' in sys.modules, 'numpy' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["0", "False", "False"]


def test_close_names():
    assert "qwen3-8b" in close_names("qwen3-8")
    assert close_names("zzzz") == []


@pytest.mark.parametrize(
    ("model", "entry"),
    [
        ("Qwen/Qwen2.5-0.5B-Instruct", "qwen2.5-0.5b"),  # issue 22: Qwen/Qwen3-8B mapped, this did not
        ("google/gemma-3-27b-it", "gemma-3-27b"),  # the catalog holds the -pt checkpoint
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),  # Meta's old repo name
        ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3-30b-a3b"),  # a dated re-release
        ("Qwen/Qwen2.5-7B", "qwen2.5-7b"),  # the base of an entry that holds the -Instruct repo
    ],
)
def test_a_variant_checkpoint_maps_to_its_base_entry_and_says_so(model, entry):
    assert catalog.catalog_variant_for(model)[0] == entry
    spec = load_spec(model)
    assert spec.name == model
    assert f"architecture from the catalog entry {entry}" in spec.assumptions[0]
    assert "the same shape fields assumed" in spec.assumptions[0]


def test_a_path_as_vllm_logs_it_maps_by_its_last_part():
    # load_spec refuses a path that is not there; `memsight explain` uses this for the log's model path
    assert catalog.catalog_variant_for("/models/Qwen2.5-3B-Instruct") == ("qwen2.5-3b", "Qwen/Qwen2.5-3B")


@pytest.mark.parametrize(
    "model",
    ["unknown-org/Qwen2.5-0.5B-Instruct", "Qwen2-7B-Instruct", "mistralai/Mistral-7B-Instruct-v0.3", "a/b"],
)
def test_no_variant_is_guessed_across_organisations_or_families(model):
    assert catalog.catalog_variant_for(model) is None
