"""vLLM's start-up admission rule (planner/engines/vllm/startup.py) on recorded cases
(tests/data/vllm_startup): the verdict vLLM itself gave, failing and passing, with the fix proposed."""

from __future__ import annotations

import json
import pathlib

import pytest

from planner.engines.vllm.startup import (
    DeviceMemory,
    admission,
    largest_passing_utilization,
    read_printed,
    verdict_line,
)

GiB, MiB, KiB = 2**30, 2**20, 2**10
DATA = pathlib.Path(__file__).resolve().parent.parent / "data"
CASES = json.loads((DATA / "vllm_startup" / "cases.json").read_text())


def _case(prefix: str) -> dict:
    return next(c for c in CASES["cases"] if c["name"].startswith(prefix))


def _printed(case: dict):
    text = (DATA / "vllm_logs" / case["log"]).read_text() if "log" in case else case["printed"]
    printed = read_printed(text)
    assert printed is not None, case["name"]
    return printed


def _device(case: dict) -> DeviceMemory:
    printed = _printed(case)
    return DeviceMemory(
        total=printed.total,
        cuda_free=printed.free if "mem_available_kb" not in case else None,
        mem_free=case["mem_free_kb"] * KiB if "mem_free_kb" in case else None,
        mem_available=case["mem_available_kb"] * KiB if "mem_available_kb" in case else None,
        integrated=case["integrated"],
        capability=tuple(case["capability"]) if "capability" in case else None,
    )


@pytest.mark.parametrize("case", CASES["cases"], ids=lambda c: c["name"].split(":")[0])
def test_the_verdict_is_the_one_vllm_gave(case):
    verdict = admission(case["version"], case["engine"], case["utilization"], _device(case))
    assert verdict.checked
    assert verdict.passes is (case["vllm_says"] == "passes")
    printed = _printed(case)
    if printed.requested is not None:  # vLLM's own request, from the same (two-decimal) total: to 0.01 GiB
        assert abs(verdict.requested - printed.requested) < 0.01 * GiB
    assert (verdict.margin >= 0) is verdict.passes


def test_discrete_refusal_proposes_the_utilization_that_passes():
    case = _case("kvcached29")
    verdict = admission("0.9.2", "V1", 0.9, _device(case))
    assert verdict.reads == "cudaMemGetInfo free" and verdict.passing_utilization == 0.74  # 59.32 / 79.15
    assert verdict.fixes[0].startswith("--gpu-memory-utilization 0.74 passes now (58.57 GiB requested of")
    line = verdict_line(verdict)
    assert line.startswith("vLLM 0.9.2 start-up check: FAILS by 11.92 GiB: reads cudaMemGetInfo free 59.32")


def test_gb10_on_0_24_reads_mem_available_and_dropping_the_cache_would_not_help():
    case = _case("vllm#48140")
    device = _device(case)
    verdict = admission("0.24.0", "V1", 0.5, device)
    # MemAvailable 59,063,644 kB = 56.33 GiB (vLLM's own read, a moment apart, printed 55.87) < 0.5 x 119.56
    assert verdict.reads == "MemAvailable" and verdict.free == 59063644 * KiB
    assert round(verdict.margin / GiB, 2) == -3.45
    assert verdict.passing_utilization == 0.47
    assert any("dropping the page cache gains nothing here" in f for f in verdict.fixes)
    # the same machine under 0.11.0, which read cudaMemGetInfo's free (MemFree on a GB10): far worse, and the
    # page cache (MemAvailable - MemFree = 31,251,504 kB = 29.80 GiB) would not cover the 33.26 GiB missing
    old = admission("0.11.0", "V1", 0.5, device)
    assert old.reads == "cudaMemGetInfo free (MemFree here)" and old.free == 27812140 * KiB
    assert round(-old.margin / GiB, 2) == 33.26
    assert "dropping the page cache gives back about 29.80 GiB: not the 33.26 GiB missing" in old.fixes


def test_gh200_before_and_after_vllm_pr_35356():
    device = _device(_case("vllm PR 35356"))
    before = admission("0.19.0", "V1", 0.9, device)  # 9.0 is not in the capability list: cudaMemGetInfo
    assert before.reads == "cudaMemGetInfo free (MemFree here)" and not before.passes
    after = admission("0.20.0", "V1", 0.9, device)  # is_integrated: MemAvailable, which the PR did not print
    assert after.reads == "MemAvailable" and after.passes is None
    assert "not measured here" in verdict_line(after)


