"""How explain() resolves the run from a vLLM startup log: the model, version, device total and engine
settings (each from a flag, the log or the version's default, listed with where it came from), gathered in
_Run, the inputs of the prediction (planner/engines/vllm/explain.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from planner import limits
from planner.engines.base import Figure, setting_number
from planner.engines.vllm.log import VLLMLog
from planner.engines.vllm.overheads import WSL_TOTALS, Device, GraphSetup, device_total
from planner.engines.vllm.version import (
    Version,
    default_engine,
    default_gpu_memory_utilization,
    parse_version,
)
from planner.errors import PlannerError
from planner.units import GiB


def _gib(figure: Figure | None) -> float | None:
    return None if figure is None else figure.value


def _whole(text: str | None, where: str, name: str, hi: int = limits.MAX_CONFIG_INT) -> int | None:
    """The number in an engine setting ("2", "2,"), a whole number in [1, hi] (setting_number); None when
    the setting is absent or None."""
    if text is None or str(text).strip() in ("", "None"):
        return None
    m = re.search(r"-?\d+(?:\.\d+)?", str(text))
    return int(setting_number(m.group(0) if m else str(text), name, where, 1, hi))


def _weight_format(
    log: VLLMLog, names: str, spec_format: str, quant: str, quant_from: str = "log"
) -> tuple[str | None, str]:
    """The weight format vLLM loads, from --quantization / the config line / the model's name."""
    load_format = (log.setting("load_format") or "").lower()
    quant = quant.lower()
    name = names.lower()
    if "bitsandbytes" in (quant + load_format) or "bnb-4bit" in name or "bnb_4bit" in name:
        return "bnb_nf4", "bitsandbytes 4-bit (quantization/load_format or the *-bnb-4bit name)"
    if quant == "modelopt" and "fp4" in name:
        return "nvfp4", "quantization=modelopt and an NVFP4 name"
    for key, fmt in (("awq", "awq"), ("gptq", "gptq"), ("fp8", "fp8"), ("mxfp4", "mxfp4"), ("fp4", "nvfp4")):
        if key in quant:
            return fmt, f"quantization={quant} " + ("given (-q)" if quant_from == "given" else "in the log")
    if "compressed-tensors" in quant and "w8a8" in name:
        return "int8", "compressed-tensors W8A8 (int8) by the model's name"
    for key, fmt in (
        ("-awq", "awq"),
        ("-gptq", "gptq"),
        ("-fp8", "fp8_block"),
        ("w8a8", "int8"),
        ("nvfp4", "nvfp4"),
    ):
        if key in name:
            return fmt, f"the model name says {fmt}"
    return None, f"the checkpoint's own format ({spec_format})"


class _Settings:
    """Engine settings by name: a flag (`given`, labelled "given") wins over the log ("log"); else "default"
    (None)."""

    def __init__(self, log: VLLMLog, given: dict[str, str]) -> None:
        self.log = log
        self.given = given

    def __call__(self, *names: str) -> tuple[str | None, str]:
        for name in names:
            if self.given.get(name) is not None:
                return str(self.given[name]), "given"
        value = self.log.setting(*names)
        return value, ("log" if value is not None else "default")


@dataclass(frozen=True, slots=True)
class _Run:
    """What explain() resolved about the run: the inputs of the prediction (each listed with its origin)."""

    model_id: str
    spec: Any  # planner.spec.ModelSpec
    version: str
    engine: str
    device: Device | None
    total_bytes: int
    total_how: str
    total_source: str
    utilization: float
    max_model_len: int
    tp: int
    pp: int
    kv_dtype: str
    enforce_eager: bool
    prefix_caching: bool | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    weight_format: str | None  # None: the checkpoint's own
    sampler_path: str | None
    block_size: int = 16
    dp: int = 1
    expert_parallel: bool = False
    async_scheduling: bool = False
    graphs: GraphSetup = GraphSetup()
    platform: str = "cuda"


