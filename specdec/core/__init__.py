"""The algorithm: events, settings, the decoding loop, acceptance, drafters, K policy, the cached model."""
