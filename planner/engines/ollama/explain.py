"""An Ollama server log beside memsight's prediction for the same model, context and runner settings.

The inputs come from the log: the runner's context (`--ctx-size` / the load request's KvSize: num_ctx x
num_parallel), `--parallel`, the KV cache type, flash attention, the batch, and the layers given to the GPU
("offloaded N/M layers to GPU", `--n-gpu-layers` or the load request's GPULayers); what the log leaves out is
given on the command line (`--ctx-size`, `--parallel`, ...). The model's architecture comes from memsight's
catalog or a config.json (`--model`), in the GGUF file type the log names (`--format` otherwise).

Two predictions, for two kinds of figure Ollama logs:
- its scheduler's estimate before loading (`msg=offload`: memory.required.kv, memory.weights.*), which
  planner.engines.ollama.estimate reproduces with Ollama's own simplifications;
- what the runner then allocated per device (`msg="model weights"`, `"kv cache"`, `"total memory"`), priced
  tensor by tensor and cell by cell (planner.engines.ollama.cache).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planner import limits
from planner.engines.base import setting_number
from planner.engines.ollama.cache import (
    LayerCache,
    gpu_layers_from,
    kv_by_device,
    llama_runner_kv,
    llama_runner_weights,
    ollama_kv_layers,
    weights_by_device,
)
from planner.engines.ollama.estimate import OllamaEstimate, ollama_estimate
from planner.engines.ollama.log import STAGE_WORDS, OllamaLog
from planner.engines.worksheet import Row, Term, Worksheet
from planner.errors import PlannerError

MiB = 2**20
ROW_LABELS = {
    "estimate_kv": "Ollama's KV estimate (MiB)",
    "estimate_weights": "Ollama's weight estimate (MiB)",
    "estimate_output": "Ollama's output-layer estimate (MiB)",
    "weights_all": "weights, all devices (MiB)",
    "kv_all": "KV cache, all devices (MiB)",
    "weights_gpu": "weights on GPU (MiB)",
    "weights_cpu": "weights on CPU (MiB)",
    "kv_gpu": "KV cache on GPU (MiB)",
    "kv_cpu": "KV cache on CPU (MiB)",
    "compute_gpu": "compute graph GPU (MiB)",
    "total": "total (MiB)",
    "runner_weights_gpu": "llama.cpp model buffers, GPU (MiB)",
    "runner_weights_host": "llama.cpp model buffers, host (MiB)",
    "runner_kv": "llama.cpp KV cache (MiB)",
}
# GGUF file types (general.file_type's names, as the new engine's model line and llama.cpp print them)
FILE_TYPES = {"Q4_K_M": "q4_k_m", "Q4_K - Medium": "q4_k_m", "Q8_0": "q8_0"}
_SAME = "same (within the log's one decimal)"
WEIGHTS = "the GGUF's own tensor types differ from the file type's recipe (planner.formats)"
KV = "cells x layers x KV width x type: a different context, parallel or type than the log's"
RUNNERS = {"ollama": "its own engine", "llama": "llama.cpp runner"}


def stage_problem(log: OllamaLog) -> str | None:
    if not log.is_ollama:
        return (
            "not an Ollama server log: no Ollama (Go slog) line with a runner, an estimate or an allocation"
        )
    if log.figure("kv_cache") or log.figure("estimate_kv") or log.figure("weights"):
        return None
    where = STAGE_WORDS[log.stage]
    if log.error:
        return f"Ollama stopped {where} (line {log.error_line}): {log.error}"
    return f"the log stops {where}: no estimate and no allocation to explain"


@dataclass(frozen=True, slots=True)
class Settings:
    """The runner's settings memsight predicts for, each with where it came from."""

    fmt: str | None
    ctx: int
    parallel: int
    batch: int
    kv_type: str
    flash: bool
    gpu_layers: int | None  # repeating layers + output given to the GPU; None: the log does not say
    inputs: tuple[tuple[str, str, str], ...]


def _int(value: str | None, what: str) -> int | None:
    if value is None:
        return None
    return int(setting_number(value, what, "the log", 0, limits.MAX_CONFIG_INT))


def _pick(log_value: Any, given: Any, default: Any, where: str, name: str) -> tuple[Any, str]:
    if log_value is not None:
        return log_value, where
    if given is not None:
        return given, f"given (--{name})"
    return default, "default" if default is not None else "not in the log"


