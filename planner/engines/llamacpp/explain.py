"""A llama.cpp start-up log beside the prediction for the same GGUF and arguments, on the shared worksheet.

What the prediction takes from the log is what the log says of the GGUF and the arguments, never a memory
figure llama.cpp measured: the architecture (print_info: n_layer, n_head, n_head_kv, n_embd_k_gqa, n_swa,
n_vocab, n_ff), the GGUF's file type and size, the context arguments (n_ctx, n_seq_max, n_ubatch, flash_attn,
kv_unified), the KV types it names (K (q8_0)) and "offloaded N/M layers" (-ngl). With `--model FILE.gguf` the
weights come from the GGUF's own tensor table instead of its printed size.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from planner import limits
from planner.engines.base import Figure, plausible
from planner.engines.llamacpp.graph import GraphShape
from planner.engines.llamacpp.kv import KVShape, row_bytes, swa_layer_count, swa_layer_ids
from planner.engines.llamacpp.log import STAGE_WORDS, LlamaCppLog
from planner.engines.llamacpp.model import GpuSplit, ModelBuffers, split_tensors
from planner.engines.llamacpp.predict import LlamaCppArgs, LlamaCppPlan, plan
from planner.engines.worksheet import Row, Term, Worksheet
from planner.errors import PlannerError
from planner.units import GiB

MiB = 2**20
ROW_KEYS = (
    "model_gpu",
    "model_host",
    "kv_cells",
    "kv_total",
    "kv_k",
    "kv_v",
    "kv_gpu",
    "compute_gpu",
    "compute_host",
)
ROW_LABELS = {
    "model_gpu": "model buffer, GPU (MiB)",
    "model_host": "model buffer, host (MiB)",
    "kv_cells": "KV cells",
    "kv_total": "KV cache (MiB)",
    "kv_k": "K (MiB)",
    "kv_v": "V (MiB)",
    "kv_gpu": "KV buffer, GPU (MiB)",
    "compute_gpu": "compute buffer, GPU (MiB)",
    "compute_host": "compute buffer, host (MiB)",
}
# with several GPUs, one row per device and buffer: "model_CUDA1", "kv_CUDA1", "compute_CUDA1"
PER_DEVICE = {"model": "model buffer", "kv": "KV buffer", "compute": "compute buffer"}
# llama-quant.cpp llama_ftype_get_default_type and the output rule (lines 490-510 in b0c1e570): the type of
# token_embd (untied) and of output / a tied token_embd, by the file type print_info names.
FILE_TYPES: dict[str, tuple[str, str]] = {
    "F32": ("f32", "f32"), "F16": ("f16", "f16"), "BF16": ("bf16", "bf16"), "Q8_0": ("q8_0", "q8_0"),
    "Q4_0": ("q4_0", "q6_k"), "Q4_1": ("q4_1", "q6_k"), "Q5_0": ("q5_0", "q6_k"), "Q5_1": ("q5_1", "q6_k"),
    "Q2_K - Medium": ("q2_k", "q6_k"), "Q2_K - Small": ("q2_k", "q6_k"),
    "Q3_K - Small": ("q3_k", "q6_k"), "Q3_K - Medium": ("q3_k", "q6_k"), "Q3_K - Large": ("q3_k", "q6_k"),
    "Q4_K - Small": ("q4_k", "q6_k"), "Q4_K - Medium": ("q4_k", "q6_k"),
    "Q5_K - Small": ("q5_k", "q6_k"), "Q5_K - Medium": ("q5_k", "q6_k"), "Q6_K": ("q6_k", "q6_k"),
    "MXFP4 MoE": ("q8_0", "q8_0"),
}  # fmt: skip
# architectures whose GGUFs have no output.weight (the output reuses token_embd: TENSOR_DUPLICATED)
TIED_ARCHS = frozenset({"gemma", "gemma2", "gemma3", "gemma3n"})


@dataclass(frozen=True, slots=True)
class Explanation:
    model: str
    build: str
    inputs: tuple[tuple[str, str, str], ...]
    terms: tuple[Term, ...]
    rows: tuple[Row, ...]
    plan: LlamaCppPlan
    line: str
    notes: tuple[str, ...]
    stage: str


MAX_DIMENSION = 2**31  # a model dimension past this is a damaged log, not a model


def _int(log: LlamaCppLog, key: str, default: int | None = None) -> int | None:
    """A dimension print_info printed (its leading digits); out of range is one line, not a crash."""
    text = log.info.get(key)
    if text is None:
        return default
    m = re.match(r"\d+", text)
    if m is None:
        return default
    value = int(m.group(0)[:12])
    if value >= MAX_DIMENSION:
        raise PlannerError(f"the log's {key} = {m.group(0)[:20]} is not a model dimension")
    return value


def _need(log: LlamaCppLog, key: str) -> int:
    value = _int(log, key)
    if not value:
        raise PlannerError(
            f"the log does not print the model's {key} (print_info / llm_load_print_meta), or prints 0: the "
            "KV cache cannot be predicted without the architecture"
        )
    return value


def kv_shape(log: LlamaCppLog, inputs: list[tuple[str, str, str]]) -> KVShape:
    arch = log.info.get("arch") or log.metadata.get("general.architecture", "?")
    n_layer = _need(log, "n_layer")
    head_kv = _int(log, "n_head_kv")
    # the GGML era printed neither n_embd_k_gqa nor the head width: n_embd / n_head
    head = (_int(log, "n_embd") or 0) // (_int(log, "n_head") or 1)
    k_gqa = _int(log, "n_embd_k_gqa") or (head_kv or 0) * (_int(log, "n_embd_head_k") or head)
    v_gqa = _int(log, "n_embd_v_gqa") or (head_kv or 0) * (_int(log, "n_embd_head_v") or head)
    if not k_gqa or not v_gqa:
        raise PlannerError("the log prints neither n_embd_k_gqa nor n_head_kv x n_embd_head_k: no KV widths")
    n_swa = _int(log, "n_swa", 0) or 0
    interval = log.metadata.get(f"{arch}.full_attention_interval")
    nextn = _whole(log.metadata.get(f"{arch}.nextn_predict_layers"), "nextn_predict_layers", 0, minimum=0)
    kv_layers, swa, why = n_layer - nextn, 0, f"all {n_layer - nextn} layers have a KV cache"
    if interval:
        k = _whole(interval, "full_attention_interval")
        kv_layers = sum(1 for il in range(n_layer - nextn) if (il + 1) % k == 0)
        why = (
            f"hybrid: every {k}th layer is attention ({arch}.full_attention_interval): {kv_layers} KV layers"
        )
    if n_swa and (log.info.get("is_swa_any", "1") != "0"):
        swa, why = swa_layer_count(arch, kv_layers, _swa_pattern(log, arch))
    inputs.append(("architecture", f"{arch}, {n_layer} layers, K/V {k_gqa}/{v_gqa} per token", "log"))
    return KVShape(arch, n_layer, k_gqa, v_gqa, kv_layers, swa, n_swa, why)


def _swa_pattern(log: LlamaCppLog, arch: str) -> int | None:
    pattern = log.metadata.get(f"{arch}.attention.sliding_window_pattern")
    return int(pattern) if pattern and pattern.isdigit() else None


def graph_shape(log: LlamaCppLog, kv: KVShape) -> GraphShape:
    """The compute graph's shapes from print_info; Q/K/V biases and Q/K norms by architecture (qwen2 has the
    biases, qwen3 the norms: src/models/qwen2.cpp, qwen3.cpp)."""
    n_head = _need(log, "n_head")
    n_head_kv = _int(log, "n_head_kv") or n_head
    head = _need(log, "n_embd") // n_head
    head_k = _int(log, "n_embd_head_k") or kv.n_embd_k_gqa // n_head_kv or head
    head_v = _int(log, "n_embd_head_v") or kv.n_embd_v_gqa // n_head_kv or head
    n_ff = _int(log, "n_ff") or 0
    experts_used, ff_exp = _int(log, "n_expert_used") or 0, _int(log, "n_ff_exp")
    if experts_used and ff_exp:
        n_ff = ff_exp * experts_used
    swa = swa_layer_ids(kv.arch, kv.n_layer, _swa_pattern(log, kv.arch)) if kv.swa_layers else frozenset()
    return GraphShape(
        kv.arch,
        kv.n_layer,
        _need(log, "n_embd"),
        n_head,
        n_head_kv,
        head_k,
        head_v,
        n_ff,
        _need(log, "n_vocab"),
        swa,
        qkv_bias=kv.arch == "qwen2",
        qk_norm=kv.arch in ("qwen3", "qwen3moe"),
    )


def _file_bytes(log: LlamaCppLog) -> tuple[int, str] | None:
    """The GGUF's tensor bytes as print_info prints them ("file size" is the sum of ggml_nbytes over the
    tensors, llama-model-loader.cpp:592,1806-1809; "model size" in builds before ~b4400)."""
    text = log.info.get("file size") or log.info.get("model size")
    if not text:
        return None
    m = re.match(r"([\d.]+) (GiB|MiB)", text)
    if not m:
        return None
    value = limits.logged_number(m.group(1))
    if value is None or not plausible(value, m.group(2)):
        return None  # no size a GGUF has (inf, 400 digits): as if the log printed none
    scale = GiB if m.group(2) == "GiB" else MiB
    return round(value * scale), text


def model_from_log(
    log: LlamaCppLog, n_gpu_layers: int, inputs: list[tuple[str, str, str]], split: GpuSplit | None = None
) -> ModelBuffers:
    """The model buffers of the GGUF the log describes (log_tensors) split by -ngl and the devices."""
    return split_tensors(log_tensors(log, inputs), _need(log, "n_layer"), n_gpu_layers, split or GpuSplit())


def log_tensors(log: LlamaCppLog, inputs: list[tuple[str, str, str]]) -> list[tuple[str, int]]:
    """The GGUF's tensors as the log describes them: its printed tensor bytes less the input embedding
    llama.cpp keeps in host memory (n_vocab x n_embd in the file type's token_embd type) and the output layer,
    the rest spread evenly over the repeating layers ("blk.N.all")."""
    size = _file_bytes(log)
    if size is None:
        raise PlannerError(
            "the log does not print the GGUF's size (print_info: file size): give --model FILE.gguf"
        )
    total, text = size
    arch = log.info.get("arch", "?")
    n_layer, n_vocab, n_embd = _need(log, "n_layer"), _need(log, "n_vocab"), _need(log, "n_embd")
    ftype = (log.info.get("file type") or log.info.get("model ftype") or "").strip()
    ftype = re.sub(r"\s*\(guessed\)$", "", ftype)
    matrix_types = sorted(set(log.tensor_types) - {"f32"})
    if ftype in FILE_TYPES:
        embd_type, out_type = FILE_TYPES[ftype]
    elif len(matrix_types) == 1:  # a GGUF without general.file_type ("all F32 (guessed)"): one matrix type
        embd_type = out_type = matrix_types[0]
        ftype = f"{ftype}; the loader lists one matrix type, {embd_type}"
    else:
        raise PlannerError(f"the file type {ftype!r} is not one memsight knows the embedding type of")
    tied = arch in TIED_ARCHS
    embd = row_bytes(out_type if tied else embd_type, n_embd) * n_vocab
    output = 0 if tied else row_bytes(out_type, n_embd) * n_vocab
    if total < embd + output:
        raise PlannerError(
            f"the GGUF's printed size ({text}) is smaller than its embedding and output tensors"
        )
    per_layer = (total - embd - output) // n_layer
    tensors = [("token_embd.weight", embd)] + ([("output.weight", output)] if output else [])
    tensors += [(f"blk.{i}.all", per_layer) for i in range(n_layer)]
    inputs.append(("GGUF", f"{ftype}, {text}", "log (print_info)"))
    inputs.append(
        (
            "token_embd / output",
            f"{out_type if tied else embd_type} / {'tied' if tied else out_type}",
            "llama-quant.cpp's rule for the file type",
        ),
    )
    return tensors


def weight_sizes(tensors: list[tuple[str, int]], g: GraphShape) -> Any:
    """A weight's bytes for the graph (the copies a GPU makes of host weights): the token embedding and the
    output as printed; within a repeating layer its layer's bytes shared by value count (a k-quant mix gives
    some matrices more bits: an approximation)."""
    known = dict(tensors)
    per_layer = next((b for n, b in tensors if n.endswith(".all")), 0)
    values = (g.n_embd * g.n_head * g.head_k + g.n_embd * g.n_head_kv * (g.head_k + g.head_v)
              + g.n_head * g.head_v * g.n_embd + 3 * g.n_embd * g.n_ff + 2 * g.n_embd)  # fmt: skip
    tied = known.get("token_embd.weight", 0)

    def size(name: str, layer: int, n: int) -> int:
        if name in known:
            return known[name]
        if name == "output.weight":
            return tied
        if 0 <= layer < g.n_layer and values:
            return round(n * per_layer / values)
        return n * 4

    return size


def _whole(text: str | None, what: str, default: int | None = None, minimum: int = 1) -> int:
    """A whole number the log printed (n_ctx, n_seq_max, n_ubatch), or one line saying it is not one."""
    if text is None and default is not None:
        return default
    value = str(text).strip()
    if text is None or not value.isdigit() or len(value) > 13 or not minimum <= int(value) < 2**40:
        raise PlannerError(f"the log's {what} is not a whole number from {minimum}: {value[:40]!r}")
    return int(value)


def _flag(text: str | None, default: bool) -> bool:
    if text is None:
        return default
    return text.strip().lower() in ("1", "true", "on", "enabled", "auto")


def args_from_log(log: LlamaCppLog, inputs: list[tuple[str, str, str]]) -> LlamaCppArgs:
    n_ctx_text = log.context.get("n_ctx") or log.info.get("n_ctx")
    if n_ctx_text is None:
        raise PlannerError(
            "the log does not print n_ctx (llama_context: n_ctx = ...): the KV cells are unknown"
        )
    n_ctx = _whole(n_ctx_text, "n_ctx")
    seqs = _whole(log.context.get("n_seq_max"), "n_seq_max", 1)
    first = log.kv_caches[0] if log.kv_caches else None
    unified = _flag(log.context.get("kv_unified"), default=first is None or first.streams is None)
    k_type = (first.k_type if first else None) or log.context.get("type_k") or "f16"
    v_type = (first.v_type if first else None) or log.context.get("type_v") or "f16"
    offloaded = log.first("offloaded")
    ngl = int(offloaded.value) if offloaded is not None else 0
    flash = _flag(log.context.get("flash_attn_resolved", log.context.get("flash_attn")), default=False)
    ubatch = _whole(log.context.get("n_ubatch"), "n_ubatch", 512)
    typed = first is not None and first.k_type is not None or "type_k" in log.context
    inputs.append(("context (n_ctx, -np, -ub)", f"{n_ctx}, {seqs}, {ubatch}", "log"))
    sequences = "unified" if unified else "per sequence"
    kv_from = "log" if typed else "default (f16; the log names no KV type)"
    inputs.append(("KV types, sequences", f"K {k_type}, V {v_type}, {sequences}", kv_from))
    where = f"log line {offloaded.line}" if offloaded else "none (the log names no offloaded layer)"
    inputs.append(("offloaded layers (-ngl)", str(ngl), where))
    inputs.append(
        ("flash attention", "on" if flash else "off", "log" if "flash_attn" in log.context else "default")
    )
    kv_figs = log.figures.get("kv_buffer", ())
    kv_offload = not (kv_figs and all(not _gpu(f) for f in kv_figs))
    n_batch = _whole(log.context.get("n_batch"), "n_batch", max(ubatch, n_ctx))
    # llama_context: n_outputs_max (2026 builds) bounds the output rows reserved; before it, every token
    n_outputs = _whole(log.context.get("n_outputs_max"), "n_outputs_max", ubatch)
    inputs.append(
        (
            "output rows reserved",
            str(min(n_outputs, ubatch)),
            "log (n_outputs_max)"
            if "n_outputs_max" in log.context
            else "every token (builds before n_outputs_max)",
        )
    )
    gpus = gpu_devices(log)
    backend = re.sub(r"\d+$", "", gpus[0]) if gpus else "CUDA"
    free = dict(log.model_devices)
    shares = tuple(float(free[g]) for g in gpus) if len(gpus) > 1 and all(g in free for g in gpus) else ()
    split = GpuSplit(max(len(gpus), 1), shares)
    where = "log (using device ... MiB free: the default split)" if shares else "log (the buffers)"
    inputs.append(("devices", ", ".join(gpus) or "CPU only", where))
    return LlamaCppArgs(
        n_ctx=n_ctx, n_gpu_layers=ngl, n_seq_max=seqs, kv_unified=unified, type_k=k_type, type_v=v_type,
        n_ubatch=ubatch, flash_attn=flash, kv_offload=kv_offload, n_batch=n_batch, n_outputs=n_outputs,
        build=release_build(log), gpus=split, gpu_backend=backend, cpu_only=not gpus, devices=tuple(gpus),
    )  # fmt: skip


# llama.cpp built outside its git tree (a vendored copy, as llama-cpp-python's sdist builds) numbers itself
# from CMake's fallback, "build 1"; the oldest release a log here names is b907
FIRST_RELEASE_BUILD = 100


def release_build(log: LlamaCppLog) -> int | None:
    """The log's llama.cpp release number, None where it names none (the graph rules then take the newest)."""
    return log.build if log.build is not None and log.build >= FIRST_RELEASE_BUILD else None


