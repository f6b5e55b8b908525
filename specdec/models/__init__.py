"""Model pairs and what they run on: presets, dtypes, loading, the prompt template, the embedded offline bundle, tiny-random; the machine's facts."""
