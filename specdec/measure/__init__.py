"""What is read off runs and passes: metrics, pass costs, the cost table, comparisons, sweeps."""