def gpu_devices(log: LlamaCppLog) -> list[str]:
    """The devices llama.cpp spread the model over: in its order where the log prints "using device" lines,
    else the GPU backends its buffers name ("CUDA0", "CUDA1"; "Metal" for Metal_Mapped)."""
    if log.model_devices:
        return [d for d, _ in log.model_devices]
    seen: list[str] = []
    for name in ("model_buffer", "kv_buffer", "compute_buffer"):
        for fig in log.figures.get(name, ()):
            if _gpu(fig):
                device = "Metal" if fig.rank.startswith("Metal") else fig.rank
                if device not in seen:
                    seen.append(device)
    return sorted(seen, key=_device_order)


def _device_order(device: str) -> tuple[str, int]:
    """CUDA0 < CUDA1 < CUDA10 (by the number that ends the name; a name a log damaged sorts as text)."""
    m = re.match(r"^(.*?)(\d{1,9})$", device)
    return (m.group(1), int(m.group(2))) if m else (device, 0)


def _gpu(fig: Figure) -> bool:
    """A device buffer (CUDA0, ROCm0, Vulkan0, Metal, Metal_Mapped), not host memory (CPU, CPU_Mapped,
    CPU_REPACK, CUDA_Host / Vulkan_Host: pinned host memory)."""
    rank = fig.rank.upper()
    return not (rank.startswith("CPU") or rank.endswith("_HOST") or rank == "HOST")


