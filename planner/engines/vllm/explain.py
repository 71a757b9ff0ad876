"""A vLLM startup log next to the planner's prediction for the same model, GPU and engine arguments.

explain() takes a parsed log (planner/engines/vllm/log.py VLLMLog) and predicts the pool from the config
alone: the weights from the checkpoint's shapes and format, the activation peak from vLLM's profile run
(activation.py profile_activation), non-torch memory and CUDA graphs from the version's rules (overheads.py
predicted_non_torch / predicted_cudagraphs), and the device total as vLLM reads it. No figure the log
measured is fed into the prediction; the device total and the settings (model, max_model_len, TP, dtype,
gpu_memory_utilization, ...) are inputs, read from the log where it states them, else from flags.
to_worksheet() puts the result on the worksheet every engine shares (planner/engines/worksheet.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from planner import limits
from planner.engines.base import Figure, setting_number
from planner.engines.vllm.encoder import (
    encoder_profile,
    full_config,
    images_per_prompt,
    plain_vision_tower,
    plain_vision_weight_bytes,
    vision_tower,
    vision_weight_bytes,
)
from planner.engines.vllm.log import STAGE_WORDS, VLLMLog
from planner.engines.vllm.moe import expert_split_extras, vllm_weight_extras
from planner.engines.vllm.overheads import (
    WSL_TOTALS,
    Device,
    GraphSetup,
    device_total,
    non_torch_era,
    predicted_cudagraphs,
    predicted_non_torch,
)
from planner.engines.vllm.pool import VLLMPool, blocks_for_logged_tokens, vllm_pool
from planner.engines.vllm.runner_v2 import runs_model_runner_v2, with_consumed
from planner.engines.vllm.version import (
    Version,
    default_engine,
    default_gpu_memory_utilization,
    parse_version,
)
from planner.engines.worksheet import Row, Term, Worksheet, worksheet_json
from planner.errors import PlannerError
from planner.units import GiB

# stable keys of the rows, in the order they are printed
ROW_KEYS = (
    "device_total", "requested", "weights", "activation", "non_torch", "cudagraphs", "kv_pool", "num_blocks",
    "kv_tokens", "max_concurrency",
)  # fmt: skip
ROW_LABELS = {
    "device_total": "device total (GiB)",
    "requested": "requested budget (GiB)",
    "weights": "weights (GiB)",
    "activation": "activation peak (GiB)",
    "non_torch": "non-torch (GiB)",
    "cudagraphs": "CUDA graphs (GiB)",
    "kv_pool": "KV pool (GiB)",
    "num_blocks": "KV blocks",
    "kv_tokens": "KV tokens",
    "max_concurrency": "max concurrency (x)",
}


@dataclass(frozen=True, slots=True)
class Explanation:
    model: str
    version: str
    engine: str
    inputs: tuple[tuple[str, str, str], ...]  # (name, value, where from)
    terms: tuple[Term, ...]
    rows: tuple[Row, ...]
    pool: VLLMPool
    worksheet: str
    notes: tuple[str, ...]
    stage: str


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


def explain(
    log: VLLMLog,
    *,
    model: str | None = None,
    version: str | None = None,
    gpu: str | None = None,
    total_bytes: int | None = None,
    given: dict[str, str] | None = None,
    allow_download: bool = False,
) -> Explanation:
    """given: engine settings passed as flags (max_model_len, tensor_parallel_size, pipeline_parallel_size,
    gpu_memory_utilization, max_num_seqs, ...); they win over the log and are labelled "given"."""
    inputs: list[tuple[str, str, str]] = []
    notes: list[str] = []
    setting = _Settings(log, dict(given or {}))
    run = _resolve_run(log, setting, inputs, model, version, gpu, total_bytes, allow_download)
    spec = run.spec
    non_torch = predicted_non_torch(
        run.version,
        run.engine,
        run.tp * run.pp,
        tp=run.tp,
        enforce_eager=run.enforce_eager,
        device=run.device,
    )
    era = non_torch_era(run.version, run.engine, run.enforce_eager)
    pool, graphs, weight_notes, activation_notes, tower, non_torch = _predict_pool(
        run, setting, non_torch, notes
    )
    fmt = run.weight_format
    terms = _terms(run, pool, non_torch, graphs, weight_notes, activation_notes)
    rows = _rows(log, pool, terms, run.total_how, era, run.tp, fmt or spec.default_format)
    rows = _mark_clamped(rows, terms, notes)
    notes.extend(_not_modelled(run, log, pool))
    implied = _pool_the_tokens_imply(log, pool)
    if implied is not None:
        notes.append(implied)
    worksheet = _worksheet(log, pool)
    return Explanation(
        model=run.model_id,
        version=run.version,
        engine=run.engine,
        inputs=tuple(inputs),
        terms=terms,
        rows=rows,
        pool=pool,
        worksheet=worksheet,
        notes=(
            *notes,
            *(
                # the planner's "only the text decoder is counted": explain adds the vision tower itself
                a
                for a in spec.assumptions
                if not (tower is not None and a.startswith("multimodal config ("))
            ),
        ),
        stage=log.stage,
    )


def _terms(
    run: _Run,
    pool: VLLMPool,
    non_torch: Term,
    graphs: Term,
    weight_notes: list[str],
    activation_notes: list[str],
) -> tuple[Term, ...]:
    """The worksheet's terms, top to bottom: the pool is what the budget leaves after the others."""
    fmt = run.weight_format or run.spec.default_format
    return (
        Term("device total", run.total_bytes, run.total_how, run.total_source),
        Term("requested", pool.requested_bytes or 0, "PREDICTED",
             f"device total x {run.utilization:g} (a.1)"),
        Term("weights", pool.weights_bytes, "PREDICTED",
             "; ".join((f"planner.formats.weight_bytes: {fmt}", *weight_notes))),
        Term("activation peak", pool.activation_bytes, "PREDICTED",
             "; ".join(("planner/engines/vllm/activation.py (vLLM's profile run)", *activation_notes))),
        non_torch,
        graphs,
        Term("KV pool", pool.pool_bytes, "PREDICTED",
             "requested - weights - activation - non-torch - graphs"),
    )  # fmt: skip