def settings(log: OllamaLog, given: Mapping[str, Any]) -> Settings:
    where = f"log (line {log.runner_line})" if log.runner_line else "log"
    fmt = given.get("format") or FILE_TYPES.get(log.file_type or "")
    fmt_from = "given (--format)" if given.get("format") else f"log (file_type={log.file_type})"
    ctx, ctx_from = _pick(
        _int(log.setting("ctx-size"), "ctx-size"), given.get("ctx_size"), None, where, "ctx-size"
    )
    llama_ctx = dict(log.llama.context) if log.llama is not None else {}
    if ctx is None and llama_ctx.get("n_ctx"):  # the llama runner's own llama_context lines
        ctx, ctx_from = _int(llama_ctx["n_ctx"], "n_ctx"), "log (llama.cpp's llama_context: n_ctx)"
    if ctx is None:
        raise PlannerError(
            "the log names no runner context (--ctx-size or the load request's KvSize): give --ctx-size "
            "(num_ctx x parallel)"
        )
    parallel, par_from = _pick(
        _int(log.setting("parallel"), "parallel"), given.get("parallel"), 1, where, "parallel"
    )
    if par_from == "default" and llama_ctx.get("n_seq_max"):
        parallel, par_from = (
            _int(llama_ctx["n_seq_max"], "n_seq_max"),
            "log (llama.cpp's llama_context: n_seq_max)",
        )
    batch, batch_from = _pick(_int(log.setting("batch-size"), "batch-size"), None, 512, where, "batch-size")
    kv_type, kv_from = _pick(
        log.setting("kv-cache-type"), given.get("kv_cache_type"), "f16", where, "kv-cache-type"
    )
    flash_text = log.setting("flash-attn")
    flash = flash_text is not None and flash_text.lower() in ("true", "1", "enabled")
    if flash_text is None and given.get("flash_attention") is not None:
        flash, flash_from = bool(given["flash_attention"]), "given (--flash-attention)"
    else:
        flash_from = where if flash_text is not None else "default (off)"
    offloaded = log.figure("offloaded_layers")
    if given.get("gpu_layers") is not None:
        gpu, gpu_from = int(given["gpu_layers"]), "given (--gpu-layers)"
    elif offloaded is not None:
        gpu, gpu_from = int(offloaded.value), f"log (line {offloaded.line})"
    else:
        gpu, gpu_from = _int(log.setting("n-gpu-layers"), "n-gpu-layers"), where
    inputs = (
        (
            "weight format",
            fmt or "(not priced)",
            fmt_from if fmt else f"file type {log.file_type or 'not logged'}",
        ),
        ("runner context", f"{ctx:,} (num_ctx x parallel)", ctx_from),
        ("parallel", str(parallel), par_from),
        ("batch", str(batch), batch_from),
        ("KV cache type", kv_type or "f16", kv_from),
        ("flash attention", str(flash).lower(), flash_from),
        (
            "GPU layers",
            "not stated" if gpu is None else str(gpu),
            gpu_from if gpu is not None else "the log does not say",
        ),
    )
    return Settings(fmt, ctx, parallel, batch, (kv_type or "f16").lower(), flash, gpu, inputs)


def explain(log: OllamaLog, options: Mapping[str, Any]) -> Worksheet:
    from planner.spec import load_spec  # noqa: PLC0415

    model = options.get("model")
    if not model:
        raise PlannerError(
            "Ollama's log names its model only by the blob's sha256: give --model (a catalog name or "
            f"config.json of the architecture{f' {log.architecture}' if log.architecture else ''})"
        )
    spec = load_spec(model)
    s = settings(log, dict(options.get("given") or {}))
    layers = ollama_kv_layers(spec, s.ctx, s.parallel, s.batch, s.kv_type, s.flash)
    estimate = ollama_estimate(spec, s.fmt, s.ctx, s.parallel, s.batch, s.kv_type, log.architecture)
    rows = (
        *_estimate_rows(log, estimate),
        *_allocation_rows(log, spec, s, layers),
        *_runner_rows(log, spec, s),
    )
    kv_total = sum(c.bytes for c in layers)
    terms = _terms(spec, s, layers, kv_total, estimate)
    logged_kv = _summed(log, "kv_cache") or log.figure("estimate_kv")
    line = (
        f"Ollama: predicted KV {kv_total / MiB:,.1f} MiB as allocated, {estimate.kv / MiB:,.1f} MiB as "
        f"Ollama estimates it ({s.kv_type}, {s.ctx:,} cells x {len(layers)} layers); logged "
        + (f"{logged_kv.text}" if logged_kv else "no KV figure")
    )
    notes = _notes(log, spec, s)
    return Worksheet(
        engine="ollama",
        line=line,
        title=f"Ollama ({RUNNERS.get(log.engine or '', 'runner not stated')})",
        model=model,
        identity=(("ollama_engine", log.engine), ("engine", "ollama")),
        stage=log.stage,
        inputs=s.inputs,
        terms=tuple(terms),
        rows=rows,
        labels=ROW_LABELS,
        notes=tuple(notes),
    )