def _kv_lines(log: LlamaCppLog, caches: int) -> tuple[Any, ...]:
    """The KV cache lines of the last load (a --fit dry run can print a set before the real one)."""
    if caches and len(log.kv_caches) >= caches:
        return log.kv_caches[-caches:]
    return log.kv_caches


def logged(log: LlamaCppLog, caches: int) -> dict[str, tuple[float, int] | None]:
    """The logged figure of each row (MiB, or cells) and its line."""
    out: dict[str, tuple[float, int] | None] = {k: None for k in ROW_KEYS}
    model = log.by_device("model_buffer")
    for key, devices in (("model_gpu", [f for f in model.values() if _gpu(f)]),
                         ("model_host", [f for f in model.values() if not _gpu(f)])):  # fmt: skip
        if devices:
            out[key] = (sum(f.value for f in devices), devices[0].line)
    chosen = _kv_lines(log, caches)
    if chosen:
        line = chosen[0].line
        cells = chosen[0].cells if chosen[0].cells is not None else log.context.get("kv_size")
        if cells is not None:
            out["kv_cells"] = (float(cells), line)
        out["kv_total"] = (sum(c.total_mib for c in chosen), line)
        if all(c.k_mib is not None and c.v_mib is not None for c in chosen):
            out["kv_k"] = (sum(c.k_mib or 0.0 for c in chosen), line)
            out["kv_v"] = (sum(c.v_mib or 0.0 for c in chosen), line)
        skipped = len(log.kv_caches) - len(chosen)
        start = log.kv_caches[skipped - 1].line if skipped else 0
        kv_figs = [f for f in log.figures.get("kv_buffer", ()) if start < f.line <= chosen[-1].line]
        if kv_figs:
            out["kv_gpu"] = (sum(f.value for f in kv_figs if _gpu(f)), kv_figs[0].line)
    compute = log.by_device("compute_buffer")
    for key, figs in (("compute_gpu", [f for f in compute.values() if _gpu(f)]),
                      ("compute_host", [f for f in compute.values() if not _gpu(f)])):  # fmt: skip
        if figs:
            out[key] = (sum(f.value for f in figs), figs[0].line)
    gpus = gpu_devices(log)
    if len(gpus) > 1:
        for short, name in (("model", "model_buffer"), ("kv", "kv_buffer"), ("compute", "compute_buffer")):
            figs = log.by_device(name)
            for device in gpus:
                fig = figs.get(device)
                out[f"{short}_{device}"] = (fig.value, fig.line) if fig else None
    return out


