"""A checkpoint's quantization_config, read into a QuantSpec: one reader per method (fp8, mxfp4, awq/gptq,
modelopt FP8/NVFP4, compressed-tensors, bitsandbytes 4-bit); a method that is not priced is refused.

planner/spec.py's spec_from_config calls _quantization; QuantSpec is in planner/spec_types.py, the field
bounds (config_int) in planner/spec_fields.py, each architecture's reading in planner/spec_families.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from planner import limits
from planner.errors import PlannerError
from planner.spec_fields import config_int
from planner.spec_types import QuantSpec


def _quantization(config: Mapping[str, Any], decoder: Mapping[str, Any], name: str) -> QuantSpec | None:
    """The quantization_config (the decoder's wins over a wrapper's) by its method, each read by a helper of
    its own; a method that is not priced is refused, never taken for 16-bit weights."""
    qc = decoder.get("quantization_config", config.get("quantization_config"))
    if qc is None:
        return None
    if not isinstance(qc, Mapping):
        raise PlannerError(f"{name}: config field 'quantization_config' must be an object")
    method = str(qc.get("quant_method", "")).lower()
    skip = _modules_kept(qc, name)
    if method == "fp8":
        return _fp8(qc, skip, name)
    if method == "mxfp4":
        return QuantSpec("mxfp4", 4, group_size=32, modules_to_not_convert=skip)
    if method in ("awq", "gptq"):
        return _awq_gptq(qc, method, skip, name)
    if method == "modelopt":
        return _modelopt(qc, skip, name)
    if method == "compressed-tensors":
        return _compressed_tensors(qc, skip, name)
    if method == "bitsandbytes" and qc.get("load_in_4bit"):
        return _bitsandbytes_4bit(qc, skip, name)
    raise PlannerError(
        f"{name}: quantization_config.quant_method {method or None!r} is not modelled; "
        "known: fp8, mxfp4, awq, gptq, modelopt (FP8/NVFP4), compressed-tensors (fp8/int8/nvfp4/int4 "
        "groups), "
        "bitsandbytes 4-bit"
    )


def _modules_kept(qc: Mapping[str, Any], name: str) -> tuple[str, ...]:
    """The module patterns a checkpoint keeps unquantized, under whichever of the three names its tool
    writes; read before the method, so a malformed list is refused whatever the method."""
    skip = qc.get("modules_to_not_convert") or qc.get("ignored_layers") or qc.get("ignore") or ()
    if not isinstance(skip, Sequence) or isinstance(skip, str):
        raise PlannerError(f"{name}: quantization_config.modules_to_not_convert must be a list of names")
    return tuple(str(s) for s in skip)


def _fp8(qc: Mapping[str, Any], skip: tuple[str, ...], name: str) -> QuantSpec:
    """Per-tensor fp8, or block-scaled fp8 when the config gives weight_block_size: the scales' bytes
    differ, so a malformed block shape is refused rather than read as per-tensor."""
    block = qc.get("weight_block_size")
    if block is None:
        return QuantSpec("fp8", 8, modules_to_not_convert=skip)
    if (
        not isinstance(block, Sequence)
        or len(block) != 2
        or not all(isinstance(b, int) and 0 < b <= limits.MAX_CONFIG_INT for b in block)
    ):
        raise PlannerError(f"{name}: quantization_config.weight_block_size must be [rows, cols]")
    return QuantSpec("fp8_block", 8, block_size=(block[0], block[1]), modules_to_not_convert=skip)


def _awq_gptq(qc: Mapping[str, Any], method: str, skip: tuple[str, ...], name: str) -> QuantSpec:
    """4-bit AWQ / GPTQ: AutoAWQ writes w_bit / q_group_size where GPTQ writes bits / group_size, and only
    grouped 4-bit packing is priced (per-channel scales, other widths are refused, not guessed)."""

    def need_int(key: str, default: int | None = None) -> int:
        value = qc.get(key, default)
        return config_int(name, f"quantization_config.{key}", value, 1)

    bits = need_int("bits", 4) if "bits" in qc else need_int("w_bit", 4)
    group = qc.get("group_size", qc.get("q_group_size", 128))
    if group == -1:
        raise PlannerError(
            f"{name}: quantization_config.group_size -1 (one scale per output channel) is not modelled"
        )
    group = config_int(name, "quantization_config.group_size", group, 1)
    if bits != 4:
        raise PlannerError(f"{name}: quantization_config.bits={bits}: only 4-bit {method} is modelled")
    # GPTQ checkpoints store qzeros even when symmetric; AWQ only with zero_point (the default).
    zero = bool(qc.get("zero_point", True)) if method == "awq" else True
    return QuantSpec(method, bits, group_size=group, modules_to_not_convert=skip, zero_point=zero,
                     desc_act=bool(qc.get("desc_act", False)))  # fmt: skip


def _modelopt(qc: Mapping[str, Any], skip: tuple[str, ...], name: str) -> QuantSpec:
    """NVIDIA ModelOpt names its scheme in quant_algo, not quant_method: FP8 and NVFP4 are priced."""
    algo = str(qc.get("quant_algo", "")).upper()
    if algo == "FP8":
        return QuantSpec("fp8", 8, modules_to_not_convert=skip)
    if algo == "NVFP4":
        return QuantSpec("nvfp4", 4, group_size=16, modules_to_not_convert=skip)
    raise PlannerError(f"{name}: quantization_config.quant_algo {algo!r} (modelopt) is not modelled")


def _bitsandbytes_4bit(qc: Mapping[str, Any], skip: tuple[str, ...], name: str) -> QuantSpec:
    """bitsandbytes 4-bit (nf4 / fp4): the layers it leaves in 16 bit and its block size set the bytes."""
    # llm_int8_skip_modules: the layers a checkpoint keeps in 16 bit (Unsloth's dynamic 4-bit lists some)
    kept = qc.get("llm_int8_skip_modules") or ()
    if not isinstance(kept, Sequence) or isinstance(kept, str):
        raise PlannerError(f"{name}: quantization_config.llm_int8_skip_modules must be a list of names")
    quant_type = str(qc.get("bnb_4bit_quant_type", "fp4")).lower()  # bitsandbytes' own default is fp4
    if quant_type not in ("nf4", "fp4"):
        raise PlannerError(f"{name}: quantization_config.bnb_4bit_quant_type {quant_type!r} is not nf4/fp4")
    block = qc.get("bnb_4bit_blocksize", 64)
    if isinstance(block, bool) or not isinstance(block, int) or block <= 0:
        raise PlannerError(f"{name}: quantization_config.bnb_4bit_blocksize must be a positive integer")
    return QuantSpec(f"bnb_{quant_type}", 4, group_size=block,
                     modules_to_not_convert=(*skip, *(str(k) for k in kept)))  # fmt: skip


def _compressed_tensors(qc: Mapping[str, Any], skip: tuple[str, ...], name: str) -> QuantSpec:
    groups = qc.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise PlannerError(f"{name}: quantization_config.config_groups (compressed-tensors) is missing")
    weights = [g.get("weights") for g in groups.values() if isinstance(g, Mapping)]
    if not weights or not all(isinstance(w, Mapping) for w in weights):
        raise PlannerError(f"{name}: quantization_config.config_groups.*.weights is missing")
    w = weights[0]
    if any(other != w for other in weights[1:]):
        raise PlannerError(f"{name}: compressed-tensors with several weight schemes is not modelled")
    bits, kind, strategy = w.get("num_bits"), w.get("type"), w.get("strategy")
    if bits == 8 and kind == "float":
        block = w.get("block_structure")
        if strategy == "block" and isinstance(block, Sequence) and len(block) == 2:
            rows = config_int(name, "quantization_config block_structure[0]", block[0], 1)
            cols = config_int(name, "quantization_config block_structure[1]", block[1], 1)
            return QuantSpec("fp8_block", 8, block_size=(rows, cols), modules_to_not_convert=skip)
        return QuantSpec("fp8", 8, modules_to_not_convert=skip)
    if bits == 8 and kind == "int":
        return QuantSpec("int8", 8, modules_to_not_convert=skip)
    if bits == 4 and kind == "float" and w.get("group_size") == 16:
        return QuantSpec("nvfp4", 4, group_size=16, modules_to_not_convert=skip)
    if bits == 4 and kind == "int" and strategy == "group":
        group = config_int(name, "compressed-tensors group_size", w.get("group_size"), 1)
        return QuantSpec("gptq", 4, group_size=group, modules_to_not_convert=skip,
                         zero_point=not bool(w.get("symmetric", True)))  # fmt: skip
    raise PlannerError(
        f"{name}: compressed-tensors weights num_bits={bits} type={kind} strategy={strategy} is not modelled"
    )
