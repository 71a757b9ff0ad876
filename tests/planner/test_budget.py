"""The budget: four buckets + OS reserve, fits / max users / longest context, per rank, and the lesson's
"things to try" figures (seeds/003, "Putting it together": 1.5 GiB runtime + the activation peak of an
8K-token prefill chunk). All from the built-in catalog, so they run without ../shared."""

from __future__ import annotations

import pytest

from planner.activations import activation_peak
from planner.budget import PlanInputs, make_plan, plan_to_json
from planner.errors import PlannerError
from planner.machines import MACHINES, get_machine, this_machine
from planner.spec import load_spec
from planner.units import GiB

LLAMA8B_WEIGHTS = 8_030_261_248 * 2
LLAMA8B_PREFILL_8K = 8192 * (4 * 4096 + 3 * 14336) * 2  # 973,078,528 B, "about 1 GB"


def plan(model="llama-3.1-8b", **kw):
    return make_plan(PlanInputs(model=model, **kw))


# ---- the lesson's figures -------------------------------------------------------------------------------


def test_defaults_8b_bf16_8k_8_users_on_each_machine():
    spark = plan(context=8192, users=8, machine="spark")
    h100 = plan(context=8192, users=8, machine="h100")
    rtx = plan(context=8192, users=8, machine="rtx4090")
    assert (spark.max_users, h100.max_users, rtx.max_users) == (
        100,
        62,
        6,
    )  # "about 100 and 62", "tops out at 6"
    assert spark.fits and h100.fits and not rtx.fits
    short = (rtx.total_bytes - rtx.capacity_bytes) / GiB
    assert round(short, 1) == 1.4  # "the 4090 misses by about 1.4 GiB"


def test_defaults_exact_buckets():
    p = plan(context=8192, users=8, machine="h100")
    assert p.weight_bytes == LLAMA8B_WEIGHTS
    assert p.kv_bytes_per_token == 131_072
    assert p.kv_bytes == 8 * GiB  # 128 KiB x 8,192 tokens = 1 GiB per user
    assert p.activation_bytes == LLAMA8B_PREFILL_8K + 128256 * 2  # + one row of logits
    assert p.overhead_bytes == int(1.5 * GiB)
    assert p.os_reserve_bytes == 0
    assert p.total_bytes == p.weight_bytes + p.kv_bytes + p.activation_bytes + p.overhead_bytes
    spark = plan(context=8192, users=8, machine="spark")
    assert spark.os_reserve_bytes == 10 * GiB
    assert spark.total_bytes == p.total_bytes + 10 * GiB


def test_128k_context():
    assert plan(context=131072, users=1, machine="rtx4090").max_users == 0  # cannot hold one user
    assert plan(context=131072, users=1, machine="h100").max_users == 3
    one = plan(context=131072, users=1, machine="h100")
    assert one.kv_bytes > one.weight_bytes  # one user's cache outweighs the model


def test_fp8_kv_roughly_doubles_max_users():
    for machine in ("spark", "h100", "rtx4090"):
        bf16 = plan(context=8192, users=8, machine=machine)
        fp8 = plan(context=8192, users=8, machine=machine, kv_dtype="fp8")
        assert fp8.kv_bytes_per_token * 2 == bf16.kv_bytes_per_token
        # half the bytes per user: floor(2x) is 2*floor(x) or one more
        assert fp8.max_users in (2 * bf16.max_users, 2 * bf16.max_users + 1)


def test_llama_70b():
    bf16 = plan("llama-3.1-70b", format="bf16", context=8192, users=1, machine="spark")
    assert round(bf16.weight_bytes / GiB) == 131  # "131 GiB of weights"
    for machine in ("spark", "h100", "rtx4090"):
        assert not plan("llama-3.1-70b", format="bf16", context=8192, users=1, machine=machine).fits
    q4 = {m: plan("llama-3.1-70b", format="q4_k_m", context=32768, users=1, machine=m) for m in MACHINES}
    assert q4["spark"].max_users == 7  # "at 32K context the Spark fits about 7 users"
    assert q4["h100"].max_users == 3  # "the H100 about 3"
    assert not q4["rtx4090"].fits and q4["rtx4090"].max_users == 0


