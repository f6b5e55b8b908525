"""Model pairs: presets, loading, the embedded offline bundle, tiny-random."""