def _mark_clamped(rows: tuple[Row, ...], terms: tuple[Term, ...], notes: list[str]) -> tuple[Row, ...]:
    """Where the predicted terms overrun the budget: a note first, and the pool row says which overran."""
    clamped = _clamped(terms)
    if not clamped:
        return rows
    notes.insert(0, clamped)
    overran = clamped.split(": ", 1)[1].split(";")[0]
    return tuple(
        replace(r, cause=f"clamped to 0: {overran}" + (f"; {r.cause}" if r.cause else ""))
        if r.key == "kv_pool"
        else r
        for r in rows
    )


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


def _predict_pool(
    run: _Run, setting: _Settings, non_torch: Term, notes: list[str]
) -> tuple[VLLMPool, Term, list[str], list[str], Any, Term]:
    """(pool, graph estimate, weight notes, activation notes, vision tower, non-torch): the pool sized as vLLM
    would, with what vLLM holds beyond the checkpoint (padded MoE experts, a vision tower), the encoder's
    profile run, what 0.27+ counts as consumed after its baseline (runner_v2.py) and the CUDA-graph estimate,
    each needing the pool's resolved scheduler limits first."""
    spec, device = run.spec, run.device
    activation_notes: list[str] = []
    size = _PoolSizer(run, non_torch.bytes)
    # The graph estimate needs the pool's resolved max_num_seqs, so the pool is sized once without graphs,
    # then again with them deducted.
    pool = size(run.max_num_seqs, run.max_num_batched_tokens, 0)
    non_torch = with_consumed(
        non_torch, run.spec, version=run.version, engine=run.engine, pool=pool,
        fmt=run.weight_format or spec.default_format, capability=device.capability if device else None,
        tp=run.tp, dp=run.dp, expert_parallel=run.expert_parallel,
    )  # fmt: skip
    size.non_torch_bytes = non_torch.bytes
    extra_weights, weight_notes = _weights_beyond_checkpoint(run)
    encoder, tower = _multimodal_parts(
        run, setting, pool, extra_weights, weight_notes, activation_notes, notes
    )
    if any(extra_weights):
        stage_weights = {r.pp_stage: r.weights_bytes for r in pool.ranks}
        size.weights_per_stage = [stage_weights[s] + extra_weights[s] for s in range(run.pp)]
        pool = size(pool.max_num_seqs, pool.max_num_batched_tokens, 0)
    if encoder is not None:
        size.activation_given = _with_encoder(pool, encoder, activation_notes)
        pool = size(pool.max_num_seqs, pool.max_num_batched_tokens, 0)
    graphs = predicted_cudagraphs(
        run.version,
        run.engine,
        pool.max_num_seqs,
        enforce_eager=run.enforce_eager,
        setup=run.graphs,
        platform=run.platform,
        tp=run.tp,
        max_num_batched_tokens=pool.max_num_batched_tokens,
    )
    if graphs.bytes:
        pool = size(pool.max_num_seqs, pool.max_num_batched_tokens, graphs.bytes)
    return pool, graphs, weight_notes, activation_notes, tower, non_torch