def test_qwen3_30b_a3b():
    p = plan("qwen3-30b-a3b", format="bf16", context=8192, users=8, machine="h100")
    assert round(p.weight_bytes / GiB) == 57  # "57 GiB of weights"
    # "room for about 27 users at 8K": (80 - 56.87 - 1.5 - 0.41) GiB / 0.75 GiB per user = 28.3 -> 28
    assert p.kv_bytes_per_token == 48 * 2 * 4 * 128 * 2  # 96 KiB: 4 KV heads, smaller than the 8B's
    assert p.max_users == 28
    assert not plan("qwen3-30b-a3b", format="bf16", context=8192, users=1, machine="rtx4090").fits


# ---- activations ----------------------------------------------------------------------------------------


def test_activation_terms_from_the_lesson():
    spec = load_spec("llama-3.1-8b")
    decode = activation_peak(spec, prefill_chunk=0, users=64)
    assert decode.per_token_layer_bytes == 118_784  # (4h + 3I) x 2 B, "about 120 KB"
    assert decode.decode_bytes == 64 * 118_784 < 8 * 10**6  # "under 8 MB"
    all_logits = activation_peak(spec, prefill_chunk=32768, users=1, logits="all")
    assert all_logits.logits_bytes == 32768 * 128256 * 2  # "about 8.4 GB"
    eager = activation_peak(spec, prefill_chunk=16384, users=1, attention="eager")
    assert eager.attention_bytes == 32 * 16384**2 * 2 + 32 * 16384**2 * 4  # 16 GiB + fp32 softmax copy
    assert eager.attention_bytes == 48 * GiB
    fused = activation_peak(spec, prefill_chunk=16384, users=1)
    assert fused.attention_bytes == 0 and fused.peak_bytes < eager.peak_bytes


def test_logits_and_eager_attention_flow_into_the_plan():
    base = plan(context=32768, users=1, machine="h100", prefill_chunk=32768)
    every = plan(context=32768, users=1, machine="h100", prefill_chunk=32768, logits="all")
    assert every.activation_bytes - base.activation_bytes == (32768 - 1) * 128256 * 2
    assert every.max_users < base.max_users


def _llama_config(**extra) -> dict:
    """Llama 3.1 8B's shapes as a config.json document (the catalog's figures, written out here)."""
    return {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072, **extra,
    }  # fmt: skip


def test_activation_bytes_follow_the_plans_activation_dtype():
    """fp32 temporaries take 4 B a value: an fp32 plan, and a config naming no dtype (planned in fp32 as
    transformers loads it), get (4h + 3I) x 4 B per token and 4 B logits; bf16 keeps 2 B."""
    h, i, v, chunk = 4096, 14336, 128256, 8192
    bf16 = plan(context=8192, users=1, machine="h100")
    fp32 = plan(context=8192, users=1, machine="h100", format="fp32")
    assert bf16.activation_bytes == chunk * (4 * h + 3 * i) * 2 + v * 2 == LLAMA8B_PREFILL_8K + v * 2
    assert fp32.activation_bytes == chunk * (4 * h + 3 * i) * 4 + v * 4  # 1,946,670,080 B
    assert fp32.activation_bytes == 1_946_670_080
    assert fp32.activation.dtype_bytes == 4 and bf16.activation.dtype_bytes == 2
    assert any("(4h + 3I) x 4 B per token, float32 activations" in a for a in fp32.assumptions)
    # no torch_dtype: planned in fp32 (weights and activations alike); a bf16 plan of it computes in bf16
    no_dtype = make_plan(PlanInputs(model="x", context=8192, users=1, machine="h100"),
                         spec=load_spec(_llama_config()))  # fmt: skip
    assert no_dtype.weights.format == "fp32" and no_dtype.activation_bytes == fp32.activation_bytes
    as_bf16 = make_plan(PlanInputs(model="x", format="bf16", context=8192, users=1, machine="h100"),
                        spec=load_spec(_llama_config()))  # fmt: skip
    assert as_bf16.activation_bytes == bf16.activation_bytes
    # eager scores in fp32 (4 B) plus the softmax's own fp32 output (4 B); decode rows and logits 4 B
    eager = activation_peak(load_spec("llama-3.1-8b"), prefill_chunk=1024, users=1, attention="eager",
                            dtype_bytes=4)  # fmt: skip
    assert eager.attention_bytes == 32 * 1024**2 * (4 + 4)
    decode = activation_peak(load_spec("llama-3.1-8b"), prefill_chunk=0, users=64, dtype_bytes=4)
    assert decode.peak_bytes == 64 * (4 * h + 3 * i) * 4 + 64 * v * 4


