"""A vLLM startup log next to the planner's prediction for the same model, GPU and engine arguments.

explain() takes a parsed log (planner/engines/vllm/log.py VLLMLog) and predicts the pool from the config
alone: the weights from the checkpoint's shapes and format, the activation peak from vLLM's profile run
(activation.py profile_activation), non-torch memory and CUDA graphs from the version's rules (overheads.py
predicted_non_torch / predicted_cudagraphs), and the device total as vLLM reads it. No figure the log
measured is fed into the prediction; the device total and the settings (model, max_model_len, TP, dtype,
gpu_memory_utilization, ...) are inputs, read from the log where it states them, else from flags.
to_worksheet() puts the result on the worksheet every engine shares (planner/engines/worksheet.py).
The parts, one module each: explain_settings.py resolves the run from the log and flags, explain_pool.py
predicts the pool, explain_causes.py builds the rows and why they differ, explain_notes.py the notes on
what the prediction does not model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.engines.vllm.explain_causes import ROW_KEYS, ROW_LABELS, _mark_clamped, _rows
from planner.engines.vllm.explain_notes import _not_modelled, _pool_the_tokens_imply
from planner.engines.vllm.explain_pool import _predict_pool
from planner.engines.vllm.explain_settings import _resolve_run, _Run, _Settings
from planner.engines.vllm.log import STAGE_WORDS, VLLMLog
from planner.engines.vllm.overheads import non_torch_era, predicted_non_torch
from planner.engines.vllm.pool import VLLMPool
from planner.engines.worksheet import Row, Term, Worksheet, worksheet_json
from planner.units import GiB


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
