"""The planner's one exception type."""


class PlannerError(ValueError):
    """Input the planner cannot use: the message names the field, file or value and what to do about it."""