def _cause(key: str, rel: float | None, p: LlamaCppPlan, from_gguf: bool, log: LlamaCppLog) -> str:
    if rel is None:
        return "not predicted" if key.startswith("model") else ""
    if abs(rel) <= 0.01:
        return "within 1%"
    if key == "model_gpu" and any(f.rank.startswith("Metal") for f in log.figures.get("model_buffer", ())):
        return (
            "Metal maps the model file into its buffer (llama-model.cpp:1854-1868 buffer_from_host_ptr): the "
            "Metal_Mapped buffer spans the file from its first GPU tensor to its last "
            "(llama-model-loader.cpp:1449-1464 get_mapping_range), so host tensors stored between them "
            "(token_embd here) are counted too; the log does not print the file's tensor order"
        )
    host = log.context.get("host_tensors")
    if key.startswith("model") and host and int(host) > 1:
        return (
            f"{host} tensors stay in host memory (the log: '... (and {int(host) - 1} others) cannot be used "
            "with preferred buffer type'), not only token_embd: --n-cpu-moe or --override-tensor keeps them "
            "there, which the log does not print; the prediction places every tensor by -ngl alone"
        )
    if key.startswith("model_") and key not in ("model_gpu", "model_host"):
        return (
            "the layers on this device are the right ones (see its KV row), but the repeating layers are "
            "taken as equal in size: a k-quant mix gives some layers more bits (llama-quant use_more_bits)"
        )
    if key.startswith("model"):
        if from_gguf:
            return (
                "the GGUF's tensors split by -ngl differ from llama.cpp's buffers (repacked or extra buffers)"
            )
        return (
            "from the GGUF's printed size (2 decimals) and llama-quant's type rule for token_embd/output; "
            "repeating layers taken as equal in size"
        )
    if key.startswith("kv"):
        return "the cells, KV layers or widths differ from llama.cpp's (a build with other padding or layers)"
    if key.startswith("compute"):
        if p.compute.how != "DERIVED":
            return p.compute.terms[0]
        if key == "compute_host" and any(t.startswith("CPU#inp_embd#") for t in _peak_names(p)):
            return (
                "with pipeline parallelism 0c1e570 keeps 4 copies of every graph input, the unused "
                "embeddings input too (ggml-backend.cpp pass 6); a build that copies only the inputs the "
                "graph reads keeps one of it"
            )
        return (
            "DERIVED from llama.cpp's graph: a build whose graph differs from the one replayed "
            f"({p.compute.terms[0].split(':')[0]}), or a backend's own additions (see the compute term)"
        )
    return ""


