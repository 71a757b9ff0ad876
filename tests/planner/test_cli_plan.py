"""`memsight plan` end to end: the real `python -m tui.cli plan ...` in subprocesses."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from planner.catalog import catalog_names
from planner.engines.vllm.overheads import CUDAGRAPH_BYTES_PER_GRAPH
from tests.conftest import REPO_ROOT, SHARED_CONFIGS, needs_shared

REQUIRED_KEYS = {
    "params_total", "weight_bytes", "kv_bytes_per_token", "kv_bytes", "activation_bytes", "overhead_bytes",
    "total_bytes", "capacity_bytes", "fits", "max_users", "ranks",
}  # fmt: skip
RANK_KEYS = {"rank", "weight_bytes", "kv_bytes_per_token", "kv_bytes", "total_bytes", "busiest"}


def memsight(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "plan", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=None if env is None else {**os.environ, **env},
    )


def plan_json(*args: str, env: dict[str, str] | None = None) -> dict:
    done = memsight(*args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def check_schema(out: dict) -> None:
    assert REQUIRED_KEYS <= set(out)
    for key in (
        "weight_bytes",
        "kv_bytes",
        "activation_bytes",
        "overhead_bytes",
        "total_bytes",
        "capacity_bytes",
    ):
        assert isinstance(out[key], int) and out[key] >= 0, key
    assert out["ranks"] and all(RANK_KEYS <= set(r) for r in out["ranks"])
    assert sum(r["busiest"] for r in out["ranks"]) == 1


def test_plan_table_shows_buckets_ranks_and_assumptions():
    done = memsight("llama-3.1-8b", "--machine", "h100", "--users", "8", "--tp", "2")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    for word in (
        "weights",
        "KV cache",
        "activations",
        "overhead",
        "total",
        "FITS",
        "max users",
        "busiest",
        "assumptions",
        "GiB",
    ):
        assert word in text
    assert text.count("<- busiest") == 1


def test_plan_json_matches_the_lesson():
    out = plan_json("llama-3.1-8b", "--machine", "h100", "--users", "8", "--ctx", "8192")
    check_schema(out)
    assert out["params_total"] == 8_030_261_248
    assert out["weight_bytes"] == 16_060_522_496
    assert out["kv_bytes_per_token"] == 131_072
    assert out["kv_bytes"] == 8 * 2**30
    assert out["max_users"] == 62 and out["fits"] is True
    assert out["capacity_bytes"] == 80 * 2**30


def test_capacity_and_reserve_flags():
    out = plan_json("llama-3.1-8b", "--capacity-gib", "24", "--users", "8")
    assert out["capacity_bytes"] == 24 * 2**30 and out["max_users"] == 6 and not out["fits"]
    out = plan_json("llama-3.1-8b", "--machine", "spark", "--os-reserve-gib", "20")
    assert out["os_reserve_bytes"] == 20 * 2**30


def test_vllm_engine_reproduces_issue_12330_pool():
    out = plan_json(
        "llama-3.1-8b", "--engine", "vllm", "--vllm-version", "0.6.6", "--total-gib", "39.50",
        "--gpu-memory-utilization", "0.9", "--max-model-len", "8192", "--weights-gib", "14.96",
        "--activation-gib", "9.37", "--non-torch-gib", "0.10",
    )  # fmt: skip
    v = out["vllm"]
    assert set(v) >= {"pool_bytes", "num_blocks", "kv_cache_tokens", "max_concurrency"}
    assert f"{v['pool_bytes'] / 2**30:.2f}" == "11.12"
    assert abs(v["num_blocks"] - 5691) <= 5  # the log's figures are rounded to 0.01 GiB
    assert v["kv_cache_tokens"] == v["num_blocks"] * 16
    assert v["max_concurrency_logged"] == "11.12x"
    assert v["activation_predicted"] is False


def test_vllm_pool_given_directly_and_predicted_activation():
    out = plan_json("llama-3.1-8b", "--engine", "vllm", "--kv-pool-gib", "10", "--max-model-len", "8192")
    assert out["vllm"]["num_blocks"] == 5120 and out["vllm"]["max_concurrency"] == 10.0
    out = plan_json("llama-3.1-8b", "--machine", "h100", "--engine", "vllm")
    assert out["vllm"]["activation_predicted"] is True
    assert out["vllm"]["version"] == "0.33.0"


def _explained(log: str, *args: str) -> tuple[dict[str, int], dict[str, str]]:
    """`memsight explain LOG --json`: its predicted terms (bytes) and its inputs."""
    out = subprocess.run(
        [sys.executable, "-m", "tui.cli", "explain", f"tests/data/vllm_logs/{log}", *args, "--json"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    return {t["name"]: t["bytes"] for t in data["terms"]}, {i["name"]: i["value"] for i in data["inputs"]}


@pytest.mark.parametrize(
    ("log", "explain_args", "plan_args"),
    [
        # vLLM 0.19 on an H100: the era whose non-torch includes the graph estimate's captures
        ("llmdplanner_v0.19.0_h100_llama31-8b_tp1.log", ("--model", "llama-3.1-8b", "--gpu", "h100"),
         ("llama-3.1-8b", "--machine", "h100", "--gpu-memory-utilization", "0.95")),
        # gpt-oss on an A100: MXFP4 experts padded for the Marlin kernel, a GPU that is not a plan preset
        ("myoceane_v0.19.0_gpt-oss-20b_a100.log", ("--gpu", "a100-80gb"),
         ("gpt-oss-20b", "--capacity-gib", "80", "--gpu-name", "NVIDIA A100-SXM4-80GB",
          "--cuda-capability", "8.0", "--gpu-memory-utilization", "0.65")),
    ],
)  # fmt: skip
def test_plan_engine_vllm_predicts_the_pool_explain_predicts(log, explain_args, plan_args):
    # One model of vLLM's pool: `memsight plan --engine vllm` used the plan's 1.5 GiB overhead as non-torch
    # memory, no graph estimate and no MXFP4 padding, so for the same inputs it answered GiBs away from
    # `memsight explain`. The device total and max_model_len are given as the log states them.
    terms, inputs = _explained(log, *explain_args)
    pool = plan_json(
        *plan_args, "--engine", "vllm", "--vllm-version", "0.19.0",
        "--max-model-len", inputs["max_model_len"], "--total-gib", f"{terms['device total']}B",
    )["vllm"]  # fmt: skip
    assert pool["weights_bytes"] == terms["weights"]
    assert pool["activation_bytes"] == terms["activation peak"]
    assert pool["non_torch_bytes"] == terms["non-torch"]
    assert pool["cudagraph_bytes"] == terms["CUDA graphs"]
    assert pool["pool_bytes"] == terms["KV pool"]


def test_plan_engine_vllm_deducts_the_graph_estimate_where_the_version_does():
    common = ("llama-3.1-8b", "--engine", "vllm", "--machine", "h100", "--max-model-len", "8192")
    before = plan_json(*common, "--vllm-version", "0.19.0")["vllm"]
    after = plan_json(*common, "--vllm-version", "0.26.0")["vllm"]
    eager = plan_json(*common, "--vllm-version", "0.26.0", "--enforce-eager")["vllm"]
    given = plan_json(*common, "--vllm-version", "0.26.0", "--cudagraph-gib", "0.5")["vllm"]
    assert before["cudagraph_bytes"] == 0 and eager["cudagraph_bytes"] == 0
    # 0.26 on a >= 70 GiB GPU: 1024 sequences, so every default capture size up to 512 (51 of them), each a
    # PIECEWISE and a FULL graph (FULL_AND_PIECEWISE), at the empirical bytes per graph
    assert after["cudagraph_bytes"] == (51 + 51) * CUDAGRAPH_BYTES_PER_GRAPH
    assert given["cudagraph_bytes"] == 2**29
    assert given["pool_bytes"] - after["pool_bytes"] == after["cudagraph_bytes"] - 2**29
    # the device total vLLM reads on an H100 (mem_get_info), not the marketing 80 GiB; V1 >= 0.14 rounds up;
    # the utilization is the version's default: 0.92 from 0.20 (v0.20.0 config/cache.py:66), 0.9 before
    assert after["requested_bytes"] == math.ceil(round(79.22 * 2**30) * 0.92)
    assert before["requested_bytes"] == math.ceil(round(79.22 * 2**30) * 0.9)


@pytest.mark.parametrize("name", catalog_names())
def test_every_catalog_name(name):
    check_schema(plan_json(name))


@needs_shared
def test_every_shared_config():
    configs = sorted(p for p in SHARED_CONFIGS.glob("*.json") if p.name != "EXPECTED.json")
    assert len(configs) >= 15
    failures = {}
    for path in configs:
        done = memsight(str(path), "--json")
        if done.returncode != 0:
            failures[path.name] = done.stderr.strip()
            continue
        check_schema(json.loads(done.stdout))
    assert not failures, failures


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["no-such-model-anywhere"], "no-such-model-anywhere"),
        (["llama-3.1-8b", "--format", "q3_weird"], "q3_weird"),
        (["llama-3.1-8b", "--tp", "3"], "attention heads"),
        (["llama-3.1-8b", "--users", "-2"], "--users"),
        (["llama-3.1-8b", "--ctx", "abc"], "--ctx"),
        (["llama-3.1-8b", "--capacity-gib", "-5"], "capacity"),
        (["llama-3.1-8b", "--machine", "a100"], "a100"),
        (["llama-3.1-8b", "--pp", "2", "--pp-layers", "10,10"], "sums to 20"),
        (["llama-3.1-8b", "--weights-gib", "14"], "--engine vllm"),
        (["llama-3.1-8b", "--engine", "vllm", "--kv-pool-gib", "4", "--weights-gib", "14"], "--kv-pool-gib"),
        (["llama-3.1-8b", "--engine", "vllm", "--vllm-version", "0.4.0"], "0.6.4"),
        (["llama-3.1-8b", "--machine", "h100", "--capacity-gib", "3"], "not allowed with"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, needle):
    done = memsight(*args)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert needle in lines[0]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"model_type": "llama", "hidden_size": 4096,,}', "malformed JSON"),
        (
            '{"model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 5}',
            "num_key_value_heads",
        ),
        ('{"model_type": "llama", "hidden_size": -4}', "hidden_size"),
        ('{"hidden_size": 4096}', "model_type"),
        ('{"model_type": "nonsense"}', "nonsense"),
        ("[1, 2]", "JSON object"),
    ],
)
def test_malformed_missing_and_contradictory_configs(tmp_path, text, needle):
    config = tmp_path / "config.json"
    config.write_text(text)
    done = memsight(str(config))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1 and needle in done.stderr and "config.json" in done.stderr


def test_plan_path_imports_no_heavy_modules():
    code = (
        "import sys; from tui.cli import main; rc = main(['plan', 'llama-3.1-8b', '--json']); "
        "heavy = sorted(m for m in ('torch', 'textual', 'psutil', 'pynvml') if m in sys.modules); "
        "print('HEAVY', heavy, file=sys.stderr); sys.exit(rc or (3 if heavy else 0))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stderr


def test_checkpoint_folder_uses_the_real_bytes(tmp_path):
    np = pytest.importorskip("numpy")
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    config = {
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "torch_dtype": "float16",
        "tie_word_embeddings": False, "max_position_embeddings": 512,
    }  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    shapes = {"model.embed_tokens.weight": (100, 64), "model.norm.weight": (64,), "lm_head.weight": (100, 64)}
    for i in range(2):
        p = f"model.layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (64, 64), p + "self_attn.k_proj.weight": (32, 64),
            p + "self_attn.v_proj.weight": (32, 64), p + "self_attn.o_proj.weight": (64, 64),
            p + "mlp.gate_proj.weight": (128, 64), p + "mlp.up_proj.weight": (128, 64),
            p + "mlp.down_proj.weight": (64, 128), p + "input_layernorm.weight": (64,),
            p + "post_attention_layernorm.weight": (64,),
        }  # fmt: skip
    tensors = {name: np.zeros(shape, dtype=np.float16) for name, shape in shapes.items()}
    tensors["model.rotary_emb.inv_freq"] = np.zeros((8,), dtype=np.float32)  # a buffer, not a parameter
    safetensors_numpy.save_file(tensors, str(tmp_path / "model.safetensors"))
    params = sum(int(np.prod(shape)) for shape in shapes.values())

    out = plan_json(str(tmp_path), "--machine", "h100")
    assert out["params_total"] == params
    assert out["weight_bytes"] == params * 2 + 8 * 4  # every tensor byte in the file, the fp32 buffer too
    assert any("real bytes" in a for a in out["assumptions"])
    assert any("outside the decoder" in a for a in out["assumptions"])
    by_format = plan_json(str(tmp_path), "--machine", "h100", "--format", "fp16")
    assert by_format["weight_bytes"] == params * 2  # --format overrides the checkpoint, and says so
    assert any("not used" in a for a in by_format["assumptions"])
    two_stages = plan_json(str(tmp_path), "--machine", "h100", "--pp", "2")
    assert sum(r["weight_bytes"] for r in two_stages["ranks"]) == params * 2 + 8 * 4


def test_machine_this_reads_this_host():
    out = plan_json("llama-3.1-8b", "--machine", "this")
    with open("/proc/meminfo") as handle:
        fields = dict(line.split(":", 1) for line in handle)
    mem_total = int(fields["MemTotal"].split()[0]) * 1024
    label = next(a for a in out["assumptions"] if a.startswith("machine: this machine"))
    if "as NVML reports it" in label:  # a discrete GPU was found
        assert out["os_reserve_bytes"] == 0
    else:  # host RAM or unified memory: MemTotal, minus what is in use now
        assert out["capacity_bytes"] == mem_total
        assert 0 < out["os_reserve_bytes"] < mem_total


class _FakeNVML:
    """Stands in for pynvml on hardware this machine lacks; the values are recorded ones (fixtures)."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's spelling
        pass

    def __init__(self, name: str, total: int | None, free: int | None = None):
        self.name, self.total, self.free = name, total, free

    def nvmlInit(self):  # noqa: N802
        return None

    def nvmlShutdown(self):  # noqa: N802
        return None

    def nvmlDeviceGetCount(self):  # noqa: N802
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):  # noqa: N802
        return index

    def nvmlDeviceGetName(self, handle):  # noqa: N802
        return self.name

    def nvmlDeviceGetMemoryInfo(self, handle):  # noqa: N802
        if self.total is None:
            raise self.NVMLError_NotSupported("Not Supported")
        return type("Memory", (), {"total": self.total, "free": self.free})()


