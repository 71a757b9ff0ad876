"""ggml-alloc's graph allocator, replayed: where each tensor of a compute graph is placed, and so how large
each backend's compute buffer must be (the figure llama.cpp logs as "<device> compute buffer size").

A port of ggml/src/ggml-alloc.c in ggml-org/llama.cpp@0c1e57098 (the rules have been stable since the
allocator was rewritten as ggml_gallocr in 2024):
- ggml_dyn_tallocr_alloc (lines 202-310): best fit among the free blocks before the last; else the last block,
  which grows the buffer; sizes padded to the buffer type's alignment;
- ggml_dyn_tallocr_free_bytes (312-350): a freed range merges with the free block before or after it;
- ggml_gallocr_allocate_node (623-689): a view is never placed; an op that can work in place
  (ggml_op_can_inplace, 22-50) takes over its parent's memory when the parent is placed by the allocator, is
  not a graph output, has the same layout and this node is its only remaining user;
- ggml_gallocr_alloc_graph_impl (718-823): leafs first (the graph's inputs), then every input a node reads,
  then the nodes in order, each parent freed when its last child has run (a view's memory when its source's
  last view and child have run). Graph outputs are never freed.
The buffer's size is the allocator's high-water mark (ggml_dyn_tallocr_max_size; one chunk, as on the CPU,
CUDA and Metal, whose buffers have no maximum size that a compute graph reaches).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.engines.llamacpp.ggml import INPUT, OUTPUT, Tensor

INPLACE_OPS = frozenset(
    {
        "FILL",
        "SCALE",
        "DIAG_MASK_ZERO",
        "DIAG_MASK_INF",
        "ADD",
        "ADD_ID",
        "ADD1",
        "SUB",
        "MUL",
        "DIV",
        "SQR",
        "SQRT",
        "LOG",
        "UNARY",
        "ROPE",
        "ROPE_BACK",
        "SILU_BACK",
        "RMS_NORM",
        "RMS_NORM_BACK",
        "CLAMP",
        "SOFT_MAX",
        "SOFT_MAX_BACK",
    }
)
_UNBOUNDED = 2**62


def _pad(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


class DynAllocator:
    """ggml_dyn_tallocr with one chunk: free blocks sorted by offset, the last one unbounded."""

    def __init__(self, alignment: int) -> None:
        self.alignment = alignment
        self.blocks: list[list[int]] = [[0, _UNBOUNDED]]  # [offset, size]
        self.max_size = 0

    def alloc(self, size: int) -> int:
        size = _pad(size, self.alignment)
        best, best_size = -1, _UNBOUNDED + 1
        for i, (_, block_size) in enumerate(self.blocks[:-1]):
            if size <= block_size <= best_size:
                best, best_size = i, block_size
        if best == -1:
            best = len(self.blocks) - 1
        block = self.blocks[best]
        offset = block[0]
        block[0] += size
        block[1] -= size
        if block[1] == 0:
            del self.blocks[best]
        self.max_size = max(self.max_size, offset + size)
        return offset

    def free(self, offset: int, size: int) -> None:
        size = _pad(size, self.alignment)
        blocks = self.blocks
        for i, block in enumerate(blocks):
            if block[0] + block[1] == offset:  # the freed range follows this block
                block[1] += size
                if i + 1 < len(blocks) and block[0] + block[1] == blocks[i + 1][0]:
                    block[1] += blocks[i + 1][1]
                    del blocks[i + 1]
                return
            if offset + size == block[0]:  # the freed range precedes this block
                block[0] = offset
                block[1] += size
                if i > 0 and blocks[i - 1][0] + blocks[i - 1][1] == block[0]:
                    blocks[i - 1][1] += block[1]
                    del blocks[i]
                return
        at = next((i for i, b in enumerate(blocks) if b[0] >= offset), len(blocks))
        blocks.insert(at, [offset, size])


@dataclass
class _Slot:
    """ggml-alloc's hash_node: what the allocator knows of one tensor."""

    n_children: int = 0
    n_views: int = 0
    allocated: bool = False
    buffer: int = -1
    offset: int = 0


