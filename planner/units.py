"""Units the planner speaks. Bytes are ``int`` everywhere inside; these constants are for the edges only."""

from __future__ import annotations

GiB: int = 2**30  # memory capacities and usage
MiB: int = 2**20
KiB: int = 2**10
GB: int = 10**9  # decimal: file sizes on the Hub, bandwidth

# Bytes per element of the floating-point / integer dtypes a config or a cache can name.
# Keys are the spellings transformers and vLLM use ("bfloat16", "bf16", ...), normalised by dtype_bytes().
_DTYPE_BYTES: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int8": 1,
    "uint8": 1,
}

_DTYPE_ALIASES: dict[str, str] = {
    "fp64": "float64",
    "double": "float64",
    "fp32": "float32",
    "float": "float32",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "fp8": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn",
    "float8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
}


def canonical_dtype(name: str) -> str:
    """'torch.bfloat16', 'bf16', 'BFloat16' -> 'bfloat16'; raises ValueError for a name we do not know."""
    key = str(name).strip().lower().removeprefix("torch.")
    key = _DTYPE_ALIASES.get(key, key)
    if key not in _DTYPE_BYTES:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(sorted(_DTYPE_BYTES))}")
    return key


def dtype_bytes(name: str) -> int:
    """Bytes per element of a dtype name (any spelling canonical_dtype accepts)."""
    return _DTYPE_BYTES[canonical_dtype(name)]


def size_text(n: int | None) -> str:
    """A figure standing alone, in its own unit, to three significant digits: `21.8 GiB`, `1.50 GiB`,
    `15.9 MiB`, `640 KiB`, `64 B`; `n/a` when unknown. The one rule for every such figure: the screens
    (tui/widgets/fmt.py size) and the planner's and collectors' text use it, so a tiny model's 2.53 MiB
    never reads 0.00 GiB."""
    if n is None:
        return "n/a"
    if abs(n) < KiB:
        return f"{n:,} B"
    name, unit = next((u for u in (("GiB", GiB), ("MiB", MiB)) if abs(n) >= u[1]), ("KiB", KiB))
    value = n / unit
    decimals = 0 if abs(value) >= 100 else (1 if abs(value) >= 10 else 2)
    return f"{value:,.{decimals}f} {name}"


def to_gib(n_bytes: int) -> float:
    return n_bytes / GiB


def to_gb(n_bytes: int) -> float:
    return n_bytes / GB


def ceil_div(a: int, b: int) -> int:
    """⌈a / b⌉ in exact integers (blocks, pages, padded widths)."""
    return -(-a // b)
