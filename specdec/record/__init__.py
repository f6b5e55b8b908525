"""A run kept as a file, and replayed on its own clock."""
