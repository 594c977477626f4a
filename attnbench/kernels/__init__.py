"""numba kernels, one folder per algorithm; `target` picks where they run."""