@pytest.mark.parametrize(
    ("when", "passes_0_11_0"),
    [("baseline", True), ("after writing 60GB", False), ("after deleting the file", True)],
)
def test_page_cache_written_on_a_gb10_refuses_0_11_0_only(when, passes_0_11_0):
    record = CASES["page_cache"]
    state = next(s for s in record["states"] if s["when"] == when)
    device = DeviceMemory(
        total=round(record["total_gib"] * GiB),
        cuda_free=round(state["cuda_free_gib"] * GiB),
        mem_free=round(state["mem_free_gib"] * GiB),
        mem_available=round(state["mem_available_gib"] * GiB),
        integrated=True,
        capability=(12, 1),
    )
    old = admission("0.11.0", "V1", 0.8, device)  # requests 0.8 x 121.69 = 97.35 GiB of MemFree
    assert old.passes is passes_0_11_0
    if not passes_0_11_0:
        short = old.requested - old.free
        assert round(short / GiB, 2) == 55.83
        page_cache = next(f for f in old.fixes if f.startswith("the page cache the kernel can give back"))
        assert "(74.13 GiB, MemAvailable - MemFree) covers the 55.83 GiB missing" in page_cache
        assert "vLLM 0.11.1 or later" in page_cache
    assert admission("0.11.1", "V1", 0.8, device).passes  # the capability list: MemAvailable 115.65 GiB
    assert admission("0.24.0", "V1", 0.8, device).passes


def test_kv_cache_memory_bytes_is_worked_out_and_paired_with_a_utilization_that_passes():
    device = DeviceMemory(total=80 * GiB, cuda_free=50 * GiB)
    verdict = admission("0.33.0", "V1", 0.9, device, non_kv_bytes=20 * GiB)
    assert not verdict.passes and verdict.passing_utilization == 0.62  # ceil(80 GiB x 0.62) <= 50 GiB
    assert verdict.kv_cache_memory_bytes == 50 * GiB - 20 * GiB - 150 * MiB
    kv = next(f for f in verdict.fixes if f.startswith("--kv-cache-memory-bytes"))
    assert kv.startswith(f"--kv-cache-memory-bytes {30 * GiB - 150 * MiB} (29.85 GiB") and "0.62" in kv
    full = admission("0.33.0", "V1", 0.9, device, non_kv_bytes=60 * GiB)
    assert full.kv_cache_memory_bytes is None and any(f.startswith("no KV cache fits") for f in full.fixes)


