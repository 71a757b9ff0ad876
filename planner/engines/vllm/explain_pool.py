"""How explain() predicts vLLM's KV pool for the resolved run (explain_settings.py _Run): vllm_pool sized
as vLLM would, with what vLLM holds beyond the checkpoint (padded / split MoE experts, a vision tower), the
encoder's profile run, what 0.27+ counts as consumed after its baseline and the CUDA-graph estimate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.engines.vllm.encoder import (
    encoder_profile,
    full_config,
    images_per_prompt,
    plain_vision_tower,
    plain_vision_weight_bytes,
    vision_tower,
    vision_weight_bytes,
)
from planner.engines.vllm.explain_settings import _Run, _Settings
from planner.engines.vllm.moe import expert_split_extras, vllm_weight_extras
from planner.engines.vllm.overheads import predicted_cudagraphs
from planner.engines.vllm.pool import VLLMPool, vllm_pool
from planner.engines.vllm.runner_v2 import with_consumed
from planner.engines.vllm.version import parse_version
from planner.engines.worksheet import Term


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