def not_the_logs_model(log: LlamaCppLog, model: str) -> str | None:
    """A sentence when --model's GGUF is not the one the log loaded (its tensor bytes differ from print_info's
    file size past the log's 2-decimal rounding, or its tensor count from the loader's), else None: a wrong
    file is then named as the cause, not llama.cpp's buffers."""
    from planner.engines.llamacpp.plan import gguf_info  # noqa: PLC0415

    info = gguf_info(model)
    printed = _file_bytes(log)
    unit = "GiB" if printed and " GiB" in printed[1] else "MiB"
    scale = GiB if unit == "GiB" else MiB
    size_differs = printed is not None and abs(info.tensor_bytes - printed[0]) > 0.005 * scale + 1
    count_differs = log.tensor_count is not None and log.tensor_count != len(info.tensors)
    if not (size_differs or count_differs):
        return None
    matrices = {t: b for t, b in info.bytes_by_dtype.items() if t.upper() != "F32"} or info.bytes_by_dtype
    gguf_type = max(matrices, key=lambda t: matrices[t]).upper() if matrices else "?"
    log_type = re.sub(r"\s*\(guessed\)$", "", (log.info.get("file type") or "?").strip())
    log_size = f"{printed[0] / scale:,.2f} {unit}" if printed else "size not printed"
    counts = f"; {len(info.tensors)} tensors vs {log.tensor_count}" if count_differs else ""
    return (
        f"this GGUF is not the log's model ({gguf_type} {info.tensor_bytes / scale:,.2f} {unit} vs "
        f"{log_type} {log_size}{counts})"
    )