def test_versions_without_the_check_and_the_rounding_of_the_request():
    device = DeviceMemory(total=80 * GiB, cuda_free=GiB)
    for version, engine in (("0.9.0", "V1"), ("0.8.5", "V1"), ("0.10.2", "V0")):
        verdict = admission(version, engine, 0.9, device)
        assert not verdict.checked and verdict.passes
    # ceil(T x u) fits exactly what is free: passes; one byte less free: fails
    total = 79 * GiB + 12345
    need = -(-total * 9 // 10)
    assert admission("0.24.0", "V1", 0.9, DeviceMemory(total, need)).passes
    assert not admission("0.24.0", "V1", 0.9, DeviceMemory(total, need - 1)).passes
    assert largest_passing_utilization(need - 1, total) == 0.89


def test_memsight_plan_checks_a_saved_gb10_meminfo_and_this_machine(tmp_path):
    from tests.conftest import run_memsight

    # a GB10's MemTotal (127,600,748 kB: ../shared/fixtures/nvml_gb10_ctypes_memoryinfo_nvitop-208.txt) with
    # the MemFree / MemAvailable unsloth PR 10704 recorded after writing a 60 GiB file (cases.json)
    state = next(s for s in CASES["page_cache"]["states"] if s["when"] == "after writing 60GB")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(
        "MemTotal:       127600748 kB\n"
        f"MemFree:        {round(state['mem_free_gib'] * 2**20)} kB\n"
        f"MemAvailable:   {round(state['mem_available_gib'] * 2**20)} kB\n"
    )
    args = ["plan", "llama-3.1-8b", "--engine", "vllm", "--machine", "spark", "--meminfo", str(meminfo)]
    old = run_memsight(*args, "--vllm-version", "0.11.0", "--gpu-memory-utilization", "0.8")
    assert old.returncode == 0, old.stderr
    verdict = "vLLM 0.11.0 start-up check: FAILS by 55.83 GiB: reads cudaMemGetInfo free (MemFree here) 41.52"
    assert verdict in old.stdout
    assert "fix: the page cache the kernel can give back (74.13 GiB, MemAvailable - MemFree)" in old.stdout
    new = run_memsight(*args, "--vllm-version", "0.24.0", "--gpu-memory-utilization", "0.8", "--json")
    doc = json.loads(new.stdout)["vllm_startup"]
    assert doc["passes"] is True and doc["reads"] == "MemAvailable" and doc["margin_gib"] == 18.3
    # this machine: without a GPU the check does not apply, and it says so rather than guessing
    from tui.cmd_plan import probe_gpu

    here = run_memsight("plan", "llama-3.1-8b", "--engine", "vllm", "--machine", "this")
    assert here.returncode == 0, here.stderr
    gpu, _ = probe_gpu()
    expected = "vLLM's CUDA start-up check does not apply" if gpu is None else "vLLM 0.33.0 start-up check: "
    assert expected in here.stdout
    refused = run_memsight("plan", "llama-3.1-8b", "--meminfo", str(meminfo))
    assert refused.returncode == 2 and "--meminfo only make sense with --engine vllm" in refused.stderr


def test_this_machine_with_a_discrete_gpu_reads_nvml_free(monkeypatch):
    import sys

    from tests.planner.test_cli_plan import _FakeNVML
    from tui import cmd_plan
    from tui.cli import build_parser
    from tui.startup_check import startup_check

    # the idle H100's recorded free (81106 MiB, nvidia-smi -a in ../shared/fixtures) behind the NVML interface
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNVML("NVIDIA H100 80GB HBM3", 81559 * MiB, 81106 * MiB))
    argv = ["plan", "llama-3.1-8b", "--engine", "vllm", "--machine", "this", "--vllm-version", "0.19.0"]
    parser, _ = build_parser(argv)
    args = parser.parse_args(argv)
    plan, pool = cmd_plan.compute(args)
    verdict, measured = startup_check(args, plan, pool)
    assert verdict.reads == "cudaMemGetInfo free" and verdict.free == 81106 * MiB
    assert measured.startswith("NVML device 0 (NVIDIA H100 80GB HBM3): free now; total as vLLM reads it")
    # the H100's recorded mem_get_info total (79.22 GiB, vllm PRs 10511, 12126): 0.9 of it leaves 7.91 GiB
    assert round(verdict.total / GiB, 2) == 79.22 and verdict.passes
    assert round(verdict.margin / GiB, 2) == 7.91


@pytest.mark.parametrize(
    "content",
    [
        bytes.fromhex("c4ed470515f529ae22c68e40c63d0070"),  # the audit's junk.bin: not UTF-8
        b"MemTotal: 127600748 kB\x00\x00\nMemAvailable: 1 kB\n",  # ASCII with NULs
        "MemTotal: 127600748 kB\nMemAvailable: 12345 kB\nZurück: 1 kB\n".encode(),  # not ASCII
    ],
)
def test_a_binary_meminfo_file_is_one_line_exit_2(tmp_path, content):
    from tests.conftest import run_memsight

    junk = tmp_path / "junk.bin"
    junk.write_bytes(content)
    done = run_memsight("plan", "llama-3.1-8b", "--engine", "vllm", "--meminfo", str(junk))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"memsight: {junk}: binary data, not a copy of /proc/meminfo\n"


@pytest.mark.parametrize(
    "machine", [("--machine", "h100"), ("--machine", "rtx4090"), ("--capacity-gib", "80")]
)
def test_meminfo_with_a_discrete_gpu_is_refused_in_one_line(tmp_path, machine):
    from tests.conftest import run_memsight

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 127600748 kB\nMemFree: 43537000 kB\nMemAvailable: 121530000 kB\n")
    done = run_memsight("plan", "llama-3.1-8b", "--engine", "vllm", *machine, "--meminfo", str(meminfo))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("memsight: --meminfo gives host memory only; ")
    assert "free memory, which vLLM's start-up check reads, comes from NVML" in done.stderr
    assert done.stderr.count("\n") == 1


