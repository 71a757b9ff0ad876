"""The four measured buckets, per (agent process, device), from the agent's records and NVML.

* weights      = bytes of the tracked model's parameters and buffers on that device (agent.track_model);
* KV           = bytes of the tracked cache's tensors on that device (agent.track_kv);
* activations  = peak allocated during the step − the step's steady level (its lowest allocated sample).
                 The peak is torch's own peak counter when it moved during the step (exact, and exact per
                 step when the user marks steps with reset_peak=True); otherwise the highest sampled
                 allocated, which a short spike between samples can escape (noted in `notes`). Off CUDA (no
                 allocator counters) the largest phase peak the agent measured around a forward call: the
                 RSS high-water mark above the call's entry level (collectors/autotrack.py);
* overhead     = allocator gap (reserved − allocated, PyTorch's cache) + non-PyTorch memory
                 (the driver's per-process usage − reserved: CUDA context, cuBLAS workspace, NCCL, graphs).
                 Non-PyTorch is None wherever the driver gives no per-process number (NVML absent, the
                 pid not listed — e.g. another PID namespace — or the value truncated/unavailable).
Nothing is estimated to fill a gap: an unknown stays None with the reason in `notes`.
"""

from __future__ import annotations

from collectors.snapshots import AgentRecord, AgentView, MeasuredBuckets, NVMLSnapshot


def driver_used_by_pid_device(nvml: NVMLSnapshot) -> dict[tuple[int, int], int | None]:
    """(pid, device index) -> per-process NVML usage (compute + graphics), None when NVML gave no value."""
    out: dict[tuple[int, int], int | None] = {}
    for device in nvml.devices:
        for p in device.processes:
            key = (p.pid, device.index)
            if p.used_bytes is None:
                out.setdefault(key, None)
            else:
                out[key] = (out.get(key) or 0) + p.used_bytes
    return out


def step_records(history: tuple[AgentRecord, ...], device: int) -> tuple[AgentRecord, ...]:
    """This device's records in the latest step that has at least two samples (or all, with no marks)."""
    mine = [r for r in history if r.device == device]
    if not mine:
        return ()
    steps: dict[int, list[AgentRecord]] = {}
    for r in mine:
        steps.setdefault(r.step_index, []).append(r)
    for index in sorted(steps, reverse=True):
        if len(steps[index]) >= 2:
            return tuple(steps[index])
    return tuple(steps[max(steps)])


def activations(records: tuple[AgentRecord, ...]) -> tuple[int | None, int | None, str]:
    """(activation bytes, peak used, how) over one step's records."""
    allocated = [r.allocated for r in records if r.allocated is not None]
    if len(allocated) < 2:
        return None, None, "activations unknown: fewer than two allocator samples in the step"
    steady = min(allocated)
    sampled_peak = max(allocated)
    peaks = [r.peak_allocated for r in records if r.peak_allocated is not None]
    if peaks and peaks[-1] > peaks[0]:
        peak, how = max(peaks[-1], sampled_peak), "peak from torch's peak counter (moved during the step)"
    else:
        peak, how = sampled_peak, "peak from sampled allocated (a spike between samples may be missed)"
    return peak - steady, peak, how


def phase_peak(view: AgentView) -> int | None:
    """The largest prefill/decode peak the agent measured (None: no call set one it could measure)."""
    peaks = [p.peak_bytes for p in view.info.phases if p.peak_bytes] if view.info is not None else []
    return max(peaks) if peaks else None


def measure(view: AgentView, nvml: NVMLSnapshot) -> tuple[MeasuredBuckets, ...]:
    driver = driver_used_by_pid_device(nvml)
    return tuple([_measure_device(view, latest, nvml, driver) for latest in view.latest])


def _measure_device(
    view: AgentView, latest: AgentRecord, nvml: NVMLSnapshot, driver: dict[tuple[int, int], int | None]
) -> MeasuredBuckets:
    """The buckets of the device of `latest` (the process's latest record there), a note for each unknown."""
    notes: list[str] = []
    device = latest.device
    gap = None
    if latest.reserved is not None and latest.allocated is not None:
        gap = latest.reserved - latest.allocated
    elif device >= 0:
        notes.append("allocator gap unknown: reserved/allocated not reported")
    if device < 0:
        notes.append(f"no CUDA device: {latest.cuda_state}")
        driver_used = non_torch = None
    else:
        driver_used = driver.get((view.pid, device))
        non_torch = _non_torch(view.pid, device, latest.reserved, driver_used, nvml, driver, notes)
    step = step_records(view.history, device)
    act, peak = _step_activations(view, device, step, notes)
    other = _other_allocated(step, latest)
    if latest.weights_bytes is None:
        notes.append("weights unknown: no model tracked (agent.track_model)")
    if latest.kv_bytes is None:
        notes.append("KV unknown: no cache tracked (agent.track_kv)")
    return MeasuredBuckets(
        pid=view.pid,
        device=device,
        weights_bytes=latest.weights_bytes,
        kv_bytes=latest.kv_bytes,
        activations_bytes=act,
        allocator_gap_bytes=gap,
        non_torch_bytes=non_torch,
        other_allocated_bytes=other,
        allocated=latest.allocated,
        reserved=latest.reserved,
        peak_allocated=peak,
        driver_used_bytes=driver_used,
        step_label=latest.step_label,
        notes=tuple(notes),
    )


def _non_torch(
    pid: int,
    device: int,
    reserved: int | None,
    driver_used: int | None,
    nvml: NVMLSnapshot,
    driver: dict[tuple[int, int], int | None],
    notes: list[str],
) -> int | None:
    """Non-PyTorch memory on a CUDA device (the driver's usage − reserved), or None with the reason noted."""
    if not nvml.available:
        notes.append(f"non-PyTorch memory unknown: {nvml.status}")
    elif (pid, device) not in driver:
        notes.append(f"non-PyTorch memory unknown: NVML does not list pid {pid} on GPU {device}")
    elif driver_used is None:
        notes.append("non-PyTorch memory unknown: NVML gave no per-process value")
    elif reserved is not None:
        return driver_used - reserved
    return None


def _step_activations(
    view: AgentView, device: int, step: tuple[AgentRecord, ...], notes: list[str]
) -> tuple[int | None, int | None]:
    """(activation bytes, peak allocated) of the step, with how they were found noted; off CUDA the
    activations are the largest phase peak."""
    act, peak, how = activations(step)
    if device >= 0:
        notes.append(how if act is not None else "activations unknown: fewer than two allocator samples")
    else:
        act = phase_peak(view)
        if act is not None:
            notes.append("activations: the largest phase peak (RSS high-water mark above a call's entry)")
    return act, peak


def _other_allocated(step: tuple[AgentRecord, ...], latest: AgentRecord) -> int | None:
    """The step's steady allocated level (its lowest sample) less the tracked weights and KV."""
    allocs = [r.allocated for r in step if r.allocated is not None]
    if not allocs:
        return None
    return min(allocs) - (latest.weights_bytes or 0) - (latest.kv_bytes or 0)
