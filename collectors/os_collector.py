"""Host memory from /proc: meminfo, PSI, vmstat's oom_kill, and the top processes by resident memory.

Everything is read from an injectable proc root (tests point it at real files or at a copy). The system-wide
files (meminfo, pressure/memory, vmstat) are read every sample through kept-open fds with os.pread (a few
microseconds each, no open/close). The process list costs one /proc listing plus two small reads per pid
(stat for name and start time, statm for RSS: statm's resident count is summed exactly by the kernel, stat's
rss field is a per-CPU approximation on 6.x kernels), ~10 µs a pid, so it is rescanned at most every
`process_interval_s` (1 s): growth over a 30 s window needs no more, and between scans a sample reuses the
last list. The owner (a /proc/<pid> stat) is read only for the processes that are shown. smaps (USS/PSS,
~2.7 ms per process) is never read on the sampling path.

Processes that vanish between listing and reading, or deny access, are skipped and counted.

Where there is no procfs at `proc_root` (macOS, a container without /proc mounted) the same figures come
from psutil (`source="psutil"` on the snapshot): virtual_memory() total/available/cached/shared,
swap_memory(), and the process list with RSS. psutil cannot give PSI or vmstat's oom_kill: those are None.
"""

from __future__ import annotations

import os
import pwd
import time
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from collectors.errors import CollectorError
from collectors.snapshots import OSSnapshot, ProcessInfo
from planner.meminfo import parse_meminfo

_MEMINFO_KEYS = ("MemTotal", "MemAvailable", "Cached", "Shmem", "SwapTotal", "SwapFree")


# The kernel's own memory, as /proc/meminfo itemizes it (absent keys count 0, Slab must be there)
_KERNEL_KEYS = ("Slab", "KernelStack", "PageTables", "SecPageTables")


def meminfo_parts(info: dict[str, int]) -> dict[str, int | None]:
    """The OSSnapshot fields the pool's decomposition uses, from parsed /proc/meminfo (None: not in it)."""
    return {
        "mem_free": info.get("MemFree"),
        "buffers": info.get("Buffers"),
        "anon_pages": info.get("AnonPages"),
        "sreclaimable": info.get("SReclaimable"),
        "kernel": sum(info.get(k, 0) for k in _KERNEL_KEYS) if "Slab" in info else None,
    }


def parse_psi(text: str) -> tuple[float | None, float | None]:
    """/proc/pressure/memory -> (some avg10 %, full avg10 %)."""
    some = full = None
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        fields = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        try:
            value = float(fields["avg10"])
        except (KeyError, ValueError):
            continue
        if parts[0] == "some":
            some = value
        elif parts[0] == "full":
            full = value
    return some, full


def parse_vmstat_oom_kill(text: str) -> int | None:
    # a find, not a split of all ~180 lines: this runs every tick
    key = "oom_kill "
    if text.startswith(key):
        at = 0
    else:
        at = text.find("\n" + key)
        if at < 0:
            return None
        at += 1
    end = text.find("\n", at)
    parts = text[at : end if end >= 0 else len(text)].split()
    return int(parts[1]) if len(parts) == 2 else None


def parse_stat_start_ticks(stat_text: str) -> int:
    """Field 22 (starttime) of /proc/<pid>/stat; the comm field may contain spaces and parentheses."""
    after_comm = stat_text[stat_text.rindex(")") + 2 :]
    return int(after_comm.split()[19])  # fields 3.. start after the comm; starttime is field 22


def parse_free_h_line(text: str) -> dict[str, str]:
    """`free -h` output -> {"Mem.total": "119Gi", ...}: the human-readable cells, kept as text (they are
    rounded by free, so they are for cross-checks, not for arithmetic)."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = lines[0].split()
    out: dict[str, str] = {}
    for line in lines[1:]:
        label, _, rest = line.partition(":")
        for name, cell in zip(header, rest.split(), strict=False):
            out[f"{label.strip()}.{name}"] = cell
    return out


@dataclass(frozen=True, slots=True)
class _ProcRead:
    pid: int
    start_ticks: int
    name: str
    rss: int
    uid: int | None  # None: not read yet (/proc path: only the shown processes' owners are looked up)


_READ_CHUNK = 16384  # /proc/meminfo is ~1.5 KB, vmstat ~5 KB: one pread almost always gets all of it


class _KeptFile:
    """One small procfs file, opened once and re-read with os.pread at offset 0 (procfs regenerates it)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def read(self) -> str:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            data = os.pread(self._fd, _READ_CHUNK, 0)
            while len(data) % _READ_CHUNK == 0 and data:  # a longer file: read on from where we are
                more = os.pread(self._fd, _READ_CHUNK, len(data))
                if not more:
                    break
                data += more
        except OSError:
            self.close()  # reopen next time (a file replaced under a test's proc root)
            raise
        return data.decode("utf-8", "replace")

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            finally:
                self._fd = None