@dataclass(slots=True)
class _PoolSizer:
    """vllm_pool with the run's settings. What _predict_pool learns between sizings (the non-torch with
    what 0.27+ consumes, the weights beyond the checkpoint, the profile run with the encoder's) is set here
    as it is learnt, since each needs a pool sized before it."""

    run: _Run
    non_torch_bytes: int
    weights_per_stage: list[int] | None = None
    activation_given: int | None = None  # set when the profile run has more than the decoder (an encoder)

    def __call__(
        self, max_num_seqs: int | None, max_num_batched_tokens: int | None, cudagraph_bytes: int
    ) -> VLLMPool:
        run, device = self.run, self.run.device
        return vllm_pool(
            run.spec,
            max_model_len=run.max_model_len,
            version=run.version,
            engine=run.engine,
            total_bytes=run.total_bytes,
            gpu_memory_utilization=run.utilization,
            weight_format=run.weight_format,
            weights_bytes=self.weights_per_stage,
            activation_bytes=self.activation_given,
            non_torch_bytes=self.non_torch_bytes,
            kv_dtype=run.kv_dtype,
            tp=run.tp,
            pp=run.pp,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            enable_prefix_caching=run.prefix_caching,
            cudagraph_bytes=cudagraph_bytes,
            device_name=device.name if device else None,
            cuda_capability=device.capability if device else None,
            sm_count=device.sm_count if device else None,
            sampler_path=run.sampler_path,
            block_size=run.block_size,
            async_scheduling=run.async_scheduling,
            scheduler_total_bytes=device.scheduler_total_bytes if device else None,
            data_parallel=run.dp,
        )


def _with_encoder(pool: VLLMPool, encoder: Any, activation_notes: list[str]) -> int:
    """The profile run's peak with a vision encoder: the encoder runs first and its outputs stay cached
    while the decoder's dummy run goes, so the peak is the worse of the two moments, not the decoder's."""
    decoder = pool.activation_bytes
    kept = pool.activation_profile.kept_bytes if pool.activation_profile else 0
    activation_given = max(encoder.peak_bytes + kept, decoder + encoder.output_bytes)
    activation_notes.append(
        f"profile run peak = max(encoder {encoder.peak_bytes:,} + kept {kept:,}, decoder {decoder:,} + "
        f"encoder outputs {encoder.output_bytes:,}) = {activation_given:,} B "
        "(v0.24.0:vllm/v1/worker/gpu_model_runner.py:6239-6312: the encoder runs first, its outputs stay "
        "in the encoder cache during the decoder's dummy run)"
    )
    return activation_given


def _weights_beyond_checkpoint(run: _Run) -> tuple[list[int], list[str]]:
    """What vLLM holds beyond the checkpoint's tensors (padded MoE experts, experts split over ranks), per
    pipeline stage, with how each was derived."""
    spec, device = run.spec, run.device
    layout = (
        spec,
        run.weight_format or spec.default_format,
        parse_version(run.version),
        device.capability if device else None,
        run.tp,
        run.pp,
    )
    extra_weights, weight_notes = vllm_weight_extras(*layout)
    split, split_note = expert_split_extras(*layout, run.dp, run.expert_parallel)
    extra_weights = [a + b for a, b in zip(extra_weights, split, strict=True)]
    if split_note:
        weight_notes.append(split_note)
    return extra_weights, weight_notes


