"""The screens (Live, Plan, Roofline lab, Processes, help) and the MonitorState/Plan -> widget glue."""
