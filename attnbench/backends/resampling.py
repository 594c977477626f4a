"""Random draws that are new on every forward call, yet reproducible: `resample=call|fixed`.

The paper draws new hash functions on every pass, so a stochastic backend's draws follow its
forward calls: call c draws from `call_seed(seed, c)`, and the same seed with the same
sequence of calls gives the same outputs. A map asked for after a forward uses that
forward's draws, so it explains the output it sits beside.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import numpy as np

from attnbench.backends.registry import Param, choice_param

RESAMPLE = ("call", "fixed")


def resample_param(what: str) -> Param:
    help = f"call: new {what} every call (from seed), fixed: one draw"
    return choice_param("call", RESAMPLE, help)


def call_seed(seed: int, call: int) -> int:
    """The seed of the draws of call `call`: the seed itself for call 0 (so `fixed` and the
    first call of `call` agree), else a hash of (seed, call) that keeps calls independent."""
    if call == 0:
        return seed
    state = np.random.SeedSequence([seed, call]).generate_state(2, np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


class Resampling:
    """Backend mixin: counts forward calls and keeps the latest call's draws per shape.

    Needs `seed` and `resample` among the backend's values."""

    def __init__(self, **values):
        super().__init__(**values)
        self._draws: dict[tuple, object] = {}
        self._calls = 0  # forward calls made; with resample=call, call c draws from seed c

    def _call(self, advance: bool) -> int:
        """The draw index of a forward (advance: the next one, counted) or of a map or codes
        (the last forward's draws, which they explain; call 0's before any forward)."""
        if self.values["resample"] == "fixed":
            return 0
        if advance:
            self._calls += 1
            return self._calls - 1
        return max(0, self._calls - 1)

    def _drawn(self, shape: tuple[Hashable, ...], call: int, draw: Callable[[int], object]):
        """`draw(seed of call)` for this shape, drawn once; other calls' draws are dropped."""
        key = (*shape, call)
        if key not in self._draws:
            self._draws = {k: x for k, x in self._draws.items() if k[-1] == call}
            self._draws[key] = draw(call_seed(self.values["seed"], call))
        return self._draws[key]