def _kept(before, now):
    """`before` when it equals `now`: the object the previous table holds, so equal values are held once."""
    return before if before == now else now


class RssHistory:
    """One process's RSS samples over the growth window, oldest first, as two arrays: 16 bytes a sample where
    a deque of (t, rss) tuples took about 100 (its blocks, tuples and ints), for every process on the
    machine at the monitor's rate (issue 20's resident memory)."""

    __slots__ = ("start_ticks", "times", "rss")

    def __init__(self, start_ticks: int) -> None:
        self.start_ticks = start_ticks
        self.times = array("d")
        self.rss = array("q")

    def add(self, t: float, rss: int, window_s: float) -> None:
        """Append a sample; keep the newest one at or before the window's start, drop the older ones."""
        self.times.append(t)
        self.rss.append(rss)
        start, drop = t - window_s, 0
        while len(self.times) - drop >= 2 and self.times[drop + 1] <= start:
            drop += 1
        if drop:
            del self.times[:drop], self.rss[:drop]


class OSCollector:
    """sample() -> OSSnapshot. Keeps a short per-pid RSS history to report growth over `growth_window_s`."""

    def __init__(
        self,
        proc_root: str | os.PathLike = "/proc",
        top_n: int = 15,
        growth_window_s: float = 30.0,
        clock=time.time,
        source: str = "auto",
        process_interval_s: float = 1.0,
    ) -> None:
        self.proc_root = os.fspath(proc_root)
        if source == "auto":
            # /proc first: cheap and injectable; psutil only where proc_root has no meminfo at all
            source = "proc" if os.path.isfile(os.path.join(self.proc_root, "meminfo")) else "psutil"
        if source not in ("proc", "psutil"):
            raise CollectorError(f"OS collector source must be 'auto', 'proc' or 'psutil', not {source!r}")
        self.source = source
        self.top_n = top_n
        self.growth_window_s = growth_window_s
        self._clock = clock
        self._page_size = os.sysconf("SC_PAGE_SIZE")
        # pid -> its RSS over the growth window; pruned to live pids every sample
        self._history: dict[int, RssHistory] = {}
        self._first_sample_done = False
        self._new_since: dict[int, bool] = {}  # pids seen appearing after the first sample, still "new"
        self._cmdline_cache: dict[tuple[int, int], str] = {}
        self._user_cache: dict[int, str] = {}
        self._psutil_cmdlines: dict[int, list[str]] = {}  # psutil path: this sample's argv by pid
        self.process_interval_s = process_interval_s
        self._kept: dict[str, _KeptFile] = {}
        self._absent: set[str] = set()  # optional files this kernel lacks (no PSI): not retried every tick
        # the last process scan: its time, the tracked reads and growth, how many it skipped
        self._scan_t: float | None = None
        self._scan_reads: list[_ProcRead] = []
        self._scan_growth: dict[int, tuple[int | None, float, bool]] = {}
        self._scan_skipped = 0
        self._chosen: tuple[frozenset[int], tuple[ProcessInfo, ...]] | None = None  # (include, processes)
        self._uid_cache: dict[tuple[int, int], int] = {}
        # the last table's processes by (pid, start_ticks): the next table shares their unchanged values
        self._last_chosen: dict[tuple[int, int], ProcessInfo] = {}
        self._root_fd: int | None = None

    def _read(self, relative: str) -> str:
        with open(os.path.join(self.proc_root, relative), encoding="utf-8", errors="replace") as f:
            return f.read()

    def _read_kept(self, relative: str) -> str:
        kept = self._kept.get(relative)
        if kept is None:
            kept = self._kept[relative] = _KeptFile(os.path.join(self.proc_root, relative))
        return kept.read()

    def _read_optional(self, relative: str) -> str | None:
        """A file some kernels lack (PSI needs 4.20 and CONFIG_PSI): None, never asked again, if absent."""
        if relative in self._absent:
            return None
        try:
            return self._read_kept(relative)
        except FileNotFoundError:
            self._absent.add(relative)
            return None
        except OSError:
            return None

    def close(self) -> None:
        """Close the kept-open files (a later sample() reopens them)."""
        for kept in self._kept.values():
            kept.close()
        self._kept.clear()
        if self._root_fd is not None:
            os.close(self._root_fd)
            self._root_fd = None

    def read_meminfo(self) -> dict[str, int]:
        try:
            info = parse_meminfo(self._read_kept("meminfo"))
        except OSError as exc:
            raise CollectorError(f"cannot read {self.proc_root}/meminfo: {exc}") from exc
        missing = [k for k in ("MemTotal", "MemAvailable") if k not in info]
        if missing:
            raise CollectorError(f"{self.proc_root}/meminfo has no {', '.join(missing)} (kernel < 3.14?)")
        return info

    def _read_small(self, relative: str) -> bytes:
        """One small procfs file with raw os.open/os.read, relative to a kept-open fd of proc_root: no
        TextIOWrapper, no path join (~3x cheaper than open().read() per file; the scan reads two a pid)."""
        if self._root_fd is None:
            self._root_fd = os.open(self.proc_root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        fd = os.open(relative, os.O_RDONLY, dir_fd=self._root_fd)
        try:
            return os.read(fd, 4096)  # stat is < 1 KiB even with a 64-byte comm; statm ~40 bytes
        finally:
            os.close(fd)

    def _read_process(self, pid: int) -> _ProcRead:
        stat = self._read_small(f"{pid}/stat").decode("utf-8", "replace")
        statm = self._read_small(f"{pid}/statm").split()
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        return _ProcRead(pid, parse_stat_start_ticks(stat), name, int(statm[1]) * self._page_size, None)

    def _uid(self, r: _ProcRead) -> int:
        if r.uid is not None:
            return r.uid
        key = (r.pid, r.start_ticks)
        uid = self._uid_cache.get(key)
        if uid is None:
            try:
                uid = os.stat(os.path.join(self.proc_root, str(r.pid))).st_uid
            except OSError:
                return -1  # gone since the scan: shown as "?" (not cached, the pid may come back)
            self._uid_cache[key] = uid
        return uid

    def _cmdline(self, pid: int, start_ticks: int) -> str:
        key = (pid, start_ticks)
        if key not in self._cmdline_cache:
            if self.source == "psutil":
                raw = "\x00".join(self._psutil_cmdlines.get(pid, ()))
            else:
                try:
                    raw = self._read(f"{pid}/cmdline")
                except OSError:
                    raw = ""
            self._cmdline_cache[key] = raw.replace("\x00", " ").strip()[:300]
        return self._cmdline_cache[key]

    def _user(self, uid: int) -> str:
        if uid < 0:
            return "?"  # psutil gave no owner
        if uid not in self._user_cache:
            try:
                self._user_cache[uid] = pwd.getpwuid(uid).pw_name
            except KeyError:
                self._user_cache[uid] = str(uid)
        return self._user_cache[uid]

    def _pids(self) -> Iterable[int]:
        try:
            names = os.listdir(self.proc_root)
        except OSError as exc:
            raise CollectorError(f"cannot list {self.proc_root}: {exc}") from exc
        return (int(n) for n in names if n.isdigit())

    def sample(self, include_pids: Iterable[int] = ()) -> OSSnapshot:
        """Read everything once. `include_pids` (e.g. pids NVML lists) are reported even outside the top."""
        if self.source == "psutil":
            return self._sample_psutil(include_pids)
        t = self._clock()
        info = self.read_meminfo()
        psi_text = self._read_optional("pressure/memory")
        psi_some, psi_full = parse_psi(psi_text) if psi_text is not None else (None, None)
        vmstat_text = self._read_optional("vmstat")
        oom_kill = parse_vmstat_oom_kill(vmstat_text) if vmstat_text is not None else None
        if self._scan_due(t):
            reads: list[_ProcRead] = []
            skipped = 0
            for pid in self._pids():
                try:
                    reads.append(self._read_process(pid))
                except (OSError, ValueError, IndexError):  # vanished, denied, a kernel thread's empty statm
                    skipped += 1
            self._scanned(t, reads, skipped)
        processes = self._processes(frozenset(include_pids))
        skipped = self._scan_skipped
        snapshot = OSSnapshot(
            t=t,
            mem_total=info["MemTotal"],
            mem_available=info["MemAvailable"],
            cached=info.get("Cached"),
            shmem=info.get("Shmem"),
            swap_total=info.get("SwapTotal", 0),
            swap_free=info.get("SwapFree", 0),
            psi_some_avg10=psi_some,
            psi_full_avg10=psi_full,
            oom_kill=oom_kill,
            processes=processes,
            skipped_processes=skipped,
            source="proc",
            **meminfo_parts(info),
        )
        return snapshot

    # ---- the process list: rescanned at most every process_interval_s, chosen again when include changes
    def _scan_due(self, t: float) -> bool:
        # a clock that went backwards (tests, a changed wall clock) rescans rather than waiting
        return self._scan_t is None or not 0 <= t - self._scan_t < self.process_interval_s

    def _scanned(self, t: float, reads: list[_ProcRead], skipped: int) -> None:
        self._scan_growth = self._track(t, reads)
        self._scan_t = t
        self._scan_reads = reads
        self._scan_skipped = skipped
        self._chosen = None
        self._first_sample_done = True

    def _processes(self, include: frozenset[int]) -> tuple[ProcessInfo, ...]:
        if self._chosen is None or self._chosen[0] != include:
            self._chosen = (include, self._choose(self._scan_reads, self._scan_growth, include))
        return self._chosen[1]

    # ---- psutil: where proc_root has no procfs
    def _sample_psutil(self, include_pids: Iterable[int]) -> OSSnapshot:
        import psutil  # noqa: PLC0415  (only on the fallback path)

        t = self._clock()
        try:
            vm = psutil.virtual_memory()
            swap = psutil.swap_memory()
        except (OSError, RuntimeError) as exc:
            raise CollectorError(f"no {self.proc_root}/meminfo and psutil failed too: {exc}") from exc
        boot = psutil.boot_time()
        ticks = os.sysconf("SC_CLK_TCK")
        if not self._scan_due(t):
            return self._psutil_snapshot(t, vm, swap, frozenset(include_pids))
        reads: list[_ProcRead] = []
        skipped = 0
        self._psutil_cmdlines = {}
        attrs = ["pid", "name", "memory_info", "create_time", "cmdline"]
        if hasattr(psutil.Process, "uids"):  # POSIX only
            attrs.append("uids")
        for proc in psutil.process_iter(attrs):
            info = proc.info
            mem, created = info.get("memory_info"), info.get("create_time")
            if mem is None or created is None:  # AccessDenied/ZombieProcess leave the attribute None
                skipped += 1
                continue
            uids = info.get("uids")
            reads.append(
                _ProcRead(
                    pid=info["pid"],
                    # the same unit as /proc/<pid>/stat's starttime (psutil derives create_time from it)
                    start_ticks=round((created - boot) * ticks),
                    name=info.get("name") or "?",
                    rss=mem.rss,
                    uid=uids.real if uids is not None else -1,
                )
            )
            self._psutil_cmdlines[info["pid"]] = info.get("cmdline") or []
        self._scanned(t, reads, skipped)
        return self._psutil_snapshot(t, vm, swap, frozenset(include_pids))

    def _psutil_snapshot(self, t: float, vm, swap, include: frozenset[int]) -> OSSnapshot:
        processes = self._processes(include)
        skipped = self._scan_skipped
        return OSSnapshot(
            t=t,
            mem_total=vm.total,
            mem_available=vm.available,
            cached=getattr(vm, "cached", None),  # Linux/BSD only
            shmem=getattr(vm, "shared", None),
            swap_total=swap.total,
            swap_free=swap.free,
            psi_some_avg10=None,  # psutil has no pressure stall information
            psi_full_avg10=None,
            oom_kill=None,  # nor the kernel's OOM kill counter
            processes=processes,
            skipped_processes=skipped,
            source="psutil",
            mem_free=getattr(vm, "free", None),
            buffers=getattr(vm, "buffers", None),  # Linux/BSD only
        )

    def _track(self, t: float, reads: list[_ProcRead]) -> dict[int, tuple[int | None, float, bool]]:
        """Fold one scan into the per-pid RSS history: pid -> (growth over the window or None, seconds the
        history covers, is_new)."""
        live: dict[int, RssHistory] = {}
        growth: dict[int, tuple[int | None, float, bool]] = {}
        for r in reads:
            hist = self._history.get(r.pid)
            if hist is None or hist.start_ticks != r.start_ticks:  # new, or a reused pid
                hist = RssHistory(r.start_ticks)
                is_new = self._first_sample_done
            else:
                is_new = False
                if t - hist.times[0] < self.growth_window_s and self._new_since.get(r.pid):
                    is_new = True  # stays "new" for one growth window
            hist.add(t, r.rss, self.growth_window_s)
            live[r.pid] = hist
            oldest_t, oldest_rss = hist.times[0], hist.rss[0]
            covered = t - oldest_t
            value = r.rss - oldest_rss if covered >= self.growth_window_s * 0.99 else None
            growth[r.pid] = (value, covered, is_new)
        self._new_since = {pid: True for pid, (_, _, new) in growth.items() if new}
        self._history = live
        self._cmdline_cache = {k: v for k, v in self._cmdline_cache.items() if k[0] in live}
        self._uid_cache = {k: v for k, v in self._uid_cache.items() if k[0] in live}
        return growth

    def _choose(
        self,
        reads: list[_ProcRead],
        growth: dict[int, tuple[int | None, float, bool]],
        include: frozenset[int],
    ) -> tuple[ProcessInfo, ...]:
        """The top_n by RSS, the top_n growers, and every pid in `include`, largest RSS first."""
        by_rss = sorted(reads, key=lambda r: r.rss, reverse=True)[: self.top_n]
        by_growth = sorted(
            (r for r in reads if growth[r.pid][0] is not None and growth[r.pid][0] > 0),
            key=lambda r: growth[r.pid][0],
            reverse=True,
        )[: self.top_n]
        wanted = [r for r in reads if r.pid in include]
        chosen = {r.pid: r for r in (*by_rss, *by_growth, *wanted)}
        out = []
        before, self._last_chosen = self._last_chosen, {}
        for r in sorted(chosen.values(), key=lambda r: r.rss, reverse=True):
            g, covered, new = growth[r.pid]
            key = (r.pid, r.start_ticks)
            name, start_ticks, rss = r.name, r.start_ticks, r.rss
            prev = before.get(key)
            if prev is not None:
                # the same process in the previous table: its unchanged values are shared with it, so that
                # the alert rules' minute of tables (one a second, collectors/state.py) holds them once, not
                # sixty times (issue 20: the Live screen's resident memory); the values are the same
                name, start_ticks = _kept(prev.name, name), prev.start_ticks
                rss, g = _kept(prev.rss, rss), _kept(prev.growth_bytes, g)
            info = ProcessInfo(
                pid=r.pid,
                name=name,
                cmdline=self._cmdline(r.pid, r.start_ticks),
                user=self._user(self._uid(r)),
                rss=rss,
                growth_bytes=g,
                is_new=new,
                gpu_bytes=None,
                start_ticks=start_ticks,
                growth_window_s=covered,
            )
            self._last_chosen[key] = info
            out.append(info)
        return tuple(out)

    def process_rss(self, pid: int) -> int | None:
        """One process's RSS now (bytes), None if it is gone or hidden."""
        if self.source == "psutil":
            import psutil  # noqa: PLC0415

            try:
                return psutil.Process(pid).memory_info().rss
            except (psutil.Error, OSError):
                return None
        try:
            return self._read_process(pid).rss
        except (OSError, ValueError, IndexError):
            return None


def grown_most(snapshot: OSSnapshot, n: int = 5) -> list[ProcessInfo]:
    """ "Who took the memory": processes sorted by growth over the window, largest first."""
    grew = [p for p in snapshot.processes if p.growth_bytes is not None and p.growth_bytes > 0]
    return sorted(grew, key=lambda p: p.growth_bytes or 0, reverse=True)[:n]


def with_gpu_bytes(
    processes: tuple[ProcessInfo, ...], gpu_by_pid: Mapping[int, int]
) -> tuple[ProcessInfo, ...]:
    """Fill ProcessInfo.gpu_bytes from a pid -> bytes map (sum of per-process NVML usage). A process whose
    figure is already that one is kept as it is, not copied: the states the alert rules keep (a minute of
    them, in the monitor and in each replay checkpoint) then share their unchanged processes."""
    from dataclasses import replace

    out = []
    for p in processes:
        held = gpu_by_pid.get(p.pid)
        same = p.gpu_bytes == held and type(p.gpu_bytes) is type(held)
        out.append(p if same else replace(p, gpu_bytes=held))
    return tuple(out)
