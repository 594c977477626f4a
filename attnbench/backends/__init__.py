"""Attention backends. The registry and the built-in backends (torch with them) load on the
first use of a name below, so `attnbench.backends.names` imports alone, without torch."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnbench.backends.registry import (
        Backend,
        Param,
        backend_classes,
        get_backend,
        parse_backends,
        register,
    )

__all__ = ["Backend", "Param", "backend_classes", "get_backend", "parse_backends", "register"]


def __getattr__(name: str):
    if name in __all__:
        from attnbench.backends import registry

        registry.load_builtins()
        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