def _multimodal_parts(
    run: _Run,
    setting: _Settings,
    pool: VLLMPool,
    extra_weights: list[int],
    weight_notes: list[str],
    activation_notes: list[str],
    notes: list[str],
) -> tuple[Any, Any]:
    """(the encoder's profile run or None, the vision tower or None) of a vision-language checkpoint: its
    tower's weights go into the first stage's `extra_weights`."""
    encoder = None
    raw_config = full_config(run.model_id)
    if raw_config is None:
        from planner.catalog import catalog_multimodal_config  # noqa: PLC0415

        raw_config = catalog_multimodal_config(run.model_id)
    tower = vision_tower(raw_config or {})
    plain = plain_vision_tower(raw_config or {})
    if tower is not None:
        encoder = _vision_tower(tower, run, setting, pool, extra_weights, weight_notes, activation_notes)
    elif plain is not None:
        plain_bytes, plain_how = plain_vision_weight_bytes(plain)
        extra_weights[0] += plain_bytes
        weight_notes.append(plain_how)
        tower = plain
    elif raw_config is None and setting("limit_mm_per_prompt")[0]:
        notes.append(
            "a multimodal run (limit_mm_per_prompt) of a catalog model: the catalog keeps the text decoder "
            "only, so the vision tower and its profile run are left out; give --model CONFIG.json"
        )
    return encoder, tower


def _vision_tower(
    tower: Any,
    run: _Run,
    setting: _Settings,
    pool: VLLMPool,
    extra_weights: list[int],
    weight_notes: list[str],
    activation_notes: list[str],
) -> Any:
    """Adds the tower's weights to the first stage; the encoder's profile run (None without images)."""
    images, images_why = images_per_prompt(setting("limit_mm_per_prompt")[0])
    chunked = (setting("enable_chunked_prefill")[0] or "True").strip() not in ("False", "false", "0")
    tower_bytes = vision_weight_bytes(tower)
    extra_weights[0] += tower_bytes
    weight_notes.append(
        f"+ vision tower {tower_bytes:,} B in bf16 ({tower.depth} blocks of {tower.hidden}; "
        "v0.24.0:vllm/model_executor/models/qwen3_vl.py:348-560; the published quantized checkpoints of "
        "this family keep it unquantized)"
    )
    if not images:
        return None
    encoder = encoder_profile(
        tower,
        max_num_batched_tokens=pool.max_num_batched_tokens,
        max_num_seqs=pool.max_num_seqs,
        images_per_prompt=images,
        max_model_len=run.max_model_len,
        chunked_prefill=chunked,
    )
    activation_notes.extend((images_why, *encoder.terms))
    return encoder


def _rows(
    log: VLLMLog,
    pool: VLLMPool,
    terms: tuple[Term, ...],
    total_how: str,
    era: str,
    tp: int,
    fmt: str | None,
) -> tuple[Row, ...]:
    logged = _logged_figures(log)
    predicted = _predicted_figures(pool, terms)
    hows = {
        "device_total": total_how,
        "non_torch": "PREDICTED",
        "cudagraphs": "PREDICTED",
    }
    rows: list[Row] = []
    for key in ROW_KEYS:
        fig = logged[key]
        value = predicted[key]
        cause = _cause(key, fig, value, pool, era, tp, fmt) if fig is not None else ""
        rows.append(
            Row(
                key=key,
                logged=None if fig is None else fig.value,
                logged_line=None if fig is None else fig.line,
                predicted=value,
                how=hows.get(key, "PREDICTED"),
                cause=cause,
            )
        )
    return tuple(_pool_cause(r, rows) if r.key == "kv_pool" and r.cause else r for r in rows)


def _logged_figures(log: VLLMLog) -> dict[str, Figure | None]:
    """Each row's figure as the log printed it, from the rank whose pool is the smallest."""
    # The weights: V0 <= 0.6.4 "Loading model weights took X GB" and V1 "Model loading took X GiB" are both
    # 2**30-based; "model weights take" is the breakdown's figure.
    kv_fig = log.smallest("kv_pool")

    def same_rank(name: str) -> Figure | None:
        """The figure logged by the rank whose pool is the smallest (the one every rank then uses)."""
        found = log.figures.get(name, ())
        if kv_fig is not None:
            for fig in found:
                if fig.rank == kv_fig.rank:
                    return fig
        return found[0] if found else None

    return {
        "device_total": same_rank("total"),
        "requested": same_rank("requested"),
        "weights": same_rank("weights"),
        "activation": same_rank("activation"),
        "non_torch": same_rank("non_torch"),
        "cudagraphs": log.first("cudagraph_estimate"),
        "kv_pool": kv_fig,
        "num_blocks": log.smallest("num_blocks"),
        "kv_tokens": log.smallest("kv_tokens"),
        "max_concurrency": log.smallest("max_concurrency"),
    }