def _peak_names(p: LlamaCppPlan) -> list[str]:
    return [name for term in p.compute.terms for name in re.findall(r"(\S+#\S+#\d)", term)]


def _predict(
    log: LlamaCppLog, model: str | None, inputs: list, notes: list
) -> tuple[Any, ModelBuffers | None, Any]:
    shape = kv_shape(log, inputs)
    args = args_from_log(log, inputs)
    buffers: ModelBuffers | None
    graph = graph_shape(log, shape)
    if model is not None:
        from planner.engines.llamacpp.plan import gguf_tensors, weight_table  # noqa: PLC0415

        buffers = split_tensors(gguf_tensors(model), shape.n_layer, args.n_gpu_layers, args.gpus)
        graph = dataclasses.replace(graph, weight_bytes=weight_table(model))
        inputs.append(("GGUF", model, "--model (its tensor table)"))
    else:
        try:
            tensors = log_tensors(log, inputs)
            buffers = split_tensors(tensors, shape.n_layer, args.n_gpu_layers, args.gpus)
            graph = dataclasses.replace(graph, weight_bytes=weight_sizes(tensors, graph))
        except PlannerError as exc:  # the KV can still be explained; the model rows say why not
            notes.append(f"model buffers not predicted: {exc}")
            buffers = None
    weights = buffers or split_tensors([], shape.n_layer, args.n_gpu_layers, args.gpus)
    if args.gpus.n_gpus > 1:
        how = (
            "by the free memory the log prints"
            if args.gpus.tensor_split
            else "equally (no free memory logged)"
        )
        notes.append(
            f"{args.gpus.n_gpus} devices: the layers split as llama.cpp does without -ts, {how}; a -ts the "
            "log does not print would change it"
        )
    return shape, buffers, plan(shape, graph, weights, args)


