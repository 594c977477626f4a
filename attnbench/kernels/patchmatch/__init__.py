"""SCRAM's PatchMatch (top-kappa max / mode matches) and window softmax as numba kernels.

`reference` is the brute-force torch oracle, `core` the scalar math both targets share,
`cpu` / `cuda` the kernels, `dispatch` the torch entry points.
"""