def _predicted_figures(pool: VLLMPool, terms: tuple[Term, ...]) -> dict[str, float]:
    """Each row's predicted figure: sizes in GiB, counts as they are."""
    g = GiB
    return {
        "device_total": terms[0].bytes / g,
        "requested": (pool.requested_bytes or 0) / g,
        "weights": pool.weights_bytes / g,
        "activation": pool.activation_bytes / g,
        "non_torch": pool.non_torch_bytes / g,
        "cudagraphs": pool.cudagraph_bytes / g,
        "kv_pool": pool.pool_bytes / g,
        "num_blocks": float(pool.num_blocks),
        "kv_tokens": float(pool.kv_cache_tokens),
        "max_concurrency": pool.max_concurrency,
    }


def _pool_cause(pool_row: Row, rows: list[Row]) -> Row:
    """The pool's difference in words: which terms the log measured differently, and which it did not show."""
    from dataclasses import replace  # noqa: PLC0415

    if pool_row.cause.startswith("same"):
        return pool_row
    terms = {
        "requested": "budget", "weights": "weights", "activation": "activation", "non_torch": "non-torch",
        "cudagraphs": "graphs",
    }  # fmt: skip
    measured = []
    unseen = []
    for r in rows:
        if r.key not in terms:
            continue
        if r.logged is None:
            if r.predicted and r.key != "requested":
                unseen.append(terms[r.key])
            continue
        if r.key == "cudagraphs" and not r.predicted:
            continue  # the version logs the estimate but does not take it from the pool (nothing deducted)
        diff = r.predicted - r.logged
        if abs(diff) > 0.005:
            # a term predicted larger takes from the pool; the budget gives to it
            effect = diff if r.key == "requested" else -diff
            measured.append((abs(diff), f"{terms[r.key]} {diff:+.2f} GiB (pool {effect:+.2f})"))
    parts = [text for _, text in sorted(measured, reverse=True)]
    text = "; ".join(parts) if parts else "no measured term differs"
    if unseen:
        text += f"; not in the log: {', '.join(unseen)}"
    return replace(pool_row, cause=text)


def _cause(key: str, fig: Figure, value: float, pool: VLLMPool, era: str, tp: int, fmt) -> str:
    """Why the predicted `value` differs from the logged figure `fig`, in words; `era`: how the version
    counts non-torch memory (overheads.py non_torch_era)."""
    half_step = 0.005 if fig.unit in ("GiB", "GB", "") else 0.0
    if abs(value - fig.value) <= half_step + 1e-9:
        return "same (within the log's rounding)"
    if key == "weights":
        return _weights_cause(value - fig.value, tp, fmt)
    if key == "non_torch":
        return _NON_TORCH_CAUSE_BY_ERA.get(era, _NON_TORCH_CAUSE_GROWTH)
    if key == "activation":
        return (
            "the profile run's peak depends on the batch (max_num_batched_tokens x max_num_seqs) and the "
            f"sampler; predicted with {pool.max_num_batched_tokens} tokens, {pool.max_num_seqs} sequences"
        )
    if key == "cudagraphs":
        return _CUDAGRAPHS_CAUSE_NOT_DEDUCTED if pool.cudagraph_bytes == 0 else _CUDAGRAPHS_CAUSE_DEDUCTED
    if key in ("num_blocks", "kv_tokens", "max_concurrency"):
        parts = ["follows the pool"]
        if key == "num_blocks" and tp > 1:
            parts.append("KV heads per rank (replicated when fewer than TP)")
        if pool.num_groups > 1:
            parts.append(f"{pool.num_groups} KV-cache groups (sliding-window/hybrid layers)")
        return "; ".join(parts)
    return _FIXED_CAUSES.get(key, "")


_FIXED_CAUSES = {
    "device_total": "the total came from a flag/table, not from this device's mem_get_info",
    "requested": "follows the device total",
    "kv_pool": "the terms above (pool = requested - weights - activation - non-torch - graphs)",
}
_NON_TORCH_CAUSE_BY_ERA = {
    "context": (
        "this version counts the CUDA context (no baseline): predicted as the context an RTX 3090 logged + "
        "local memory by the GPU's resident threads (+ NCCL under TP/PP), EMPIRICAL parts"
    ),
    "allocated": (
        "0.6.5-0.6.6 count the growth after the baseline plus the allocator's fragmentation (torch "
        "allocated, not reserved): the growth predicted by its parts, the fragmentation not"
    ),
    "graphs": (
        "growth after vLLM's baseline with the CUDA-graph estimate's captures inside the window (0.18-0.26; "
        "NCCL's memory under TP): EMPIRICAL size from vLLM 0.19.0 H100 logs"
    ),
}
_NON_TORCH_CAUSE_GROWTH = (
    "growth after vLLM's baseline, predicted as parts (local memory by the GPU's resident threads, NCCL / "
    "all-reduce under TP/PP where the baseline precedes them, before V1 0.11): EMPIRICAL sizes, see the "
    "non-torch term"
)
_CUDAGRAPHS_CAUSE_NOT_DEDUCTED = (
    "logged as an estimate only: this vLLM does not deduct it before the pool "
    "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS off by default before 0.20), so it is not in the pool"
)
_CUDAGRAPHS_CAUSE_DEDUCTED = (
    "graph estimate: PREDICTED per captured graph (EMPIRICAL size, see the CUDA graphs term); vLLM measures "
    "two per mode and extrapolates"
)


