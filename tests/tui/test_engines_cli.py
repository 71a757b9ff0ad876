"""`memsight explain` on SGLang's and Ollama's logs and `memsight plan --engine sglang|ollama`, as a person
runs them: the worksheet line first, the --json object with the keys vLLM's has, and one `memsight:` line
with exit status 2 for a partial log, a log of no engine, or another engine's flag."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

SGLANG = REPO_ROOT / "tests" / "data" / "sglang_logs" / "llmsinclouds_v0.4.3.post4_qwq32b_tp4_l4.log"
OLLAMA = REPO_ROOT / "tests" / "data" / "ollama_logs" / "ollama12000_gemma3-12b_estimate_cuda.log"
KEYS = {"worksheet", "model", "engine", "stage", "inputs", "terms", "rows", "notes"}
ROW_KEYS = {"label", "logged", "logged_line", "predicted", "difference", "relative", "how", "cause"}


def memsight(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
    )


def test_explain_sglang_worksheet_first_and_json_keys():
    text = memsight("explain", str(SGLANG), "--model", "qwen2.5-32b")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("SGLang: predicted KV pool 3.07 GiB / 50,220 tokens")
    out = json.loads(memsight("explain", str(SGLANG), "--model", "qwen2.5-32b", "--json").stdout)
    assert set(out) == KEYS | {"sglang_version"} and out["engine"] == "sglang"
    assert all(set(row) == ROW_KEYS for row in out["rows"].values())
    assert out["rows"]["kv_tokens"]["logged"] == 46611


def test_explain_ollama_with_the_settings_the_log_leaves_out():
    out = json.loads(
        memsight("explain", str(OLLAMA), "--model", "gemma-3-12b", "--format", "q4_k_m", "--json").stdout
    )
    assert (
        set(out) == KEYS | {"ollama_engine"}
        and out["engine"] == "ollama"
        and out["ollama_engine"] == "ollama"
    )
    assert out["rows"]["estimate_kv"]["logged"] == 992.0 and out["rows"]["estimate_kv"]["predicted"] == 992.0
    assert {i["name"]: i["from"] for i in out["inputs"]}["weight format"] == "given (--format)"


DATA = REPO_ROOT / "tests" / "data"


@pytest.mark.parametrize(
    ("engine", "args"),
    [
        # vLLM's `engine` is its V0/V1 generation (a key kept stable since before the other engines)
        ("V1", (DATA / "vllm_logs" / "akamas_v0.29.0_gpt-oss-20b_l4.log", "--gpu", "l4")),
        ("sglang", (SGLANG, "--model", "qwen2.5-32b")),
        ("ollama", (OLLAMA, "--model", "gemma-3-12b", "--format", "q4_k_m")),
        ("llamacpp", (DATA / "llamacpp_logs" / "ci_b4446_t4vulkan_pythia28b_q8_0.log",)),
    ],
)
def test_every_engines_explain_json_has_the_shared_keys(engine, args):
    # the README promises these keys for each engine's log, so that one reader reads them all
    done = memsight("explain", *map(str, args), "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert KEYS <= set(out) and out["engine"] == engine


def test_partial_unknown_and_misdirected_are_one_line_exit_2():
    partial = (
        'time=2025-01-01T00:00:01Z level=INFO source=server.go:380 msg="starting llama server" '
        'cmd="/usr/bin/ollama runner --model /m --ctx-size 2048 --parallel 1 --port 1"\n'
    )
    for args, stdin, start in (
        (("explain", "-"), partial, "memsight: the log stops after the runner started"),
        (("explain", "-"), "hello\n",
         "memsight: not a startup log memsight reads (SGLang, Ollama, llama.cpp, vLLM)"),
        (("explain", str(SGLANG), "--ctx-size", "8"), None, "memsight: --ctx-size is an Ollama setting"),
        (("explain", str(OLLAMA), "--max-num-seqs", "8"), None, "memsight: --max-num-seqs is a vLLM setting"),
    ):
        done = memsight(*args, stdin=stdin)
        assert done.returncode == 2 and done.stdout == "", args
        assert done.stderr.startswith(start) and done.stderr.count("\n") == 1, done.stderr


def test_plan_engine_sglang_and_ollama():
    sglang = json.loads(
        memsight("plan", "qwen2.5-7b", "--engine", "sglang", "--machine", "h100", "--json").stdout
    )
    s = sglang["sglang"]
    assert s["free_before_weights_bytes"] > 0 and s["max_total_num_tokens"] > 0
    assert s["kv_bytes_per_token"] == 28 * 4 * 128 * 2 * 2  # layers x KV heads x head_dim x K/V x bf16
    ollama = memsight(
        "plan", "qwen3-30b-a3b", "--engine", "ollama", "--format", "q8_0", "--num-ctx", "32768",
        "--ollama-version", "0.12.6", "--gpu-layers", "30", "--json",
    )  # fmt: skip
    o = json.loads(ollama.stdout)["ollama"]
    assert o["kv_gpu_bytes"] + o["kv_cpu_bytes"] == 3 * 2**30 and o["estimate_kv_bytes"] == 3 * 2**30
    refused = memsight("plan", "qwen3-8b", "--engine", "ollama", "--format", "awq")
    assert refused.returncode == 2 and refused.stderr.startswith("memsight: Ollama serves GGUF files")


def test_an_ollama_plan_prices_the_weights_ollama_loads_in_its_four_buckets_too():
    """The four buckets above Ollama's figures priced the Hugging Face checkpoint's bf16 (15.26 GiB for
    Qwen3-8B) while Ollama loads the library's q4_k_m: both now price the GGUF Ollama would pull."""
    o = json.loads(memsight("plan", "qwen3-8b", "--engine", "ollama", "--machine", "h100", "--json").stdout)
    assert o["format"] == "q4_k_m" == o["ollama"]["weight_format"]
    assert o["weight_bytes"] == o["ollama"]["weights_gpu_bytes"] + o["ollama"]["weights_cpu_bytes"]