def _resolve_run(
    log: VLLMLog,
    setting: _Settings,
    inputs: list[tuple[str, str, str]],
    model: str | None,
    version: str | None,
    gpu: str | None,
    total_bytes: int | None,
    allow_download: bool,
) -> _Run:
    """The model, version, device total and engine settings, from flags and the log, in the order a user
    reads them (each appended to `inputs` with where it came from)."""
    model_id, spec = _model(log, model, allow_download)
    inputs.append(("model", model_id, "--model" if model else "log"))
    ver_text = version or log.version
    if ver_text is None:
        raise PlannerError(
            "the log does not say which vLLM version wrote it: give --vllm-version (e.g. 0.10.1)"
        )
    ver = parse_version(ver_text)
    inputs.append(("vLLM version", ver_text, "--vllm-version" if version else "log"))
    engine = log.engine or default_engine(ver)
    inputs.append(("engine", engine, "log" if log.engine else "default for the version"))
    device, total_bytes, total_how, total_source = _device_total(log, gpu, total_bytes, inputs)
    utilization = _utilization(log, setting, inputs, ver)
    max_model_len = _max_model_len(log, setting, spec, inputs)
    tp, pp = _parallel_sizes(setting, inputs)
    kv_dtype, enforce_eager, prefix_caching = _cache_settings(setting, inputs)
    mns = _whole(*setting("max_num_seqs"), "max_num_seqs")
    mnbt = _whole(*setting("max_num_batched_tokens"), "max_num_batched_tokens")
    fmt = _resolved_weight_format(log, setting, inputs, model_id, spec)
    # Which top-k/top-p implementation the dummy sampler run uses is the installation's (FlashInfer is
    # optional before 0.26), not the config's; where the log states it, that line decides.
    sampler_path = "flashinfer" if log.flashinfer_sampler_line is not None else None
    if sampler_path is not None:
        inputs.append(("sampler", "FlashInfer top-k/top-p", f"log line {log.flashinfer_sampler_line}"))
    extra = _engine_extras(log, setting, inputs, parse_version(ver_text), engine)
    return _Run(
        model_id=model_id,
        spec=spec,
        version=ver_text,
        engine=engine,
        device=device,
        total_bytes=total_bytes,
        total_how=total_how,
        total_source=total_source,
        utilization=utilization,
        max_model_len=max_model_len,
        tp=tp,
        pp=pp,
        kv_dtype=kv_dtype,
        enforce_eager=enforce_eager,
        prefix_caching=prefix_caching,
        max_num_seqs=mns,
        max_num_batched_tokens=mnbt,
        weight_format=fmt,
        sampler_path=sampler_path,
        **extra,
    )


def _parallel_sizes(setting: _Settings, inputs: list[tuple[str, str, str]]) -> tuple[int, int]:
    tp_text, tp_from = setting("tensor_parallel_size")
    pp_text, pp_from = setting("pipeline_parallel_size")
    tp = _whole(tp_text, tp_from, "tensor_parallel_size", limits.MAX_PARALLEL) or 1
    pp = _whole(pp_text, pp_from, "pipeline_parallel_size", limits.MAX_PARALLEL) or 1
    inputs.append(("tensor/pipeline parallel", f"{tp}/{pp}", f"{tp_from}/{pp_from}"))
    return tp, pp


def _cache_settings(setting: _Settings, inputs: list[tuple[str, str, str]]) -> tuple[str, bool, bool | None]:
    """The KV cache dtype ("auto" unless set), enforce_eager, and prefix caching (None: not said)."""
    kv_text, kv_from = setting("kv_cache_dtype")
    kv_dtype = (kv_text or "auto").strip()
    if kv_dtype in ("auto", "None"):
        kv_dtype = "auto"
    else:
        inputs.append(("KV cache dtype", kv_dtype, kv_from))
    eager_text, eager_from = setting("enforce_eager")
    enforce_eager = _true(eager_text)
    if eager_text is not None:
        inputs.append(("enforce_eager", str(enforce_eager), eager_from))
    epc_text = setting("enable_prefix_caching")[0]
    prefix_caching = None if epc_text in (None, "None") else epc_text.strip() in ("True", "true", "1")
    return kv_dtype, enforce_eager, prefix_caching


def _resolved_weight_format(
    log: VLLMLog, setting: _Settings, inputs: list[tuple[str, str, str]], model_id: str, spec: Any
) -> str | None:
    """The weights' format as flags, the log or the model's name say; None where the checkpoint's own
    quantization_config decides (the spec's default format)."""
    quant_text, quant_from = setting("quantization")
    names = f"{model_id} {log.model or ''}"
    fmt, fmt_why = _weight_format(log, names, spec.default_format, quant_text or "", quant_from)
    if spec.quantization is not None:  # the checkpoint's own quantization_config says what it is
        fmt, fmt_why = None, f"the checkpoint's quantization_config ({spec.default_format})"
    inputs.append(("weights format", fmt or spec.default_format, fmt_why))
    return fmt


def _true(text: str | None) -> bool:
    return (text or "False").strip() in ("True", "true", "1")


