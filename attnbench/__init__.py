"""attnbench: benchmark and profile attention mechanisms.

>>> import attnbench
>>> out = attnbench.get_backend("yoso-32")(q, k, v)   # q, k, v: [batch, heads, n, d]
"""

__all__ = ["Backend", "get_backend", "register"]


def __getattr__(name: str):
    """The backends (and torch with them) load on first use, so the command line starts fast."""
    if name in __all__:
        from attnbench import backends

        return getattr(backends, name)
    raise AttributeError(f"module 'attnbench' has no attribute {name!r}")
