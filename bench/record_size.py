"""How fast a recording grows: `memsight run --headless --record` at 2 Hz around a workload with one agent (a
torch model on the CPU, tracked, stepping ten times a second, its memory moving), for --seconds, on this
machine as it is (its processes come and go: each new one is declared once). Beside it, in the same run, the
size format 1 (every line in full, the agent at its own 10 Hz) gives the same samples: the recorded events
written back as format 1 lines, and the agent's records at 10 Hz. Run by hand, not a test:

    .venv/bin/python bench/record_size.py --seconds 120

Reports bytes per second of recording in all and by kind, and how many processes the machine started.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

WORKLOAD = textwrap.dedent("""
    import sys, time
    import torch
    from collectors import agent
    model = torch.nn.Linear(2048, 4096)  # 32 MiB of weights, tracked
    agent.track_model(model)
    blocks, end = [], time.time() + float(sys.argv[1])
    step = 0
    while time.time() < end:
        agent.mark_step("decode")
        blocks.append(torch.ones(2**18))  # 1 MiB more each step, freed every 100 steps
        if len(blocks) == 100:
            blocks.clear()
        step += 1
        time.sleep(0.1)
""")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    args = parser.parse_args()
    from collectors.recording import RecordingReader  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as folder:
        out = pathlib.Path(folder, "run.jsonl")
        agents = pathlib.Path(folder, "agents")
        child = pathlib.Path(folder, "workload.py")
        child.write_text(WORKLOAD)
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        started = time.time()
        subprocess.run(
            [sys.executable, "-m", "tui.cli", "run", "--headless", "--record", str(out), "--hz", "2",
             "--agent-dir", str(agents), "--", sys.executable, str(child), str(args.seconds)],
            cwd=REPO, check=True, capture_output=True, env=dict(os.environ, OMP_NUM_THREADS="1"),
        )  # fmt: skip
        size = out.stat().st_size
        kinds: dict[str, int] = {}
        for line in out.read_bytes().splitlines(keepends=True):
            kind = json.loads(line)["k"]
            kinds[kind] = kinds.get(kind, 0) + len(line)
        with RecordingReader(out) as reader:
            events = list(reader.events)
            header = reader.header
        times = [e["t"] for e in events if e["k"] == "os"]
        seconds = times[-1] - times[0]
        agent_lines = [e for e in events if e["k"] == "agent"]
        format1 = len(json.dumps(header, separators=(",", ":"))) + 1
        for e in events:  # format 1: every line in full (the process table at every OS tick); no "w", "sr"
            drop = {"agent": ("t", "sr"), "os": ("w",)}.get(e["k"], ())
            line = {k: v for k, v in e.items() if k not in drop}
            format1 += len(json.dumps(line, separators=(",", ":"))) + 1
        written = [len(json.dumps(e, separators=(",", ":"))) + 1 for e in agent_lines]
        mean_agent = sum(written) / len(written)
        # the agent wrote ten records a second; format 1 recorded all of them
        format1 += round(mean_agent * (10 * seconds - len(agent_lines)))
    procs = sum(1 for e in events if e["k"] == "proc")
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(started))
    print(f"`memsight run --headless --record --hz 2`, one agent at 10 Hz, {seconds:.0f} s of recording, "
          f"made at {when}, load average {load}")  # fmt: skip
    print(f"  format 2 (this memsight): {size:,} bytes = {size / seconds:,.0f} B/s")
    for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"    {kind:<11} {n / seconds:8,.0f} B/s")
    rate1 = format1 / seconds
    print(f"  the same samples in format 1, agent at its 10 Hz: {format1:,} bytes = {rate1:,.0f} B/s "
          f"({format1 / size:.1f}x)")  # fmt: skip
    print(f"  processes started on the machine meanwhile: {procs} ({60 * procs / seconds:.0f} a minute)")
    return 0


if __name__ == "__main__":
    from taken import finish  # bench/taken.py: the date and machine, for the README

    sys.exit(finish(main()))
