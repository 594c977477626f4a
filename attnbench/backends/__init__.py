"""Attention backends. Importing this package registers the built-in ones."""

from attnbench.backends import sdpa, softmax, yoso, yoso_e  # noqa: F401  (registration)
from attnbench.backends.registry import (
    Backend,
    Param,
    backend_classes,
    get_backend,
    parse_backends,
    register,
)

__all__ = ["Backend", "Param", "backend_classes", "get_backend", "parse_backends", "register"]