def explain(log: LlamaCppLog, *, model: str | None = None) -> Explanation:
    inputs: list[tuple[str, str, str]] = []
    notes: list[str] = []
    name = log.metadata.get("general.name", "").strip() or log.info.get("general.name", "?")
    inputs.append(("model", name, "log (general.name)"))
    build = _build_text(log)
    inputs.append(("llama.cpp build", build, "log" if log.build else "-"))
    wrong_model = not_the_logs_model(log, model) if model is not None else None
    if wrong_model:
        notes.append(wrong_model)
    shape, buffers, p = _predict(log, model, inputs, notes)
    predicted = _predicted(p, buffers)
    seen = logged(log, len(p.kv.caches))
    rows = _rows(log, p, seen, predicted, model is not None, wrong_model)
    terms = _terms(p, buffers)
    model_text = (
        f"model {buffers.gpu_bytes / MiB:,.2f} MiB on the GPU + {buffers.cpu_bytes / MiB:,.2f} MiB host"
        if buffers
        else "model buffers not predicted"
    )
    kv_logged = seen["kv_total"]
    line = (
        f"llama.cpp: predicted KV {p.kv.bytes / MiB:,.2f} MiB ({predicted['kv_cells']:,.0f} cells x "
        f"{shape.kv_layers} layers, K {p.kv_args.type_k}, V {p.kv_args.type_v}), {model_text}; logged KV "
        + (f"{kv_logged[0]:,.2f} MiB" if kv_logged else "not in the log")
    )
    notes.extend(_logged_extras(log))
    return Explanation(
        name, build, tuple(inputs), terms, tuple(rows), p, line, (*notes, *p.notes[:-1]), log.stage
    )


def _build_text(log: LlamaCppLog) -> str:
    """The build the log names, as the inputs show it."""
    build = (f"b{log.build}" + (f" ({log.commit})" if log.commit else "")) if log.build else "not in the log"
    if log.build is not None and release_build(log) is None:
        build += ": no release number (built outside llama.cpp's git tree), the newest graph taken"
    return build


def _predicted(p: LlamaCppPlan, buffers: ModelBuffers | None) -> dict[str, float | None]:
    """The plan's figure for each row the log may have, in MiB (the KV cells as a count)."""
    predicted = {
        "model_gpu": buffers.gpu_bytes / MiB if buffers else None,
        "model_host": buffers.cpu_bytes / MiB if buffers else None,
        "kv_cells": float(p.kv.caches[0].cells) if p.kv.caches else None, "kv_total": p.kv.bytes / MiB,
        "kv_k": p.kv.k_bytes / MiB, "kv_v": p.kv.v_bytes / MiB, "kv_gpu": p.kv_gpu_bytes / MiB,
        "compute_gpu": p.compute.bytes / MiB, "compute_host": p.compute.host_bytes / MiB,
    }  # fmt: skip
    for device, model_b, kv_b, compute_b in p.per_device()[:-1]:
        predicted.update(
            {
                f"model_{device}": model_b / MiB if buffers else None,
                f"kv_{device}": kv_b / MiB,
                f"compute_{device}": compute_b / MiB,
            }
        )
    return predicted


