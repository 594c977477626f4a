"""attnbench: benchmark and profile attention mechanisms.

>>> import attnbench
>>> out = attnbench.get_backend("yoso-32")(q, k, v)   # q, k, v: [batch, heads, n, d]
"""

from attnbench.backends import Backend, get_backend, register

__all__ = ["Backend", "get_backend", "register"]