def _engine_extras(
    log: VLLMLog,
    setting: _Settings,
    inputs: list[tuple[str, str, str]],
    ver: tuple[int, int, int],
    engine: str,
) -> dict[str, Any]:
    """Block size, data / expert parallelism, async scheduling and what decides the CUDA-graph estimate:
    settings the log or a flag states, each listed with where it came from."""
    extra: dict[str, Any] = {}
    block_text, block_from = setting("block_size")
    block_size = _whole(block_text, block_from, "block_size")
    if block_size is not None:
        extra["block_size"] = block_size
        inputs.append(("block size", str(block_size), block_from))
    dp_text, dp_from = setting("data_parallel_size")
    ep_text, ep_from = setting("enable_expert_parallel")
    extra["dp"] = _whole(dp_text, dp_from, "data_parallel_size", limits.MAX_PARALLEL) or 1
    extra["expert_parallel"] = _true(ep_text)
    if extra["dp"] > 1 or extra["expert_parallel"]:
        inputs.append(
            (
                "data parallel / experts",
                f"{extra['dp']} / {'EP' if extra['expert_parallel'] else 'TP split'}",
                f"{dp_from}/{ep_from}",
            )
        )
    # Async scheduling is on by default in V1 unless an incompatible option turns it off
    # (v0.19.0:vllm/config/vllm.py:755-788, v0.29.0:config/vllm.py:1262-1311); from 0.26 it doubles the
    # tokens a sliding window keeps per request (max_in_flight_tokens, v0.29.0:config/vllm.py:559-580).
    async_text, async_from = setting("async_scheduling")
    if async_text is not None:
        extra["async_scheduling"] = _true(async_text)
    else:
        extra["async_scheduling"] = engine == "V1" and ver >= (0, 19, 0)
        async_from = "the version's default (V1 >= 0.19: on)" if extra["async_scheduling"] else "default"
    if extra["async_scheduling"] and ver >= (0, 26, 0):
        inputs.append(("async scheduling", "on", async_from))
    extra["graphs"] = _graph_setup(log, setting)
    platform = log.fact("platform")
    extra["platform"] = "rocm" if platform == "rocm" else "cuda"
    return extra


def _graph_setup(log: VLLMLog, setting: _Settings) -> GraphSetup:
    """What decides the CUDA-graph estimate, from a flag or the log: the env var (or the log's line saying
    which way it went), the cudagraph mode and capture sizes of the config line, the counts the estimate
    printed."""
    why: list[str] = []
    estimate_text, estimate_from = setting("estimate_cudagraphs")
    env: bool | None = None
    if estimate_text is not None:
        env = _true(estimate_text)
        why.append(f"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS={int(env)} {estimate_from}")
    elif log.fact("cudagraph_estimate") is not None:
        env = log.fact("cudagraph_estimate") == "deducted"
        why.append(
            f"the log says the estimate was {log.fact('cudagraph_estimate')} "
            f"(line {log.facts['cudagraph_estimate'][1]})"
        )
    mode = log.fact("cudagraph_mode") or "default"
    if mode != "default":
        why.append(f"cudagraph_mode {mode} (line {log.facts['cudagraph_mode'][1]})")
    sizes_text = log.fact("cudagraph_capture_sizes")
    sizes = None
    if sizes_text:
        where = f"line {log.facts['cudagraph_capture_sizes'][1]}"
        parts = [x for x in sizes_text.replace(" ", "").split(",") if x]
        sizes = tuple(sorted(_whole(x, where, "cudagraph_capture_sizes") for x in parts))
    graphs = None
    counted = log.fact("cudagraph_graphs")
    if counted:
        found = dict(re.findall(r"(PIECEWISE|FULL)=(\d+)", counted))
        where = f"line {log.facts['cudagraph_graphs'][1]}"
        graphs = tuple(
            int(setting_number(found.get(kind, "0"), f"{kind} graphs", where, 0, limits.MAX_CONFIG_INT))
            for kind in ("PIECEWISE", "FULL")
        )
    return GraphSetup(mode=mode, capture_sizes=sizes, graphs=graphs, estimate_env=env, why=tuple(why))


