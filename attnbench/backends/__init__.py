"""Attention backends. Importing this package registers the built-in ones."""

from attnbench.backends import scram, sdpa, softmax, sparse, yoso, yoso_e  # noqa: F401
from attnbench.backends.registry import (
    Backend,
    Param,
    backend_classes,
    get_backend,
    parse_backends,
    register,
)

__all__ = ["Backend", "Param", "backend_classes", "get_backend", "parse_backends", "register"]