def test_a_quantized_plan_computes_in_the_configs_dtype():
    """An AWQ / fp8 checkpoint keeps its unquantized tensors, and computes, in the config's torch_dtype."""
    awq_config = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
    fp16_awq = load_spec(_llama_config(torch_dtype="float16", quantization_config=awq_config))
    awq = make_plan(PlanInputs(model="x", context=8192, users=1, machine="h100"), spec=fp16_awq)
    assert awq.weights.format == "awq" and awq.activation.dtype_bytes == 2
    assert awq.activation_bytes == LLAMA8B_PREFILL_8K + 128256 * 2
    fp8_of_fp32 = make_plan(PlanInputs(model="x", format="fp8", context=8192, users=1, machine="h100"),
                            spec=load_spec(_llama_config(torch_dtype="float32")))  # fmt: skip
    assert fp8_of_fp32.activation.dtype_bytes == 4


# ---- KV: output tokens, block rounding, prefix sharing ----------------------------------------------------


def test_output_tokens_and_block_rounding():
    p = plan(context=8000, output_tokens=200, users=2, machine="h100")
    assert p.kv_bytes == 2 * 8208 * 131_072  # 8,200 tokens rounded up to 16-token blocks
    unrounded = plan(context=8000, output_tokens=200, users=2, machine="h100", block_size=1)
    assert unrounded.kv_bytes == 2 * 8200 * 131_072


def test_shared_prefix_is_stored_once_in_whole_blocks():
    p = plan(context=8192, users=8, machine="h100", shared_prefix=4100)
    shared = 4096  # whole 16-token blocks of the 4,100 shared tokens
    assert p.kv_bytes == 8 * 8192 * 131_072 - 7 * shared * 131_072
    assert p.max_users > plan(context=8192, users=8, machine="h100").max_users
    with pytest.raises(PlannerError, match="shared prefix"):
        plan(context=100, shared_prefix=200)


# ---- search results are edges, per rank -------------------------------------------------------------------


def test_max_users_and_max_context_are_edges():
    p = plan(context=8192, users=8, machine="h100")
    assert plan(context=8192, users=p.max_users, machine="h100").fits
    assert not plan(context=8192, users=p.max_users + 1, machine="h100").fits
    assert plan(context=p.max_context, users=8, machine="h100").fits
    assert not plan(context=p.max_context + 1, users=8, machine="h100").fits
    assert p.max_context % 16 == 0


def test_max_context_capped_by_the_model():
    p = plan("llama-3.2-1b", context=1024, users=1, machine="h100")
    assert p.max_context == 131072  # max_position_embeddings; memory would allow more
    assert any("max_position_embeddings" in a for a in p.assumptions)


def test_ranks_and_busiest_under_uneven_pipeline():
    p = plan(
        "llama-3.1-70b", format="bf16", context=8192, users=4, machine="h100", tp=4, pp=2, pp_layers=(44, 36)
    )
    assert len(p.ranks) == 8
    assert [r.pp_stage for r in p.ranks] == [0, 0, 0, 0, 1, 1, 1, 1]
    busiest = [r for r in p.ranks if r.busiest]
    assert len(busiest) == 1 and busiest[0].pp_stage == 0
    assert p.total_bytes == max(r.total_bytes for r in p.ranks) == busiest[0].total_bytes
    assert p.weight_bytes == busiest[0].weight_bytes
    assert p.weight_bytes > p.weights.total // 8  # never the total divided by ranks
    assert p.kv_bytes == 4 * 8192 * 44 * 2 * 2 * 128 * 2  # 44 layers x 2 KV heads per rank
    stage1 = next(r for r in p.ranks if r.pp_stage == 1)
    assert stage1.kv_bytes == 4 * 8192 * 36 * 2 * 2 * 128 * 2
    assert p.max_users == min(r.max_users for r in p.ranks)