def test_meminfo_with_this_machine_s_discrete_gpu_is_refused_too(tmp_path, monkeypatch):
    import sys

    from planner.errors import PlannerError
    from tests.planner.test_cli_plan import _FakeNVML
    from tui import cmd_plan
    from tui.cli import build_parser
    from tui.startup_check import startup_check

    monkeypatch.setitem(sys.modules, "pynvml", _FakeNVML("NVIDIA H100 80GB HBM3", 81559 * MiB, 81106 * MiB))
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 127600748 kB\nMemFree: 43537000 kB\nMemAvailable: 121530000 kB\n")
    argv = ["plan", "llama-3.1-8b", "--engine", "vllm", "--machine", "this", "--meminfo", str(meminfo)]
    parser, _ = build_parser(argv)
    args = parser.parse_args(argv)
    plan, pool = cmd_plan.compute(args)
    with pytest.raises(PlannerError, match="NVIDIA H100 80GB HBM3's free memory, .* comes from NVML"):
        startup_check(args, plan, pool)


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        # the audit's mi_bad: MemFree above MemTotal, then a negative MemAvailable
        (("MemTotal: 127600748 kB", "MemFree: 200000000 kB", "MemAvailable: 100 kB"),
         "MemFree 200000000 kB is outside 0 .. MemTotal 127600748 kB"),
        (("MemTotal: 127600748 kB", "MemFree: 1000 kB", "MemAvailable: -5 kB"),
         "MemAvailable -5 kB is outside 0 .. MemTotal 127600748 kB"),
        (("MemTotal: 0 kB", "MemFree: 0 kB", "MemAvailable: 0 kB"), "MemTotal 0 kB"),
        (("MemTotal: 127600748 kB", "MemAvailable: 100 kB"),
         "has no MemFree line; cannot check vLLM's start-up"),
    ],
)
def test_an_impossible_or_short_meminfo_is_refused_in_one_line(tmp_path, lines, said):
    from tests.conftest import run_memsight

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("\n".join(lines) + "\n")
    args = ["plan", "llama-3.1-8b", "--engine", "vllm", "--machine", "spark", "--vllm-version", "0.10.0"]
    done = run_memsight(*args, "--meminfo", str(meminfo))
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1
    assert said in done.stderr and "'this' machine" not in done.stderr


def test_no_utilization_above_1_is_ever_proposed():
    # a discrete GPU whose NVML free reads above the recorded cudaMemGetInfo total it is checked against
    total = 80 * GiB
    verdict = admission("0.24.0", "V1", 0.9, DeviceMemory(total, cuda_free=125 * GiB), non_kv_bytes=20 * GiB)
    assert verdict.passes and verdict.passing_utilization == 1.0
    assert largest_passing_utilization(125 * GiB, total) == 1.0
    assert not any("utilization 1.5" in fix for fix in verdict.fixes), verdict.fixes
    assert "with --gpu-memory-utilization 1.00" in verdict.fixes[0]
    # nothing passes: what has to give is said instead of a utilization
    starved = admission("0.24.0", "V1", 0.9, DeviceMemory(total, cuda_free=GiB // 2))
    assert starved.passing_utilization is None
    assert starved.fixes[0] == (
        "no --gpu-memory-utilization passes: even 0.01 asks for 0.80 GiB, more than the 0.50 GiB "
        "cudaMemGetInfo free; what holds the memory now has to give it back first"
    )


def test_a_passing_check_from_a_file_says_whose_memory_and_proposes_no_fix(tmp_path):
    from tests.conftest import run_memsight

    meminfo = tmp_path / "meminfo"  # the audit's mi_ok: a GB10 with 115.90 GiB available
    meminfo.write_text("MemTotal: 127600748 kB\nMemFree: 43537000 kB\nMemAvailable: 121530000 kB\n")
    done = run_memsight("plan", "llama-3.1-8b", "--engine", "vllm", "--meminfo", str(meminfo))
    assert done.returncode == 0, done.stderr
    assert f"will it start? vLLM's start-up check with {meminfo}'s memory:" in done.stdout
    assert "on this machine now" not in done.stdout
    # vLLM 0.33 (the default version) asks for its default 0.92 x 121.69 GiB = 111.95 GiB
    assert "start-up check: passes by 3.95 GiB" in done.stdout and "fix:" not in done.stdout
    assert "    or size the KV cache: --kv-cache-memory-bytes " in done.stdout
