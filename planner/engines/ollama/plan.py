"""`memsight plan MODEL --engine ollama`: Ollama's own figures before a model is loaded.

From the model spec and what Ollama would run it with (its defaults for the release where a setting is not
given: defaults.py): the runner's context (num_ctx x num_parallel), the KV cache type and flash attention;
then the scheduler's estimate as Ollama computes it (estimate.py: memory.required.kv, memory.weights.total)
and what its own engine allocates (cache.py: the KV cache per layer with its padding and sliding windows,
the weights per device for the layers given to the GPU). The compute graph is not derived (ggml sizes it
when it schedules the graph), so the total is weights + KV and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.engines.ollama.cache import (
    gpu_layers_from,
    kv_by_device,
    llama_runner_kv_shaped,
    llama_runner_weights,
    ollama_kv_layers,
    weights_by_device,
)
from planner.engines.ollama.defaults import DEFAULT_VERSION, LIBRARY_FORMAT, OllamaDefaults, defaults_for
from planner.engines.ollama.estimate import OllamaEstimate, ollama_estimate
from planner.engines.worksheet import Term, max_users_meaning
from planner.errors import PlannerError
from planner.spec import ModelSpec
from planner.units import GiB

MiB = 2**20


@dataclass(frozen=True, slots=True)
class OllamaArguments:
    version: str = DEFAULT_VERSION
    total_vram_bytes: int | None = None  # all GPUs together (the VRAM-based default context from v0.15.5)
    num_ctx: int | None = None
    num_parallel: int | None = None
    kv_cache_type: str | None = None
    flash_attention: bool | None = None
    gpu_layers: int | None = None  # repeating layers + output on the GPU; None: all of them
    batch: int = 512
    weight_format: str | None = None  # q4_k_m (Ollama's library default) or q8_0
    runner: str = "ollama"  # "ollama": its own engine; "llama": the llama.cpp runner (llama.cpp's arithmetic)


@dataclass(frozen=True, slots=True)
class OllamaPlan:
    arguments: OllamaArguments
    defaults: OllamaDefaults
    num_ctx: int
    parallel: int
    kv_type: str
    flash: bool
    weight_format: str
    estimate: OllamaEstimate
    kv: dict[str, int]
    weights: dict[str, int]
    gpu_layers: int
    terms: tuple[Term, ...]
    notes: tuple[str, ...]

    @property
    def context(self) -> int:
        return self.num_ctx * self.parallel


def predict(spec: ModelSpec, arguments: OllamaArguments) -> OllamaPlan:
    """Ollama's settings (its release's defaults where not given), then what its runner allocates and what
    its scheduler estimates."""
    train_ctx = spec.max_position_embeddings
    defaults = defaults_for(arguments.version, arguments.total_vram_bytes, train_ctx)
    num_ctx = arguments.num_ctx or defaults.num_ctx
    parallel = arguments.num_parallel or defaults.num_parallel
    flash = defaults.flash_attention if arguments.flash_attention is None else arguments.flash_attention
    notes: list[str] = []
    kv_type = _kv_type(arguments, defaults, flash, notes)
    fmt = arguments.weight_format or LIBRARY_FORMAT
    context = num_ctx * parallel
    if context < parallel:
        raise PlannerError(f"num_ctx {num_ctx} is below one token per parallel request")
    blocks = len(spec.layers)
    gpu = blocks + 1 if arguments.gpu_layers is None else max(0, min(arguments.gpu_layers, blocks + 1))
    kv, weights, n_layers = _allocations(spec, arguments, fmt, gpu, context, parallel, kv_type, flash)
    estimate = ollama_estimate(spec, fmt, context, parallel, arguments.batch, kv_type)
    terms = _terms(arguments, fmt, gpu, blocks, num_ctx, parallel, kv_type, kv, weights, n_layers, estimate)
    if train_ctx and num_ctx > train_ctx:
        notes.append(f"num_ctx {num_ctx:,} is past the model's trained context {train_ctx:,}")
    notes.append("the compute graph is not derived: the total is weights + KV")
    return OllamaPlan(arguments, defaults, num_ctx, parallel, kv_type, flash, fmt, estimate, kv, weights, gpu,
                      terms, tuple(notes))  # fmt: skip


def _kv_type(arguments: OllamaArguments, defaults: OllamaDefaults, flash: bool, notes: list[str]) -> str:
    """The cache type Ollama really runs: a quantized cache needs flash attention, and without it Ollama
    falls back to f16 silently, so the plan says so."""
    kv_type = (arguments.kv_cache_type or defaults.kv_cache_type).lower()
    if kv_type != "f16" and not flash:
        notes.append(
            f"Ollama keeps an f16 cache without flash attention: {kv_type} is ignored (llm/server.go)"
        )
        kv_type = "f16"
    return kv_type


def _allocations(
    spec: ModelSpec, arguments: OllamaArguments, fmt: str, gpu: int, context: int, parallel: int,
    kv_type: str, flash: bool,
) -> tuple[dict[str, int], dict[str, int], int]:  # fmt: skip
    """(KV per device, weights per device, KV layers) as the chosen runner allocates them: Ollama's own
    engine and the llama.cpp runner pad and place the cache differently."""
    gpu_layers, output_on_gpu = gpu_layers_from(gpu, len(spec.layers))
    if arguments.runner == "llama":
        return _llama_runner(spec, fmt, gpu, context, parallel, arguments.batch, kv_type, flash)
    if arguments.runner == "ollama":
        layers = ollama_kv_layers(spec, context, parallel, arguments.batch, kv_type, flash)
        kv, n_layers = kv_by_device(layers, gpu_layers), len(layers)
        return kv, weights_by_device(spec, fmt, gpu_layers, output_on_gpu), n_layers
    raise PlannerError(f"unknown Ollama runner {arguments.runner!r}: ollama (its own engine) or llama")


def _terms(
    arguments: OllamaArguments, fmt: str, gpu: int, blocks: int, num_ctx: int, parallel: int, kv_type: str,
    kv: dict[str, int], weights: dict[str, int], n_layers: int, estimate: OllamaEstimate,
) -> tuple[Term, ...]:  # fmt: skip
    """The worksheet's terms, each saying whether its setting was given or Ollama's default, since the
    default context and parallelism change from release to release."""
    how = {True: "given", False: "default"}
    return (
        Term(
            "weights on GPU", weights["GPU"], "PREDICTED", f"planner.formats {fmt}: {gpu}/{blocks + 1} layers"
        ),
        Term(
            "weights on CPU",
            weights["CPU"],
            "PREDICTED",
            "token embeddings (always on the CPU) + layers left",
        ),
        Term(
            "KV cache",
            sum(kv.values()),
            "PREDICTED",
            f"{num_ctx * parallel:,} cells ({how[arguments.num_ctx is not None]} num_ctx {num_ctx:,} x "
            f"{how[arguments.num_parallel is not None]} parallel {parallel}) x {n_layers} layers, "
            f"{kv_type}",
        ),
        Term("Ollama's KV estimate", estimate.kv, "PREDICTED", "llm/memory.go: context x layers x KV width"),
    )


def _llama_runner(
    spec: ModelSpec, fmt: str, gpu: int, context: int, parallel: int, batch: int, kv_type: str, flash: bool
) -> tuple[dict[str, int], dict[str, int], int]:
    """KV and weights per device as the llama runner (llama.cpp) allocates them: planner.engines.llamacpp."""
    from planner.engines.llamacpp.predict import kv_on_gpus  # noqa: PLC0415

    plan, shape = llama_runner_kv_shaped(spec, context, parallel, batch, kv_type, flash)
    model = llama_runner_weights(spec, fmt, gpu)
    kv_gpu = sum(kv_on_gpus(plan, shape, model, kv_offload=True)[0])
    return (
        {"GPU": kv_gpu, "CPU": plan.bytes - kv_gpu},
        {"GPU": model.gpu_bytes, "CPU": model.cpu_bytes},
        shape.kv_layers,
    )


def plan_json(plan: OllamaPlan) -> dict:
    """The `ollama` object of `memsight plan --engine ollama --json` (bytes as integers)."""
    return {
        "ollama_version": plan.arguments.version,
        "num_ctx": plan.num_ctx,
        "num_parallel": plan.parallel,
        "kv_cache_type": plan.kv_type,
        "flash_attention": plan.flash,
        "weight_format": plan.weight_format,
        "gpu_layers": plan.gpu_layers,
        "estimate_kv_bytes": plan.estimate.kv,
        "estimate_weights_bytes": plan.estimate.weights,
        "weights_gpu_bytes": plan.weights["GPU"],
        "weights_cpu_bytes": plan.weights["CPU"],
        "kv_gpu_bytes": plan.kv["GPU"],
        "kv_cpu_bytes": plan.kv["CPU"],
        "defaults": plan.defaults.source,
        "notes": list(plan.notes),
    }


def answers(plan: OllamaPlan, tokens_per_user: int, max_users: int) -> str:
    """How Ollama's own figure of users relates to the four-bucket plan's "max users" above it."""
    fits = "each" if tokens_per_user <= plan.num_ctx else f"none at {tokens_per_user:,} tokens: each"
    return (
        f"which answers what: Ollama sizes its KV cache for num_ctx x parallel whatever the prompts, so it "
        f"serves {plan.parallel} user(s) at once, {fits} up to num_ctx {plan.num_ctx:,} tokens (more wait "
        f"in its queue); {max_users_meaning(max_users, tokens_per_user)}"
    )


def render(plan: OllamaPlan) -> list[str]:
    est = plan.estimate
    lines = [
        f"  Ollama ({plan.arguments.version} rules): num_ctx {plan.num_ctx:,} x parallel {plan.parallel}, "
        f"KV {plan.kv_type}, flash attention {'on' if plan.flash else 'off'}, {plan.weight_format}",
        f"    Ollama's estimate    KV {est.kv / MiB:>10,.1f} MiB, weights "
        + ("not priced" if est.weights is None else f"{est.weights / GiB:,.2f} GiB")
        + "  (memory.required.kv, memory.weights.total)",
        f"    weights on GPU       {plan.weights['GPU'] / GiB:>9.2f} GiB  ({plan.gpu_layers} layers)",
        f"    weights on CPU       {plan.weights['CPU'] / GiB:>9.2f} GiB",
        f"    KV cache on GPU      {plan.kv['GPU'] / GiB:>9.2f} GiB",
        f"    KV cache on CPU      {plan.kv['CPU'] / GiB:>9.2f} GiB",
        f"    defaults: {plan.defaults.source}",
    ]
    lines.extend(f"    note: {note}" for note in plan.notes)
    return lines
