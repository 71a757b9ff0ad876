"""vLLM's own memory numbers, read from its log as it streams (the `memsight run` child's log file).

VLLMLogFollower reads only the bytes appended since the previous poll (the engines' file follower,
collectors.engine_log_follow.LogFollower: at most max_read_bytes per poll; the rest is read on the next polls,
nothing is skipped, so no vLLM line is lost) and feeds the text to planner.engines.vllm.log.LogReader.
log_buckets() turns what was read into the vLLM process's buckets, each one "from vLLM's log": weights, KV
pool, activation peak and overhead (non-torch + CUDA graphs).
Never raises on file trouble: a missing file reads as nothing yet, a read error is kept in `error`.
"""

from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass

from collectors.engine_log_follow import MAX_READ_BYTES, LogFollower
from planner.engines.vllm.log import LogReader, VLLMLog


class VLLMLogFollower:
    """vLLM's reader behind the engines' file follower (collectors.engine_log_follow.LogFollower)."""

    def __init__(self, path: str | os.PathLike, max_read_bytes: int = MAX_READ_BYTES) -> None:
        self._file = LogFollower(path, max_read_bytes)
        self._reader = LogReader()
        self._result: VLLMLog | None = None

    @property
    def path(self) -> pathlib.Path:
        return self._file.path

    @property
    def error(self) -> str:
        return self._file.error

    def poll(self) -> VLLMLog:
        """What the log says so far (the same object as last time when nothing new arrived)."""
        text, restarted = self._file.read_new()
        if restarted:  # truncated or replaced: start over
            self._reader, self._result = LogReader(), None
        if text:
            self._reader.feed_text(text)
            self._result = None
        if self._result is None:
            self._result = self._reader.result()
        return self._result


@dataclass(frozen=True, slots=True)
class LogBuckets:
    """The vLLM process's memory as its log states it (bytes; None where the log has not said yet), for the
    rank whose KV pool is the smallest (the one every rank then uses)."""

    weights: int | None
    kv_pool: int | None
    activation: int | None
    overhead: int | None  # non-torch + CUDA graphs (the estimate, or the captured size when logged)
    stage: str
    version: str | None
    model: str | None
    ranks: int  # how many ranks logged a pool (TP/PP workers); the figures are one rank's
    # TP/PP: the figures above are one rank's (`rank`, its worker prefix; "" for an unprefixed line) of a job
    # of `world` ranks (tensor x pipeline parallel from the log's arguments, else the ranks its lines name)
    tp: int = 0  # tensor_parallel_size as the log gives it; 0: the log does not say
    pp: int = 0
    world: int = 1
    rank: str = ""
    job_total: int | None = None  # every rank's four buckets summed, when each of the ranks logged all four
    job_missing: str = ""  # why job_total is None for a job of several ranks ("Worker_TP1 logged no KV pool")

    @property
    def total(self) -> int | None:
        parts = (self.weights, self.kv_pool, self.activation, self.overhead)
        return None if any(p is None for p in parts) else sum(parts)  # type: ignore[arg-type]

    @property
    def accounted(self) -> int | None:
        """What vLLM accounts for in the whole job (the process tree NVML sums): its one rank's total, or
        every rank's when the job has several (None where a rank did not log all four buckets)."""
        return self.total if self.world <= 1 else self.job_total


BUCKET_FIGURES = {"weights": "weights", "kv_pool": "KV pool", "activation": "activation peak"}


def log_buckets(log: VLLMLog) -> LogBuckets:
    pool = log.smallest("kv_pool")
    rank = pool.rank if pool is not None else None
    figures = _RankFigures(log, rank)
    ranks = len({f.rank for f in log.figures.get("kv_pool", ())})
    names = (*BUCKET_FIGURES, "non_torch", "cudagraph_actual", "cudagraph_estimate")
    seen = sorted({f.rank for n in names for f in log.figures.get(n, ())})
    tp = _count(log.setting("tensor_parallel_size"))
    pp = _count(log.setting("pipeline_parallel_size"))
    world = max(max(tp, 1) * max(pp, 1), len(seen), ranks, 1)
    job_total, job_missing = _job_total(figures, seen, world) if world > 1 else (None, "")
    return LogBuckets(
        weights=figures.size_of("weights", rank),
        kv_pool=None if pool is None else max(0, pool.bytes),
        activation=figures.size_of("activation", rank),
        overhead=figures.overhead(rank),
        stage=log.stage,
        version=log.version,
        model=log.model,
        ranks=ranks,
        tp=tp,
        pp=pp,
        world=world,
        rank=rank if rank is not None else (seen[0] if seen else ""),
        job_total=job_total,
        job_missing=job_missing,
    )


class _RankFigures:
    """A log's figures by rank. `rank` is the smallest KV pool's (None: no pool logged); a figure asked of it
    that it did not log is the first one logged by any rank."""

    __slots__ = ("log", "rank")

    def __init__(self, log: VLLMLog, rank: str | None) -> None:
        self.log = log
        self.rank = rank

    def pick(self, name: str, at: str | None):
        found = self.log.figures.get(name, ())
        for fig in found:
            if at is None or fig.rank == at:
                return fig
        return found[0] if found and at is self.rank else None

    def size_of(self, name: str, at: str | None) -> int | None:
        fig = self.pick(name, at)
        return None if fig is None else max(0, fig.bytes)

    def overhead(self, at: str | None) -> int | None:
        """Non-torch + CUDA graphs (the captured size when logged, else the estimate)."""
        non_torch = self.size_of("non_torch", at)
        graphs = self.size_of("cudagraph_actual", at)
        if graphs is None:
            graphs = self.size_of("cudagraph_estimate", at)
        return None if non_torch is None and graphs is None else (non_torch or 0) + (graphs or 0)


def _job_total(figures: _RankFigures, seen: list[str], world: int) -> tuple[int | None, str]:
    """(every rank's four buckets summed, "") for a job of `world` ranks, or (None, what is missing)."""
    missing = []
    totals = []
    for at in seen:
        parts = {n: figures.size_of(n, at) for n in BUCKET_FIGURES} | {"overhead": figures.overhead(at)}
        gaps = [BUCKET_FIGURES.get(n, "non-torch/graphs") for n, v in parts.items() if v is None]
        if gaps:
            missing.append(f"{at or 'the unprefixed lines'} logged no {', '.join(gaps)}")
        else:
            totals.append(sum(parts.values()))  # type: ignore[arg-type]
    if len(seen) < world:
        missing.append(f"{world - len(seen)} of {world} ranks logged no buckets")
    if missing:
        return None, "; ".join(missing)
    return sum(totals), ""


def _count(text: str | None) -> int:
    """A parallel size from the log's arguments (0 when absent or unreadable)."""
    try:
        return max(1, int(float(text))) if text is not None else 0
    except ValueError:
        return 0
