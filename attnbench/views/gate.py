"""The regression gate of `compare --fail-above`: pass, fail, or inconclusive.

A gate that passes a case it could not judge lets a regression through unseen: on a loaded
host every case is flagged unstable, so a gate that skipped those passed everything. Every
case of A is therefore judged or named with the cause it could not be: flagged unstable by
its run, no interval (fewer than two samples), crashed, oom, error or skipped on a side,
missing from B, or a status no attnbench writes. Any such case makes the outcome
inconclusive unless the user allows it (`--allow-unjudged`). A case flagged unstable whose
whole interval lies beyond the threshold is slower however noisy it was, so it fails. A case
only in B has no reference and is named as new, not judged; one skipped on both sides is a
case neither run supports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from attnbench.results.schema import STATUSES
from attnbench.views.compare import Comparison, Missing

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
EXIT_CODES = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}  # 2 is a user error, as in every command
UNSTABLE, NO_INTERVAL, MISSING, UNKNOWN = (
    "flagged unstable",
    "no interval",
    "missing in B",
    "unknown status",
)


@dataclass
class Gate:
    """The gate's verdict on a comparison: the failed changes, and the cases not judged by
    cause (a cause's cases in the order of the comparison)."""

    threshold: float
    failed: list = field(default_factory=list)  # Change
    unjudged: dict[str, list[dict]] = field(default_factory=dict)  # cause -> case keys
    new: list[dict] = field(default_factory=list)  # case keys only in B
    allow_unjudged: bool = False

    @property
    def outcome(self) -> str:
        if self.failed:
            return FAIL
        if self.unjudged and not self.allow_unjudged:
            return INCONCLUSIVE
        return PASS

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]

    def count_unjudged(self) -> int:
        return sum(len(keys) for keys in self.unjudged.values())


def judge(comparison: Comparison, threshold: float, allow_unjudged: bool = False) -> Gate:
    """Judge every case of the comparison against `threshold` (0.05 = 5 %)."""
    gate = Gate(threshold, allow_unjudged=allow_unjudged)
    for change in comparison.changes:
        if change.fails(threshold):
            gate.failed.append(change)
        elif change.unstable:
            gate.unjudged.setdefault(UNSTABLE, []).append(change.key)
        elif change.low is None:
            gate.unjudged.setdefault(NO_INTERVAL, []).append(change.key)
    for missing in comparison.missing:
        cause = _cause(missing)
        if cause == "new":
            gate.new.append(missing.key)
        elif cause:
            gate.unjudged.setdefault(cause, []).append(missing.key)
    return gate


def _cause(missing: Missing) -> str:
    """Why a case present in a file was not compared: "" when there is nothing to judge
    (skipped on both sides), "new" when only B has it, else the cause named to the user."""
    statuses = {s for s in (missing.a_status, missing.b_status) if s}
    if statuses - set(STATUSES):
        return UNKNOWN
    if not missing.a_status:
        return "new"
    if not missing.b_status:
        return MISSING
    if statuses == {"skipped"}:
        return ""
    bad = sorted(statuses - {"ok"})
    return " or ".join(bad)
