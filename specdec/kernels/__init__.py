"""How weights are stored and multiplied: draft variants, target kernels, the keyed store."""