def test_probe_this_machine_discrete_and_unified(monkeypatch):
    from tui import cmd_plan

    # H100 80GB HBM3: 81559MiB total in ../shared/fixtures/nvidia-smi_h100-sxm5-x8_idle_565.57.01.txt, 81106
    # MiB free in its -a block (nvidia-smi-a_h100-sxm5-x8_idle_first-gpu-block_565.57.01.txt)
    h100 = _FakeNVML("NVIDIA H100 80GB HBM3", 81559 * 2**20, 81106 * 2**20)
    monkeypatch.setitem(sys.modules, "pynvml", h100)
    discrete = cmd_plan.probe_this_machine()
    assert discrete.capacity_bytes == 81559 * 2**20
    assert not discrete.unified and discrete.os_reserve_bytes == 0
    # GB10 answers NOT_SUPPORTED for device memory: the capacity is the host's MemTotal, reserve what's in use
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNVML("NVIDIA GB10", None))
    unified = cmd_plan.probe_this_machine()
    assert unified.unified and "GB10" in unified.label
    with open("/proc/meminfo") as handle:
        total_kib = int(next(line for line in handle if line.startswith("MemTotal")).split()[1])
    assert unified.capacity_bytes == total_kib * 1024


def test_repo_id_from_the_local_hf_cache(tmp_path):
    from planner.catalog import catalog_config

    snapshot = tmp_path / "models--meta-llama--Llama-3.1-8B" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(catalog_config("llama-3.1-8b")))
    out = plan_json("meta-llama/Llama-3.1-8B", "--machine", "h100", env={"HF_HUB_CACHE": str(tmp_path)})
    assert out["params_total"] == 8_030_261_248 and out["model"] == "meta-llama/Llama-3.1-8B"
    done = memsight("meta-llama/Not-Cached", env={"HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2 and "Not-Cached" in done.stderr and len(done.stderr.splitlines()) == 1


def test_vllm_scheduler_defaults_follow_the_machine_preset():
    # vLLM >= 0.9 gives `vllm serve` 1024 sequences on a >= 70 GiB GPU and 256 below; the preset's device
    # decides, unless --max-num-seqs says otherwise. More sampler rows: a larger predicted peak.
    common = ("llama-3.1-8b", "--engine", "vllm", "--max-model-len", "8192", "--vllm-version", "0.20.0")
    big = plan_json(*common, "--machine", "h100")["vllm"]
    small = plan_json(*common, "--machine", "rtx4090")["vllm"]
    forced = plan_json(*common, "--machine", "h100", "--max-num-seqs", "256")["vllm"]
    assert any("max_num_seqs 1024" in n for n in big["notes"])
    assert any("max_num_seqs 256" in n for n in small["notes"])
    assert forced["activation_bytes"] < big["activation_bytes"]
    assert big["activation_predicted"] and forced["activation_predicted"]


def test_vllm_pool_of_linear_attention_and_mamba_hybrids():
    # 0.33 adds a pool planner memsight does not model for state layers: a refusal naming what to do
    qwen = ("qwen3.5-35b-a3b", "--engine", "vllm", "--machine", "h100")
    refused = memsight(*qwen)
    assert refused.returncode == 2 and "--vllm-version" in refused.stderr
    assert "Traceback" not in refused.stderr
    # 0.26: Gated DeltaNet state pages unified with attention pages (1056-token blocks, as vLLM logs them)
    out = memsight(*qwen, "--vllm-version", "0.26.0")
    assert out.returncode == 0, out.stderr
    assert "Setting attention block size to 1056 tokens" in out.stdout
    assert "Padding mamba page size by 0.76%" in out.stdout
    nemotron = ("nemotron-h-56b", "--engine", "vllm", "--machine", "h200", "--vllm-version", "0.26.0")
    assert memsight(*nemotron).returncode == 2  # prefix caching "all" mode is not modelled
    pool = plan_json(*nemotron, "--no-enable-prefix-caching")["vllm"]
    assert pool["num_blocks"] > 0 and pool["max_concurrency"] > 0
