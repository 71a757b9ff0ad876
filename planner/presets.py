"""The machine presets `--machine` offers, as plain data: names and figures, nothing else.

planner/machines.py makes a `Machine` of each; this module is apart so that `memsight plan --help` can list
the names without importing dataclasses (with inspect: a third of the help's CPU, issue 20). Standard
library only; nothing of memsight but units.

Capacities are in bytes. Presets use the size the vendor sells in binary units where the part is built that
way (H100 80 GiB, RTX 4090 24 GiB, DGX Spark 128 GiB of LPDDR5x); the H200 is sold as "141 GB", which is
neither 141e9 nor 141 GiB of usable memory, so we use what nvidia-smi reports for it (143,771 MiB = 140.4
GiB, recorded on a real 8x H200 box in
../shared/fixtures/nvidia-smi_h200-x8_vllm_truncated-13042_570.158.01.txt) and say so.

Bandwidths are decimal GB/s (vendor figures); a figure we have no source for stays None rather than a guess.
"""

from __future__ import annotations

from planner.units import GiB, MiB

# name -> the Machine fields after its name (planner/machines.py says what each one means)
PRESETS: dict[str, dict[str, object]] = {
    "spark": dict(
        label="DGX Spark (GB10): 128 GiB unified LPDDR5x, 10 GiB assumed for the OS and other processes",
        capacity_bytes=128 * GiB,
        unified=True,
        os_reserve_bytes=10 * GiB,
        bandwidth_gbs=273.0,
        peak_tflops_bf16=None,
        device_name="NVIDIA GB10",
        cuda_capability=(12, 1),
    ),
    "h100": dict(
        label="H100 80 GB (80 GiB HBM3)",
        capacity_bytes=80 * GiB,
        unified=False,
        os_reserve_bytes=0,
        bandwidth_gbs=3350.0,
        peak_tflops_bf16=989.0,
        device_name="NVIDIA H100 80GB HBM3",
        cuda_capability=(9, 0),
    ),
    "h200": dict(
        label='H200 "141 GB": 143,771 MiB = 140.4 GiB as nvidia-smi reports it (used here)',
        capacity_bytes=143_771 * MiB,
        unified=False,
        os_reserve_bytes=0,
        bandwidth_gbs=4800.0,
        peak_tflops_bf16=989.0,
        device_name="NVIDIA H200",
        cuda_capability=(9, 0),
    ),
    "rtx4090": dict(
        label="RTX 4090 (24 GiB GDDR6X)",
        capacity_bytes=24 * GiB,
        unified=False,
        os_reserve_bytes=0,
        bandwidth_gbs=1008.0,
        peak_tflops_bf16=None,
        device_name="NVIDIA GeForce RTX 4090",
        cuda_capability=(8, 9),
    ),
}

THIS_MACHINE = "this"
CUSTOM_MACHINE = (
    "custom"  # a bare capacity (--capacity-gib): a discrete device, nothing reserved unless asked
)


def machine_names() -> list[str]:
    return [*PRESETS, THIS_MACHINE, CUSTOM_MACHINE]