def test_engine_plans_say_how_their_users_relate_to_the_plan_s_max_users():
    sglang = memsight("plan", "qwen3-8b", "--engine", "sglang", "--machine", "h100", "--json").stdout
    tokens = json.loads(sglang)["sglang"]["max_total_num_tokens"]
    text = memsight("plan", "qwen3-8b", "--engine", "sglang", "--machine", "h100").stdout
    assert (
        f"which answers what: SGLang's pool holds max_total_num_tokens {tokens:,} tokens, so it serves "
        f"{tokens // 8192} users at 8,192 tokens at once" in text
    )
    ollama = memsight("plan", "qwen3-8b", "--engine", "ollama", "--machine", "h100").stdout
    assert "it serves 1 user(s) at once, each up to num_ctx 40,960 tokens (more wait in its queue)" in ollama
    assert 'memsight\'s "max users" (64) is how many users at 8,192 tokens fit the whole capacity' in ollama


def test_a_file_with_two_engines_starts_says_which_one_is_explained(tmp_path):
    """A vLLM start and a llama.cpp run pasted into one file: llama.cpp's is explained (the registry's order)
    and a note names the other run's lines; an engine's own log that embeds another's (Ollama's server log
    carries llama.cpp's lines, SGLang's carries vLLM's) gets no such note."""
    data = REPO_ROOT / "tests" / "data"
    vllm = (data / "vllm_logs" / "pr10511_v0.6.5dev_llama3-8b_h100_tp1.log").read_text()
    llama = (data / "llamacpp_logs" / "ci_b3448_x86cpu_pythia14b_q4_0.log").read_text()
    (tmp_path / "both.log").write_text(vllm + llama)
    notes = json.loads(memsight("explain", str(tmp_path / "both.log"), "--json").stdout)["notes"]
    assert notes[-1] == (
        "this file also holds vLLM's start-up lines (two runs in one file?): only llama.cpp's start is "
        "explained here; give each run's log on its own to explain the other"
    )
    for log, flags in (
        (data / "ollama_logs" / "ollama11292_llama3.1-8b-q4km_windows.log", ("--model", "llama-3.1-8b")),
        (SGLANG, ("--model", "qwen2.5-32b")),
    ):
        out = memsight("explain", str(log), *flags, "--json")
        assert out.returncode == 0, out.stderr
        assert not any("also holds" in note for note in json.loads(out.stdout)["notes"])


def test_tiny_figures_outside_the_screens_keep_three_significant_digits():
    # a 2.5 MiB GGUF's explain: each predicted term in its own unit, never "0.00 GiB"
    tiny = REPO_ROOT / "tests" / "data" / "llamacpp_local" / "b1_0c1e570_cpu_tiny_c4096_np2.log"
    explained = memsight("explain", str(tiny))
    assert explained.returncode == 0, explained.stderr
    terms = explained.stdout.split("how each predicted term is known:")[1]
    assert "    model buffer, host    2.53 MiB  PREDICTED" in terms
    assert "    KV cache              8.00 MiB  PREDICTED" in terms
    assert "0.00 GiB" not in terms and "0.01 GiB" not in terms
    # SGLang with one token of KV: 147,456 B of K + V buffers per token (qwen3-8b, bf16)
    one = memsight("plan", "qwen3-8b", "--engine", "sglang", "--machine", "h100", "--max-total-tokens", "1")
    assert one.returncode == 0, one.stderr
    sglang = one.stdout.split("  SGLang (")[1]
    assert "    K + V buffers              288 KiB" in sglang and " 0.00 GiB" not in sglang


def test_sglang_plan_with_no_kv_budget_prints_no_negative_pool():
    # 0.1 GiB free cannot hold qwen3-8b's 15.3 GiB of weights: SGLang stops before allocating its KV pool
    starved = memsight("plan", "qwen3-8b", "--engine", "sglang", "--free-gib", "0.1")
    assert starved.returncode == 0, starved.stderr
    sglang = starved.stdout.split("  SGLang (")[1]
    assert "    max_total_num_tokens         -      (none: the KV budget holds no token of 147,456 B" in (
        sglang
    )
    assert "    K + V buffers                -      (none: SGLang refuses to start" in sglang
    assert "-110,589" not in sglang and "-15." not in sglang
    assert "note: SGLang would refuse to start" in sglang
    doc = json.loads(memsight("plan", "qwen3-8b", "--engine", "sglang", "--free-gib", "0.1", "--json").stdout)
    s = doc["sglang"]
    assert s["max_total_num_tokens"] is None and s["k_bytes"] is None and s["v_bytes"] is None


def test_a_tp_that_splits_no_head_names_sglang_under_engine_sglang():
    refused = memsight("plan", "qwen3-8b", "--engine", "sglang", "--machine", "h100", "--tp", "3")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == (
        "memsight: tp=3 does not divide the 32 attention heads of qwen3-8b "
        "(vLLM and SGLang both require num_attention_heads % tensor_parallel_size == 0)\n"
    )


def test_top_level_help_names_every_engine_explain_reads():
    from planner.engines import engine_names

    shown = memsight("--help")
    assert shown.returncode == 0, shown.stderr
    explain = " ".join(shown.stdout.split("explain", 1)[1].split("\n  lab")[0].split())
    assert explain.startswith("a vLLM, SGLang, Ollama or llama.cpp startup log")
    labels = {"vllm": "vLLM", "sglang": "SGLang", "ollama": "Ollama", "llamacpp": "llama.cpp"}
    assert all(labels[name] in explain for name in engine_names())  # an engine added names itself here
