"""`memsight lab`'s experiments, one module each: edge, logits, eager, fragment, two.

Each defines predict_X (the planner's prediction, printed with its arithmetic), run_X (the workload in child
processes, measured through tui/cmd_lab.py's Lab) and compare_X (measured against predicted, the difference
and its likely cause). tui/cmd_lab.py is the command: its arguments, main, Lab and the helpers these share;
it imports a module here only when its experiment runs. Nothing here imports torch or the collectors'
samplers: the children (collectors/lab/worker.py) run the workloads.
"""