def test_busiest_rank_holds_the_head_when_layers_are_even():
    p = plan("llama-3.1-8b", context=8192, users=1, machine="h100", pp=2)
    assert next(r for r in p.ranks if r.busiest).pp_stage == 1  # lm_head + logits on the last stage


# ---- machines ---------------------------------------------------------------------------------------------


def test_machine_presets():
    assert MACHINES["spark"].capacity_bytes == 128 * GiB and MACHINES["spark"].os_reserve_bytes == 10 * GiB
    assert MACHINES["h100"].capacity_bytes == 80 * GiB
    assert MACHINES["rtx4090"].capacity_bytes == 24 * GiB
    assert MACHINES["h200"].capacity_bytes == 143_771 * 2**20  # as nvidia-smi reports the "141 GB" part
    assert "141 GB" in MACHINES["h200"].label
    with pytest.raises(PlannerError, match="unknown machine"):
        get_machine("a100")
    custom = get_machine("custom", capacity_bytes=40 * GiB)
    assert custom.capacity_bytes == 40 * GiB and custom.os_reserve_bytes == 0
    with pytest.raises(PlannerError, match="leaves nothing"):
        get_machine("spark", capacity_bytes=8 * GiB)
    # a given reserve replaces the preset's, and the label the plan prints says so (it named only the preset's
    # "10 GiB assumed" while the plan used the given 30)
    spark = get_machine("spark", os_reserve_bytes=30 * GiB)
    assert spark.os_reserve_bytes == 30 * GiB
    assert spark.label.endswith(
        "assumed for the OS and other processes; 30.00 GiB for the OS and other processes given instead"
    )
    assert get_machine("custom", capacity_bytes=40 * GiB, os_reserve_bytes=2 * GiB).label == (
        "40.00 GiB capacity given; 2.00 GiB for the OS and other processes given"
    )


def test_this_machine_from_meminfo_and_from_nvml(tmp_path):
    meminfo = tmp_path / "meminfo"
    # GB10: MemTotal 127,600,748 kB (reference/anchors.md)
    meminfo.write_text("MemTotal:       127600748 kB\nMemFree:   1000 kB\nMemAvailable:   100000000 kB\n")
    unified = this_machine(meminfo_path=meminfo, gpu_name="NVIDIA GB10", unified=True)
    assert unified.capacity_bytes == 127_600_748 * 1024
    assert unified.os_reserve_bytes == (127_600_748 - 100_000_000) * 1024
    assert unified.unified
    discrete = this_machine(meminfo_path=meminfo, gpu_total_bytes=81559 * 2**20, gpu_name="NVIDIA H100")
    assert discrete.capacity_bytes == 81559 * 2**20 and discrete.os_reserve_bytes == 0
    real = this_machine()  # this host's /proc/meminfo
    assert real.capacity_bytes > 0
    meminfo.write_text("MemFree: 1 kB\n")
    with pytest.raises(PlannerError, match="MemTotal"):
        this_machine(meminfo_path=meminfo)


# ---- inputs and JSON --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"users": -1}, "users"),
        ({"context": 0}, "at least 1 token"),
        ({"block_size": 0}, "block size"),
        ({"tp": 3}, "attention heads"),
        ({"logits": "some"}, "logits"),
        ({"format": "q3_weird"}, "q3_weird"),
    ],
)
def test_bad_inputs(kw, match):
    with pytest.raises(PlannerError, match=match):
        plan(**kw)


def test_plan_to_json_schema():
    p = plan(context=8192, users=8, machine="h100", tp=2)
    out = plan_to_json(p)
    for key in (
        "params_total",
        "weight_bytes",
        "kv_bytes_per_token",
        "kv_bytes",
        "activation_bytes",
        "overhead_bytes",
        "total_bytes",
        "capacity_bytes",
        "fits",
        "max_users",
        "ranks",
    ):
        assert key in out
    assert out["params_total"] == 8_030_261_248
    assert all(isinstance(out[k], int) for k in ("weight_bytes", "kv_bytes", "total_bytes", "capacity_bytes"))
    assert len(out["ranks"]) == 2
    for row in out["ranks"]:
        assert set(row) >= {
            "rank",
            "weight_bytes",
            "kv_bytes_per_token",
            "kv_bytes",
            "total_bytes",
            "busiest",
        }
    assert sum(row["busiest"] for row in out["ranks"]) == 1