def _model(log: VLLMLog, model: str | None, allow_download: bool) -> tuple[str, Any]:
    from planner.spec import load_spec  # noqa: PLC0415  (reads configs; only needed here)

    model_id = model or log.model
    if not model_id:
        raise PlannerError(
            "the log does not name the model (no 'Initializing ... with config: model=...' line, no "
            "'non-default args' and no `vllm serve MODEL` line): give --model CONFIG"
        )
    try:
        spec = load_spec(model_id, allow_download=allow_download)
    except PlannerError as exc:
        from planner.catalog import catalog_variant_for  # noqa: PLC0415
        from planner.spec import catalog_variant_spec  # noqa: PLC0415

        # The log names a path on the machine that ran it (or a fine-tune of a catalog model): its last part
        # may be a catalog model's checkpoint name (/models/Qwen2.5-3B-Instruct -> qwen2.5-3b).
        variant = None if model else catalog_variant_for(model_id)
        if variant is not None:
            return model_id, catalog_variant_spec(model_id, variant)
        raise PlannerError(
            f"the log's model {model_id!r} is not in the local cache or the catalog ({exc}); give --model "
            f"CONFIG"
        ) from exc
    return model_id, spec


def _device_total(
    log: VLLMLog, gpu: str | None, total_bytes: int | None, inputs: list[tuple[str, str, str]]
) -> tuple[Device | None, int, str, str]:
    """(device, total, how, source): the device total from a flag, the log, or the recorded mem_get_info
    total of the named GPU."""
    logged_total = _gib(log.first("total"))
    total_how = "given"
    total_source = "--total-gib"
    device = device_total(gpu) if gpu is not None else None
    if device is not None and log.fact("wsl") and not device.key.endswith("-wsl"):
        # the log says WSL2: there mem_get_info's total is the card's frame buffer (overheads.WSL_TOTALS)
        wsl_line = log.facts["wsl"][1]
        if device.key in WSL_TOTALS:
            device = device_total(f"{device.key}-wsl")
            inputs.append(("WSL2", f"{device.key}'s WSL2 total", f"log line {wsl_line}"))
        else:
            held = f"no WSL2 total held for {device.key}: its native one"
            inputs.append(("WSL2", held, f"log line {wsl_line}"))
    if device is not None:
        inputs.append(("GPU", f"{device.name} (sm {device.capability[0]}.{device.capability[1]})", "--gpu"))
    # The log's own mem_get_info total wins over the --gpu table's (which was read on another machine of
    # that kind); --gpu still gives the name, capability and SM count vLLM keys on.
    if total_bytes is None and logged_total is not None:
        total_bytes = round(logged_total * GiB)
        total_how, total_source = "log", f"total_gpu_memory on line {log.first('total').line}"
    if total_bytes is None and device is not None:
        total_bytes = device.total_bytes
        total_source = f"--gpu {gpu}: {device.source}"
    if total_bytes is None:
        raise PlannerError(
            "the log does not state the device's total memory: give --gpu NAME (a recorded mem_get_info "
            "total) "
            "or --total-gib"
        )
    return device, total_bytes, total_how, total_source


def _utilization(log: VLLMLog, setting: _Settings, inputs: list[tuple[str, str, str]], ver: Version) -> float:
    util_text, util_from = setting("gpu_memory_utilization")
    util_fig = log.first("utilization")
    if util_text is not None and util_from == "given":
        util_text, util_how = util_text, "given"
    elif util_fig is not None:
        util_text, util_how = util_fig.text, "log"
    elif util_text is not None:
        util_how = "log"
    else:
        util_text = f"{default_gpu_memory_utilization(ver):g}"
        util_how = "default for the version (0.9, 0.92 from 0.20)"
    util = setting_number(util_text, "gpu_memory_utilization", util_how, 0.01, 1.0, integer=False)
    inputs.append(("gpu_memory_utilization", f"{util:g}", util_how))
    return util


def _max_model_len(log: VLLMLog, setting: _Settings, spec: Any, inputs: list[tuple[str, str, str]]) -> int:
    mml_fig = log.first("max_model_len")
    mml_text, mml_from = setting("max_seq_len", "max_model_len")
    if mml_text is not None and mml_from == "given":
        mml, mml_how = setting_number(mml_text, "max_model_len", "given", 1, limits.MAX_POSITIONS), "given"
    elif mml_fig is not None:
        mml, mml_how = setting_number(mml_fig.text, "max_model_len", "log", 1, limits.MAX_POSITIONS), "log"
    elif mml_text is not None:
        mml, mml_how = setting_number(mml_text, "max_model_len", "log", 1, limits.MAX_POSITIONS), "log"
    else:
        mml = int(spec.config.get("max_position_embeddings") or 0) or 4096
        mml_how = "default (the config's max_position_embeddings)"
    inputs.append(("max_model_len", str(mml), mml_how))
    return mml
