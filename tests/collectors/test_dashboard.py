"""The shipped Grafana dashboard and Prometheus scrape example (contrib/) against what the exporter really
serves: a state with every source (a fixed host snapshot, NVML replayed from a recorded nvidia-smi, an agent
with real allocator statistics, a vLLM scrape) rendered by the exporter and parsed back; every series a
dashboard query names, and every label its legend uses, must be there."""

from __future__ import annotations

import json
import re
from dataclasses import replace

from collectors.exporter import PrometheusExporter
from collectors.snapshots import AgentRecord, KernelLogStatus, OSSnapshot, PoolDetail, ProcessInfo
from collectors.state import StateBuilder
from collectors.vllm_metrics import parse_prometheus_text, vllm_snapshot_from_text
from tests.collectors.test_vllm_metrics import V1_TWO_ENGINES
from tests.conftest import REPO_ROOT, SHARED_FIXTURES, needs_shared

DASHBOARD = REPO_ROOT / "contrib" / "grafana" / "memsight-dashboard.json"
SCRAPE_EXAMPLE = REPO_ROOT / "contrib" / "prometheus" / "prometheus.yml"
MiB = 2**20
SERIES = re.compile(r"\bmemsight_[a-z0-9_]+\b")
LEGEND_LABEL = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")
ADDED_BY_PROMETHEUS = {"instance", "job"}  # target labels Prometheus attaches at scrape time


def _served() -> dict[str, set[str]]:
    """{series name: label names} of one scrape of a state where every source has figures."""
    from collectors.nvidia_smi import SmiBackend
    from collectors.nvml_collector import NVMLCollector
    from collectors.torch_stats import derive, parse_memory_summary

    builder = StateBuilder()
    builder.update_os(
        OSSnapshot(
            t=1.0,
            mem_total=64 * 2**30,
            mem_available=10 * 2**30,
            cached=3 * 2**30,
            shmem=2**30,
            swap_total=2**30,
            swap_free=2**30,
            psi_some_avg10=1.5,
            psi_full_avg10=0.5,
            oom_kill=0,
            source="proc",
            processes=(
                ProcessInfo(
                    pid=3361, name="python", cmdline="", user="u", rss=900 * MiB, growth_bytes=0, is_new=False
                ),
            ),
        )
    )
    smi = (SHARED_FIXTURES / "nvidia-smi_rtx3090_vllm-22382MiB_590.48.01.txt").read_text()
    builder.update_nvml(NVMLCollector(SmiBackend.from_text(smi)).sample())
    stats = derive(
        parse_memory_summary((SHARED_FIXTURES / "memory_summary_zerollama_minicpm.txt").read_text())
    )
    builder.agent_track(3361, 7, "python serve.py", "", 10.0)
    record = AgentRecord(
        t=1.0, device=0, cuda_state="ok", cuda_free=1000 * MiB, cuda_total=24576 * MiB,
        is_integrated=False, rss=900 * MiB, weights_bytes=5000 * MiB, kv_bytes=400 * MiB,
        step_index=1, step_label="decode", step_t=1.0, tick_cost_s=None, **stats,
    )  # fmt: skip
    # two allocator samples in one step: the activation peak is measured (allocated rises 64 MiB)
    earlier = replace(record, t=0.75, allocated=record.allocated - 64 * MiB)
    builder.update_agent((3361, 7), (earlier, record))
    builder.update_vllm(vllm_snapshot_from_text(V1_TWO_ENGINES, url="http://v/metrics"))
    builder.dropped["os"] = 1
    # the pool's detail (collectors/pool.py): the experiment's mapped files and a readable kernel log
    builder.update_pool(PoolDetail(t=1.0, files=((3361, 300 * MiB),), kernel_log=KernelLogStatus(True, "")))
    state = builder.build(2.0)
    scrape = parse_prometheus_text(PrometheusExporter(lambda: state).render())
    served: dict[str, set[str]] = {}
    for sample in scrape.samples:
        served.setdefault(sample.name, set()).update(k for k, _ in sample.labels)
    return served


def _targets() -> list[dict]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t for panel in dashboard["panels"] for t in panel["targets"]]


def _problems(targets: list[dict], served: dict[str, set[str]]) -> list[str]:
    problems = []
    for target in targets:
        names = SERIES.findall(target["expr"])
        if not names:
            problems.append(f"{target['expr']}: names no memsight series")
        for name in names:
            if name not in served:
                problems.append(f"{target['expr']}: {name} is not served")
        labels = set().union(*(served.get(n, set()) for n in names)) | ADDED_BY_PROMETHEUS
        for label in LEGEND_LABEL.findall(target.get("legendFormat", "")):
            if label not in labels:
                problems.append(f"{target['expr']}: legend label {label!r} is on none of its series")
    return problems


@needs_shared
def test_every_dashboard_query_names_a_served_series_and_its_labels():
    served = _served()
    targets = _targets()
    assert len(targets) >= 20
    assert _problems(targets, served) == []
    used = {n for t in targets for n in SERIES.findall(t["expr"])}
    # the dashboard shows the memory series that matter, not a token few
    for must in (
        "memsight_gpu_memory_used_bytes",
        "memsight_headroom_bytes",
        "memsight_agent_reserved_bytes",
        "memsight_agent_kv_bytes",
        "memsight_agent_activations_bytes",
        "memsight_vllm_kv_cache_usage_ratio",
        "memsight_agent_num_ooms_total",
    ):
        assert must in used, must


@needs_shared
def test_the_check_catches_a_misspelled_series_and_a_wrong_legend_label():
    served = _served()
    bad = [
        {"expr": 'memsight_gpu_memory_used_byte{instance=~"$instance"}', "legendFormat": "{{gpu}}"},
        {"expr": "memsight_headroom_bytes", "legendFormat": "{{gpu}}"},  # headroom has `source`, no `gpu`
    ]
    assert _problems(bad, served) == [
        'memsight_gpu_memory_used_byte{instance=~"$instance"}: memsight_gpu_memory_used_byte is not served',
        "memsight_gpu_memory_used_byte{instance=~\"$instance\"}: legend label 'gpu' is on none of its series",
        "memsight_headroom_bytes: legend label 'gpu' is on none of its series",
    ]


def test_scrape_example_points_at_the_exporter_path():
    text = SCRAPE_EXAMPLE.read_text()
    assert re.search(r"^\s*metrics_path:\s*/metrics\s*$", text, re.M)
    assert re.search(r"^\s*- job_name:\s*memsight\s*$", text, re.M)
    assert "--prometheus 0.0.0.0:9400" in text and "- gpu-node-1:9400" in text
