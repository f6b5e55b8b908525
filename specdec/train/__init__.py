"""Training a draft head on the target's own features (`python -m specdec head train`): data, loss, loop, figures."""