class GraphAllocator:
    """ggml_gallocr: one dynamic allocator per backend buffer."""

    def __init__(self, alignments: Sequence[int]) -> None:
        self.allocs = [DynAllocator(a) for a in alignments]
        self.slots: dict[int, _Slot] = {}
        self._live: list[dict[int, tuple[str, int]]] = [{} for _ in alignments]  # per buffer: id -> (name, B)
        self._peaks: list[tuple[tuple[str, int], ...]] = [() for _ in alignments]

    def peaks(self) -> tuple[tuple[tuple[str, int], ...], ...]:
        """Per buffer, the tensors that were placed when it reached its size, largest first."""
        return tuple(self._peaks)

    def _slot(self, t: Tensor) -> _Slot:
        slot = self.slots.get(id(t))
        if slot is None:
            slot = self.slots[id(t)] = _Slot()
        return slot

    def _is_allocated(self, t: Tensor) -> bool:
        return t.external or (t.view_src is not None and t.view_src.external) or self._slot(t).allocated

    def _allocate(self, t: Tensor, buffer: int) -> None:
        if self._is_allocated(t) or t.is_view:
            return
        slot = self._slot(t)
        slot.allocated = True
        if t.op in INPLACE_OPS and self._reuse_parent(t, slot):
            return
        slot.buffer = buffer
        before = self.allocs[buffer].max_size
        slot.offset = self.allocs[buffer].alloc(t.nbytes)
        self._live[buffer][id(t)] = (t.name, t.nbytes)
        if self.allocs[buffer].max_size > before:
            live = sorted(self._live[buffer].values(), key=lambda item: -item[1])
            self._peaks[buffer] = tuple(live)

    def _reuse_parent(self, t: Tensor, slot: _Slot) -> bool:
        for parent in t.src:
            if parent is None or parent.is_view or not self._slot(parent).allocated:
                continue  # a view's memory is its source's: never taken over (ggml_gallocr_is_own)
            if OUTPUT in parent.flags or not t.same_layout(parent):
                continue
            p = self._slot(parent)
            if p.n_children == 1 and p.n_views == 0:
                slot.buffer, slot.offset = p.buffer, p.offset
                p.allocated = False  # the child owns the memory now
                live = self._live[p.buffer]
                live.pop(id(parent), None)
                live[id(t)] = (t.name, t.nbytes)
                return True
        return False

    def _free(self, t: Tensor) -> None:
        if OUTPUT in t.flags:
            return
        slot = self._slot(t)
        self.allocs[slot.buffer].free(slot.offset, t.nbytes)
        self._live[slot.buffer].pop(id(t), None)
        slot.allocated = False

    def reserve(
        self, nodes: Sequence[Tensor], leafs: Sequence[Tensor], node_buffers: Sequence[int],
        leaf_buffers: Sequence[int],
    ) -> list[int]:  # fmt: skip
        """Place the graph; the size each buffer must have (bytes)."""
        for leaf, buffer in zip(leafs, leaf_buffers, strict=True):
            self._allocate(leaf, buffer)
        for node, buffer in zip(nodes, node_buffers, strict=True):
            if node.view_src is not None and node.op != "NONE":
                self._slot(node.view_src).n_views += 1
            if INPUT in node.flags:
                self._allocate(node, buffer)
            for src in node.src:
                if src is None:
                    continue
                self._slot(src).n_children += 1
                if INPUT in src.flags:
                    self._allocate(src, buffer)
        for node, buffer in zip(nodes, node_buffers, strict=True):
            for parent in node.src:
                if parent is not None:
                    self._allocate(parent, buffer)
            self._allocate(node, buffer)
            for parent in node.src:
                if parent is not None:
                    self._release(parent)
        return [a.max_size for a in self.allocs]

    def _release(self, parent: Tensor) -> None:
        p = self._slot(parent)
        p.n_children -= 1
        if p.n_children or p.n_views:
            return
        if parent.view_src is not None:
            source = self._slot(parent.view_src)
            source.n_views -= 1
            if source.n_views == 0 and source.n_children == 0 and source.allocated:
                self._free(parent.view_src)
        elif p.allocated:
            self._free(parent)
