"""Textual widgets: each renders the plain values it is given (tui/widgets/data.py) and nothing else."""