def _weights_cause(diff: float, tp: int, fmt) -> str:
    """`diff`: predicted minus logged weights, GiB."""
    if fmt in ("awq", "gptq"):
        return "quantized weights: vLLM repacks them for its kernels (Marlin), sizes differ"
    if fmt in ("bnb_nf4", "bnb_fp4") and diff < 0:
        return (
            "bitsandbytes: the checkpoint keeps more layers in 16 bit than the config shows "
            "(Unsloth's dynamic 4-bit llm_int8_skip_modules)"
        )
    if fmt == "mxfp4":
        return (
            "MXFP4 experts padded as vLLM's kernel for this GPU creates them (see the weights term); the "
            "rest: buffers vLLM adds (rotary cos/sin cache) and rounding"
        )
    if tp > 1:
        return "per rank: the planner splits vocab/replicated tensors as vLLM's parallel layers do, rounding"
    return "the tensors as vLLM loads them differ from the config's shapes (tied/padded embeddings)"


def _worksheet(log: VLLMLog, pool: VLLMPool) -> str:
    tokens = log.smallest("kv_tokens")
    blocks = log.smallest("num_blocks")
    if tokens is not None:
        logged_tokens = f"logged {int(tokens.value):,} tokens"
    elif blocks is not None:
        logged_tokens = (
            f"logged {int(blocks.value) * pool.block_size:,} ({int(blocks.value):,} blocks) tokens"
        )
    else:
        logged_tokens = "logged tokens: not in the log"
    conc = log.smallest("max_concurrency")
    return (
        f"vLLM: predicted KV pool {pool.pool_bytes / GiB:.2f} GiB / {pool.kv_cache_tokens:,} tokens; "
        f"{logged_tokens}; max concurrency predicted {pool.max_concurrency_text}, "
        f"logged {conc.text + 'x' if conc else 'not in the log'}"
    )


_MODEL_RUNNER_V2 = (
    "vLLM {version} runs {model_type} on model runner V2 by default (planner/engines/vllm/version.py "
    "model_runner_v2, from vLLM's config/vllm.py). Derived from its source (planner/engines/vllm/"
    "runner_v2.py, read in 0.29.0): its persistent buffers (the penalties' output_bin_counts, {seqs} x "
    "{vocab:,} int32 = {counts:.2f} GiB, and the sampler's tables) and, from 0.27, the kept fused-MoE "
    "workspace (MXFP4 experts on Marlin; other expert kernels' workspaces are not derived), in non-torch "
    "(consumed memory after the baseline); its greedy dummy sampler run in the activation. Not derived: its "
    "CUDA-graph estimate, deducted from the pool (v0.29.0:vllm/v1/worker/gpu_worker.py:570-609), which it "
    "measures on the device: every PIECEWISE graph captured, the FULL graphs extrapolated from the two "
    "largest as first + (n - 1) x max(second, 1 MiB) (v0.29.0:vllm/v1/worker/gpu/cudagraph_utils.py:712-714, "
    "718-801, 823-831), so whatever the second FULL capture happens to allocate (a new segment of the graph "
    "pool, the driver's graph memory) counts once per FULL graph; the bytes per graph are the driver's and "
    "the caching allocator's, EMPIRICAL here (H100 logs of the V1 runner, 0.19)"
)


