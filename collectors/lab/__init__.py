"""`memsight lab` workloads: the experiment side of the lab (run as child processes of `memsight lab`).

These modules import torch and transformers, lazily, inside functions: they run only in the experiment process
(`python -m collectors.lab.worker`), never in the monitor. tui/cmd_lab.py predicts, starts them with the agent
injected, records, and compares.
"""
