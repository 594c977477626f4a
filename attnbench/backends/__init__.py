"""Attention backends. Importing this package registers the built-in ones."""

from attnbench.backends import (  # noqa: F401  (registration)
    linformer,
    longformer,
    nystromformer,
    performer,
    reformer,
    scram,
    scram_mc,
    sdpa,
    softmax,
    sparse,
    yoso,
    yoso_c,
    yoso_e,
)
from attnbench.backends.registry import (
    Backend,
    Param,
    backend_classes,
    get_backend,
    parse_backends,
    register,
)

__all__ = ["Backend", "Param", "backend_classes", "get_backend", "parse_backends", "register"]