def _pool_the_tokens_imply(log: VLLMLog, pool: VLLMPool) -> str | None:
    """Where the log gives its token count but neither the pool nor the block count: the pool those tokens
    imply by the version's own capacity rule (pool.blocks_for_logged_tokens), against the prediction, so a
    miss on tokens reads as the memory it is."""
    tokens = log.smallest("kv_tokens")
    if tokens is None or log.smallest("kv_pool") is not None or log.smallest("num_blocks") is not None:
        return None
    blocks = blocks_for_logged_tokens(pool, int(tokens.value))
    if blocks is None:
        return None
    lowest, highest = blocks
    implied = lowest * pool.bytes_per_block
    off = implied - pool.pool_bytes
    count = f"{lowest:,}" if lowest == highest else f"{lowest:,}-{highest:,}"
    side = "less" if off < 0 else "more"
    who = "vLLM deducted more" if off < 0 else "the predicted terms deduct more"
    return (
        f"the logged {int(tokens.value):,} tokens imply {count} KV blocks x {pool.bytes_per_block:,} B = a "
        f"pool of {implied / GiB:.2f} GiB ({pool.num_groups} group(s), {pool.blocks_per_request:,} blocks "
        f"per request of {pool.max_model_len:,} tokens), {abs(off) / GiB:.2f} GiB {side} than predicted: the "
        f"token count follows the pool, so the difference is in the memory deducted before it ({who})"
    )


def _device_not_modelled(run: _Run, log: VLLMLog, pool: VLLMPool) -> list[str]:
    """The device's part of _not_modelled: no NVML memory total, unified memory."""
    notes: list[str] = []
    device = run.device
    if device is not None and not device.nvml_memory_info and run.engine == "V1":
        notes.append(
            f"{device.name}: NVML reports no memory total on this device, so vLLM's scheduler defaults take "
            f"0 and the small tier (max_num_batched_tokens {pool.max_num_batched_tokens}, max_num_seqs "
            f"{pool.max_num_seqs}; v0.13.0:vllm/engine/arg_utils.py:1786-1791)"
        )
    if device is not None and device.key == "gb10":
        compiled = log.facts.get("compile_seconds")
        notes.append(
            "unified memory (GB10): vLLM's free memory there is the host's MemAvailable "
            "(v0.13.0:vllm/utils/mem_utils.py:85-111; cudaMemGetInfo before 0.11.1), a machine-wide figure, "
            "so host memory taken anywhere on the machine between the baseline and the end of the profile "
            "run counts as non-torch growth"
            + (
                f" (torch.compile and its workers ran inside it: {compiled[0]} s, line {compiled[1]})"
                if compiled
                else ""
            )
            + "; not modelled"
        )
    return notes


def _not_modelled(run: _Run, log: VLLMLog, pool: VLLMPool) -> list[str]:
    """What the run has that the prediction does not model, in words (each a known cause of a miss)."""
    ver = parse_version(run.version)
    notes = _device_not_modelled(run, log, pool)
    if run.engine == "V1" and runs_model_runner_v2(run.spec, ver):
        notes.append(_MODEL_RUNNER_V2.format(
            version=run.version, model_type=run.spec.model_type,
            counts=pool.max_num_seqs * run.spec.vocab_size * 4 / GiB, seqs=pool.max_num_seqs,
            vocab=run.spec.vocab_size,
        ))  # fmt: skip
    if "dev" in run.version or "rc" in run.version:
        notes.append(f"{run.version} is a development build: what it counts may differ from the release's")
    elif log.fact("profile_table"):
        notes.append(
            f"a development build wrote this log: its \"Memory profiling results:\" table (line "
            f"{log.facts['profile_table'][1]}) is no release's wording (a 0.6.5 development build's, vllm PR "
            "#10511), so what it counts may differ from the release's"
        )
    if log.setting("kv_transfer_config") or log.setting("kv_connector"):
        notes.append("a KV connector is configured (kv_transfer_config): its device buffers are not modelled")
    if run.weight_format == "nvfp4" or (run.spec.default_format or "") == "nvfp4":
        notes.append(
            "an NVFP4 checkpoint: which layers its recipe keeps in bf16 / fp8 is in the checkpoint, not the "
            "config; the config's shapes are priced as NVFP4"
        )
    if run.engine == "V1" and ver < (0, 9, 1) and (run.device is None or run.device.key != "rtx3090"):
        notes.append(
            "V1 before 0.9.1 counts the CUDA context, whose size is EMPIRICAL (from an RTX 3090) and differs "
            "by GPU and driver"
        )
    if log.fact("wsl"):
        notes.append(
            f"WSL2 (line {log.facts['wsl'][1]}): the device total is the card's frame buffer there, and "
            "vLLM's memory reads go through the Windows driver"
        )
    requested = pool.requested_bytes or 0
    if requested and 0 < pool.pool_bytes < 0.1 * requested:
        notes.append(
            f"the pool is {pool.pool_bytes / requested:.0%} of the budget: a small absolute difference in "
            f"any "
            "term is a large relative one"
        )
    return notes


