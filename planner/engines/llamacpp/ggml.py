"""The shapes, strides and views of ggml's tensors and ops, without data: enough of ggml to build llama.cpp's
compute graph as llama.cpp builds it and let ggml-alloc's rules (galloc.py) place it.

Each op mirrors its constructor in ggml/src/ggml.c of ggml-org/llama.cpp@0c1e57098 (the llama.cpp that
llama-cpp-python 0.3.36 vendors): the result's type and ne, whether it is a new tensor (ggml_new_tensor,
contiguous strides), a copy of its first source's shape (ggml_dup_tensor) or a view (view_src set:
ggml_view_*, reshape, permute, transpose, and set_rows / cpy, whose result views their destination). The
graph is built as ggml_build_forward_expand does it (ggml.c ggml_visit_parents_graph: sources left to right,
post-order; a tensor with op NONE is a leaf, every other one a node).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from planner.formats import GGML_BY_NAME

# tensor flags (ggml.h GGML_TENSOR_FLAG_*)
INPUT, OUTPUT = "input", "output"


def type_size(ggml_type: str) -> tuple[int, int]:
    """(elements per block, bytes per block) of a ggml type."""
    return GGML_BY_NAME[ggml_type.upper()]


def row_size(ggml_type: str, n: int) -> int:
    block, size = type_size(ggml_type)
    return n // block * size


@dataclass(eq=False)
class Tensor:
    name: str
    type: str
    ne: tuple[int, int, int, int]
    nb: tuple[int, int, int, int]
    op: str = "NONE"
    src: tuple[Tensor | None, ...] = ()
    view_src: Tensor | None = None
    external: bool = False  # in a buffer of its own (a weight, the KV cache): ggml-alloc does not place it
    flags: set[str] = field(default_factory=set)
    layer: int = -1  # the model layer whose graph made it (-1: input or output part), for device placement
    size: int | None = None  # a weight's bytes in its quantized type (its shape here is the f32 one)

    @property
    def nbytes(self) -> int:
        """ggml_nbytes."""
        if self.size is not None:
            return self.size
        if any(n <= 0 for n in self.ne):
            return 0
        block, size = type_size(self.type)
        if block == 1:
            total = size
            for n, b in zip(self.ne, self.nb, strict=True):
                total += (n - 1) * b
            return total
        total = self.ne[0] * self.nb[0] // block
        for n, b in zip(self.ne[1:], self.nb[1:], strict=True):
            total += (n - 1) * b
        return total

    @property
    def is_view(self) -> bool:
        return self.view_src is not None

    @property
    def is_contiguous(self) -> bool:
        return self.nb == _strides(self.type, self.ne)

    def same_layout(self, other: Tensor) -> bool:
        """ggml_are_same_layout: type, shape and strides."""
        return self.type == other.type and self.ne == other.ne and self.nb == other.nb


def _strides(ggml_type: str, ne: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    block, size = type_size(ggml_type)
    nb0 = size
    nb1 = nb0 * (ne[0] // block)
    nb2 = nb1 * ne[1]
    nb3 = nb2 * ne[2]
    return (nb0, nb1, nb2, nb3)


def _ne(*dims: int) -> tuple[int, int, int, int]:
    padded = (*dims, 1, 1, 1, 1)[:4]
    return (padded[0], padded[1], padded[2], padded[3])


class Context:
    """A ggml context: makes tensors, and the graph ggml_build_forward_expand makes of them."""

    def __init__(self, weight_bytes: Callable[[str, int, int], int] | None = None) -> None:
        self.nodes: list[Tensor] = []
        self.leafs: list[Tensor] = []
        self._visited: set[int] = set()
        self.layer = -1  # the layer the next tensors belong to (llama.cpp's il)
        self.weight_bytes = weight_bytes  # (name, layer, values) -> bytes of a weight in its file type

    # tensors --------------------------------------------------------------------------------------------
    def new(self, name: str, ggml_type: str, *dims: int, op: str = "NONE", src: tuple = ()) -> Tensor:
        ne = _ne(*dims)
        return Tensor(name, ggml_type, ne, _strides(ggml_type, ne), op, src, layer=self.layer)

    def external(self, name: str, ggml_type: str, *dims: int) -> Tensor:
        """A tensor with its own buffer (a weight, a KV cache layer)."""
        t = self.new(name, ggml_type, *dims)
        t.external = True
        return t

    def weight(self, name: str, *dims: int) -> Tensor:
        """A weight: its own buffer, its bytes those of its type in the file (f32 where not known); whatever
        its type, the results of the ops on it are f32."""
        t = self.external(name, "f32", *dims)
        if self.weight_bytes is not None:
            values = 1
            for d in dims:
                values *= d
            t.size = self.weight_bytes(name, self.layer, values)
        return t

    def input(self, name: str, ggml_type: str, *dims: int) -> Tensor:
        t = self.new(name, ggml_type, *dims)
        t.flags.add(INPUT)
        return t

    def _dup(self, name: str, a: Tensor, op: str, src: tuple) -> Tensor:
        return self.new(name, a.type, *a.ne, op=op, src=src)

    def view(
        self, a: Tensor, ne: tuple[int, ...], nb: tuple[int, ...], op: str = "VIEW", name: str = ""
    ) -> Tensor:
        ne4 = _ne(*ne)
        nb4 = list(_strides(a.type, ne4))
        for i in range(1, 4):  # ggml_view_Nd: the strides given, each further one the previous x its ne
            nb4[i] = nb[i - 1] if i - 1 < len(nb) else nb4[i - 1] * ne4[i - 1]
        base = a.view_src or a
        return Tensor(
            name or f"{a.name} (view)",
            a.type,
            ne4,
            (nb4[0], nb4[1], nb4[2], nb4[3]),
            op,
            (a,),
            base,
            layer=self.layer,
        )

    def reshape(self, a: Tensor, *dims: int) -> Tensor:
        ne = _ne(*dims)
        base = a.view_src or a
        return Tensor(
            f"{a.name} (reshaped)", a.type, ne, _strides(a.type, ne), "RESHAPE", (a,), base, layer=self.layer
        )

    def permute(self, a: Tensor, *axes: int) -> Tensor:
        ne, nb = [0] * 4, [0] * 4
        for i, ax in enumerate(axes):
            ne[ax], nb[ax] = a.ne[i], a.nb[i]
        base = a.view_src or a
        return Tensor(
            f"{a.name} (permuted)",
            a.type,
            (ne[0], ne[1], ne[2], ne[3]),
            (nb[0], nb[1], nb[2], nb[3]),
            "PERMUTE",
            (a,),
            base,
            layer=self.layer,
        )

    def transpose(self, a: Tensor) -> Tensor:
        return self.permute(a, 1, 0, 2, 3)

    # ops -------------------------------------------------------------------------------------------------
    def get_rows(self, a: Tensor, rows: Tensor, name: str = "") -> Tensor:
        out_type = "f32" if a.type.lower() != "i32" else "i32"
        return self.new(
            name or "get_rows",
            out_type,
            a.ne[0],
            rows.ne[0],
            rows.ne[1],
            rows.ne[2],
            op="GET_ROWS",
            src=(a, rows),
        )

    def mul_mat(self, a: Tensor, b: Tensor, name: str) -> Tensor:
        return self.new(name, "f32", a.ne[1], b.ne[1], b.ne[2], b.ne[3], op="MUL_MAT", src=(a, b))

    def unary(self, op: str, a: Tensor, name: str, *others: Tensor) -> Tensor:
        """An op whose result has its first source's shape (ggml_dup_tensor): norms, mul, add, rope, scale,
        soft_max, activations."""
        return self._dup(name, a, op, (a, *others))

    def cont(self, a: Tensor, *dims: int, name: str = "") -> Tensor:
        return self.new(name or f"{a.name} (cont)", a.type, *(dims or a.ne), op="CONT", src=(a,))

    def cast(self, a: Tensor, ggml_type: str, name: str) -> Tensor:
        """ggml_cast: a CPY into a new tensor of another type."""
        return self.new(name, ggml_type, *a.ne, op="CPY", src=(a,))

    def glu(self, a: Tensor, b: Tensor, name: str) -> Tensor:
        return self.new(name, a.type, *a.ne, op="GLU", src=(a, b))

    def concat(self, a: Tensor, b: Tensor, dim: int, name: str) -> Tensor:
        ne = list(a.ne)
        ne[dim] += b.ne[dim]
        return self.new(name, a.type, *ne, op="CONCAT", src=(a, b))

    def flash_attn_ext(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, name: str) -> Tensor:
        return self.new(
            name, "f32", v.ne[0], q.ne[2], q.ne[1], q.ne[3], op="FLASH_ATTN_EXT", src=(q, k, v, mask)
        )

    def set_rows(self, dst: Tensor, values: Tensor, idxs: Tensor) -> Tensor:
        """ggml_set_rows: writes rows into dst; the result is a view of dst."""
        base = dst.view_src or dst
        return Tensor(
            f"{dst.name} (view)",
            dst.type,
            dst.ne,
            dst.nb,
            "SET_ROWS",
            (values, idxs, dst),
            base,
            layer=self.layer,
        )

    def cpy(self, a: Tensor, dst: Tensor) -> Tensor:
        """ggml_cpy: the result is a view of dst."""
        base = dst.view_src or dst
        return Tensor(f"{dst.name} (copy)", dst.type, dst.ne, dst.nb, "CPY", (a, dst), base, layer=self.layer)

    # the graph -------------------------------------------------------------------------------------------
    def expand(self, t: Tensor) -> None:
        """ggml_build_forward_expand: add t and what it depends on, sources first, each tensor once."""
        stack: list[tuple[Tensor, int]] = [(t, 0)]
        while stack:
            node, i = stack.pop()
            if i == 0:
                if id(node) in self._visited:
                    continue
                self._visited.add(id(node))
            if i < len(node.src):
                stack.append((node, i + 1))
                s = node.src[i]
                if s is not None and id(s) not in self._visited:
                    stack.append((s, 0))
                continue
            (self.leafs if node.op == "NONE" else self.nodes).append(node)