def _terms(
    spec: Any, s: Settings, layers: tuple[LayerCache, ...], kv_total: int, estimate: OllamaEstimate
) -> list[Term]:
    """The KV cache as allocated and as Ollama estimates it, and the weights where the format is known."""
    terms = [
        Term("KV cache", kv_total, "PREDICTED",
             f"{len(layers)} layers x cells x KV width x {s.kv_type} (kvcache/causal.go; cells padded to "
             f"{256 if s.flash else 32})"),
        Term("Ollama's KV estimate", estimate.kv, "PREDICTED", "llm/memory.go: context x layers x KV width"),
    ]  # fmt: skip
    if s.fmt is not None:
        all_layers, output = gpu_layers_from(len(spec.layers) + 1, len(spec.layers))
        weights = sum(weights_by_device(spec, s.fmt, all_layers, output).values())
        terms.append(
            Term("weights", weights, "PREDICTED", f"planner.formats {s.fmt}: every tensor of the GGUF")
        )
    if estimate.weights is not None:
        terms.append(Term("Ollama's weight estimate", estimate.weights, "PREDICTED",
                          f"planner.formats {s.fmt}: the blocks + the output layer"))  # fmt: skip
    return terms


def _notes(log: OllamaLog, spec: Any, s: Settings) -> list[str]:
    """The spec's assumptions, and what this log leaves the worksheet without."""
    notes = list(spec.assumptions)
    if log.engine == "llama":
        notes.append(
            "this runner is llama.cpp's (no --ollama-engine): its own buffer lines are llama.cpp's, which "
            "`memsight explain` reads as a llama.cpp log"
        )
    if s.fmt is None:
        notes.append(
            f"weights not priced: file type {log.file_type or '(not logged)'}; give --format q4_k_m|q8_0"
        )
    return notes


class _Summed:
    """Several devices' figures of one name, summed in MiB, with the first line and the log's resolution."""

    def __init__(self, figs: list[Any]) -> None:
        self.value = sum(_mib(f) or 0.0 for f in figs)
        self.line = figs[0].line
        self.text = " + ".join(f"{f.text} ({f.rank})" if f.rank else f.text for f in figs)
        self.resolution = sum(_resolution(f) for f in figs)


def _summed(log: OllamaLog, name: str) -> _Summed | None:
    figs = [f for f in (log.figure(name, d) for d in log.devices(name)) if f is not None]
    return _Summed(figs) if figs else None


def _mib(fig: Any) -> float | None:
    if fig is None:
        return None
    return fig.value if isinstance(fig, _Summed) else fig.value * (1024 if fig.unit == "GiB" else 1)


def _resolution(fig: Any) -> float:
    """Half the last printed digit (format.HumanBytes2 prints one decimal), in MiB."""
    if isinstance(fig, _Summed):
        return fig.resolution
    return 0.05 * (1024 if fig.unit == "GiB" else 1)


def _row(key: str, fig: Any, predicted_bytes: int | None, cause: str) -> Row:
    logged = _mib(fig)
    predicted = None if predicted_bytes is None else predicted_bytes / MiB
    if logged is not None and predicted is not None and abs(predicted - logged) <= _resolution(fig) + 1e-9:
        cause = _SAME
    elif logged is None or predicted is None:
        cause = "" if logged is None else cause
    return Row(key, logged, None if fig is None else fig.line, predicted, "PREDICTED", cause)


def _estimate_rows(log: OllamaLog, estimate: OllamaEstimate) -> list[Row]:
    rows = []
    fig = log.figure("estimate_kv")
    if fig is not None:
        cause = (
            "context x layers x KV width x bytes per element: a different num_ctx, parallel or cache type "
            "than the log's, or a model whose layers differ from the catalog's"
        )
        rows.append(_row("estimate_kv", fig, estimate.kv, cause))
    for key, name, value in (
        ("estimate_weights", "estimate_weights", estimate.weights),
        ("estimate_output", "estimate_weights_nonrepeating", estimate.weights_output),
    ):
        fig = log.figure(name)
        if fig is not None:
            rows.append(
                _row(key, fig, value, WEIGHTS if value is not None else "weights not priced (file type)")
            )
    return rows