def _clamped(terms: tuple[Term, ...]) -> str | None:
    """A note when the predicted terms exceed the budget: vLLM would find no memory for the KV cache, and the
    pool row's 0 is a clamp, not a prediction of zero."""
    by_name = {t.name: t.bytes for t in terms}
    taken = ("weights", "activation peak", "non-torch", "CUDA graphs")
    over = by_name["requested"] - sum(by_name[name] for name in taken)
    if over >= 0:
        return None
    parts = ", ".join(f"{name} {by_name[name] / GiB:.2f}" for name in taken if by_name[name])
    return (
        f"the predicted pool is negative ({over / GiB:.2f} GiB), shown clamped to 0: the terms taken from "
        f"the "
        f"{by_name['requested'] / GiB:.2f} GiB budget ({parts} GiB) overrun it by {-over / GiB:.2f} GiB; "
        f"vLLM "
        "would refuse to start ('No available memory for the cache blocks')"
    )


# The platforms whose memory accounting is vLLM's gpu_worker (CUDA, and ROCm through the same code): a log
# from another (an Ascend NPU's vllm-ascend NPUWorker, Intel XPU, TPU, CPU) is recognized and not predicted.
MODELLED_PLATFORMS = ("cuda", "rocm")
PLATFORM_NAMES = {"ascend": "an Ascend NPU (vllm-ascend)", "npu": "an Ascend NPU (vllm-ascend)",
                  "xpu": "an Intel XPU", "tpu": "a TPU", "cpu": "the CPU", "hpu": "a Gaudi HPU",
                  "neuron": "AWS Neuron"}  # fmt: skip


def platform_problem(log: VLLMLog) -> str | None:
    """One line when the log is from a platform whose memory accounting is not modelled."""
    platform = log.fact("platform")
    if platform is None or platform.lower() in MODELLED_PLATFORMS:
        return None
    line = log.facts["platform"][1]
    where = PLATFORM_NAMES.get(platform.lower(), f"platform {platform!r}")
    return (
        f"this vLLM ran on {where} (line {line}), not CUDA: its worker sizes the KV cache with the "
        "platform's own memory accounting (device, context, graph capture), which is not modelled; no CUDA "
        "pool is predicted for it"
    )


def stage_problem(log: VLLMLog) -> str | None:
    """One line when the log is not a vLLM log, comes from a platform that is not modelled, or stops before
    the KV cache was sized; None when complete."""
    if log.is_vllm and (platform := platform_problem(log)) is not None:
        return platform
    if log.is_vllm and log.refused:
        return log.refused[0]
    if not log.is_vllm:
        if log.error:
            return (
                f"not a complete vLLM startup log: the only vLLM line is an error (line {log.error_line}): "
                f"{log.error}"
            )
        return (
            "not a vLLM startup log: no vLLM log line with a memory figure, engine configuration or version"
        )
    if log.finished or log.first("kv_pool") is not None:
        return None
    where = STAGE_WORDS[log.stage]
    if log.error:
        return f"vLLM died {where} (line {log.error_line}): {log.error}"
    return f"the log stops {where}: no KV cache figure to explain (the server died there, or the log was cut)"


def to_worksheet(ex: Explanation) -> Worksheet:
    """The explanation on the worksheet every engine shares."""
    return Worksheet(
        engine="vllm",
        line=ex.worksheet,
        title=f"vLLM {ex.version} ({ex.engine})",
        model=ex.model,
        identity=(("vllm_version", ex.version), ("engine", ex.engine)),
        stage=ex.stage,
        inputs=ex.inputs,
        terms=ex.terms,
        rows=ex.rows,
        labels=ROW_LABELS,
        notes=ex.notes,
        counts=frozenset({"num_blocks", "kv_tokens"}),
        absolute=frozenset({"max_concurrency"}),
    )


def explanation_json(ex: Explanation) -> dict[str, Any]:
    """The stable --json object (planner/engines/worksheet.py worksheet_json)."""
    return worksheet_json(to_worksheet(ex))


__all__ = [
    "ROW_KEYS",
    "Explanation",
    "explain",
    "explanation_json",
    "stage_problem",
    "to_worksheet",
]