def _rows(
    log: LlamaCppLog,
    p: LlamaCppPlan,
    seen: dict[str, tuple[float, int] | None],
    predicted: dict[str, float | None],
    from_gguf: bool,
    wrong_model: str | None,
) -> list[Row]:
    """A row for each figure the log may have: logged against predicted, and why they differ."""
    rows = []
    for key in seen:
        fig, value = seen[key], predicted.get(key)
        rel = None if fig is None or not fig[0] or value is None else value / fig[0] - 1
        how = p.compute.how if key.startswith("compute") else ("PREDICTED" if value is not None else "-")
        cause = _cause(key, rel, p, from_gguf, log) if fig is not None else ""
        if wrong_model and key.startswith("model") and rel is not None and abs(rel) > 0.01:
            cause = wrong_model  # the file given, not llama.cpp, is what differs
        rows.append(
            Row(key, None if fig is None else fig[0], None if fig is None else fig[1], value, how, cause)
        )
    return rows


def _terms(p: LlamaCppPlan, buffers: ModelBuffers | None) -> tuple[Term, ...]:
    """The plan's buffers, each with how it was found and what it holds."""
    weights = p.model
    model_how = "PREDICTED" if buffers else "not predicted"
    return (
        Term("model buffer, GPU", weights.gpu_bytes, model_how, "; ".join(weights.terms)),
        Term("model buffer, host", weights.cpu_bytes, model_how, "token_embd and the layers -ngl leaves"),
        Term("KV cache", p.kv.bytes, "PREDICTED", "; ".join(p.kv.terms)),
        Term("KV buffer, GPU", p.kv_gpu_bytes, "PREDICTED", p.notes[-1]),
        Term("compute buffer, GPU", p.compute.bytes, p.compute.how, "; ".join(p.compute.terms)),
        Term("compute buffer, host", p.compute.host_bytes, p.compute.how, "the CPU side of the same graph"),
    )


def _logged_extras(log: LlamaCppLog) -> list[str]:
    """What the log says about memory beyond the rows: the breakdown table (llama.cpp's own account per
    device, with what it cannot account for), the --fit lines and the host-side buffers."""
    out = []
    for r in log.breakdown:
        head = f"{r['total']} = free {r['free']} + " if "total" in r else ""
        tail = f" + unaccounted {r['unaccounted']}" if "unaccounted" in r else ""
        out.append(
            f"logged memory breakdown, {r['device']} (MiB): {head}self {r['self']} (model {r['model']} + "
            f"context {r['context']} + compute {r['compute']}){tail}"
        )
    out.extend(f"logged --fit: {line}" for line in log.fit)
    names = ("compute_buffer", "output_buffer")
    host = [f for name in names for f in log.by_device(name).values() if not _gpu(f)]
    if host:
        listed = ", ".join(f"{f.name} {f.rank} {f.text}" for f in host)
        out.append(f"logged host buffers (MiB, not predicted): {listed}")
    return out


def _labels(rows: tuple[Row, ...]) -> dict[str, str]:
    labels = dict(ROW_LABELS)
    for r in rows:
        short, _, device = r.key.partition("_")
        if short in PER_DEVICE and r.key not in labels:
            labels[r.key] = f"{PER_DEVICE[short]}, {device} (MiB)"
    return labels


def to_worksheet(ex: Explanation) -> Worksheet:
    return Worksheet(
        engine="llamacpp",
        line=ex.line,
        title=f"llama.cpp {ex.build}" if ex.build.startswith("b") else "llama.cpp (build not in the log)",
        model=ex.model,
        identity=(("llamacpp_build", ex.build), ("engine", "llamacpp")),
        stage=ex.stage,
        inputs=ex.inputs,
        terms=ex.terms,
        rows=ex.rows,
        labels=_labels(ex.rows),
        notes=ex.notes,
        counts=frozenset({"kv_cells"}),
    )


def stage_problem(log: LlamaCppLog) -> str | None:
    """One line naming what was recognized when the log cannot be explained, else None."""
    if log.bad_size is not None:
        # a damaged figure, not a cut log: explaining the rest would compare predictions with a hole
        return f"line {log.bad_size_line}: {log.bad_size}"
    if log.kv_caches:
        return None
    where = STAGE_WORDS[log.stage]
    if log.error:
        return f"llama.cpp died {where} (line {log.error_line}): {log.error}"
    if log.stage in ("context", "ready"):
        # the KV buffers were logged: what is missing is the one line that gives the cache's total and shape
        missing = "no `llama_kv_cache: size = ...` line (the KV cache's total, cells and layers) to explain"
        if log.stage == "ready":
            return f"a llama.cpp log whose context was ready but with {missing}: that line was cut out"
        return f"a llama.cpp log that stops {where}, with {missing}: the log was cut, or it died there"
    return (
        f"a llama.cpp log that stops {where}: no KV cache line to explain (the log was cut, or it died there)"
    )
