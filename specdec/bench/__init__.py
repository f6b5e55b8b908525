"""The benchmark: its modes, the runs, the report."""
