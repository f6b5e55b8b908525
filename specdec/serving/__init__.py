"""One process serving many visitors: the pair store, the GPU budget, the torch thread."""