def _allocation_rows(log: OllamaLog, spec: Any, s: Settings, layers: tuple[LayerCache, ...]) -> list[Row]:
    """What the runner allocated, summed over devices and per device (where the log says the split)."""
    blocks = len(spec.layers)
    gpu_layers, output_on_gpu = gpu_layers_from(blocks + 1 if s.gpu_layers is None else s.gpu_layers, blocks)
    weights = weights_by_device(spec, s.fmt, gpu_layers, output_on_gpu) if s.fmt else None
    kv = kv_by_device(layers, gpu_layers)
    rows = [
        _row(
            "weights_all",
            _summed(log, "weights"),
            None if weights is None else sum(weights.values()),
            WEIGHTS,
        ),
        _row("kv_all", _summed(log, "kv_cache"), sum(kv.values()), KV),
    ]
    gpu = _gpu_device(log)
    for key, name, predicted, side in (
        ("weights_gpu", "weights", weights, "GPU"),
        ("weights_cpu", "weights", weights, "CPU"),
        ("kv_gpu", "kv_cache", kv, "GPU"),
        ("kv_cpu", "kv_cache", kv, "CPU"),
    ):
        fig = log.figure(name, gpu if side == "GPU" else "CPU") if (gpu or side == "CPU") else None
        if fig is None:
            continue
        if s.gpu_layers is None or predicted is None:
            why = "the log does not say how many layers the GPU got (give --gpu-layers)" if predicted else ""
            rows.append(
                Row(key, _mib(fig), fig.line, None, "PREDICTED", why or "weights not priced (file type)")
            )
        else:
            rows.append(_row(key, fig, predicted[side], WEIGHTS if name == "weights" else KV))
    compute = log.figure("compute_graph", gpu) if gpu else None
    if compute is not None:
        rows.append(Row("compute_gpu", _mib(compute), compute.line, None, "PREDICTED",
                        "not derived: ggml sizes the graph's buffers when it schedules it"))  # fmt: skip
    total = log.figure("total")
    if total is not None:
        predicted_total = None if weights is None else sum(weights.values()) + sum(kv.values())
        rows.append(
            _row("total", total, predicted_total, "the compute graphs (not derived) are in Ollama's total")
        )
    return [r for r in rows if r.logged is not None]


def _host(buffer: str) -> bool:
    return buffer.upper().startswith("CPU") or buffer.endswith("_Host")


def _runner_rows(log: OllamaLog, spec: Any, s: Settings) -> list[Row]:
    """The llama runner's own buffer lines (llama.cpp's) beside llama.cpp's arithmetic for the same model and
    Ollama's runner settings (planner.engines.ollama.cache.llama_runner_*: planner.engines.llamacpp's)."""
    llama = log.llama
    if llama is None:
        return []
    rows = []
    buffers = llama.by_device("model_buffer")
    if buffers and s.fmt is not None:
        n_gpu = len(spec.layers) + 1 if s.gpu_layers is None else s.gpu_layers
        model = llama_runner_weights(spec, s.fmt, n_gpu)
        for key, host, predicted in (("runner_weights_gpu", False, model.gpu_bytes),
                                     ("runner_weights_host", True, model.cpu_bytes)):  # fmt: skip
            figs = [f for b, f in buffers.items() if _host(b) == host]
            if figs:
                rows.append(_mib_row(key, figs, predicted, WEIGHTS))
    if llama.kv_caches:
        kv = llama_runner_kv(spec, s.ctx, s.parallel, s.batch, s.kv_type, s.flash)
        total = sum(c.total_mib for c in llama.kv_caches)
        line = llama.kv_caches[0].line
        rows.append(
            _mib_row("runner_kv", [], kv.bytes, KV, logged=(total, line, 0.005 * len(llama.kv_caches)))
        )
    return rows


def _mib_row(key: str, figs: list, predicted: int, cause: str, logged: tuple | None = None) -> Row:  # noqa: ANN001
    """A row of llama.cpp's MiB figures (printed to two decimals)."""
    value, line, resolution = logged or (sum(f.value for f in figs), figs[0].line, 0.005 * len(figs))
    mib = predicted / MiB
    same = abs(mib - value) <= resolution + 1e-9
    return Row(key, value, line, mib, "PREDICTED", "same (within the log's two decimals)" if same else cause)


def _gpu_device(log: OllamaLog) -> str | None:
    for name in ("kv_cache", "weights", "compute_graph"):
        for device in log.devices(name):
            if device and device.upper() != "CPU":
                return device
    return None
