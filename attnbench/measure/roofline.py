"""Where a timed piece of work sits under the machine's roofline.

A stage doing `flops` over `bytes` at arithmetic intensity I = flops / bytes can reach at
most min(P, I x B): P its compute peak, B the bandwidth of the memory level its working set
fits in. Whichever term is smaller is the bound that applies, and the achieved rate over it
is the share of the machine's own limit reached. Work with no flops (a gather, a copy) is
bound by bandwidth alone.

P is the measured GEMM peak of the dtype for flops that can fuse into multiply-adds (a
matrix product's, counted two per multiply-add), and the measured rate of SIMD adds for
the rest (`other_flops`: butterflies, sums, compares, one per operation), which have no
multiply to pair with and so can never reach a peak that counts each FMA twice: P is the
rate at which the stage's mix would run with each kind at its own ceiling. The bound is
named "compute" when the fusable flops take most of that time, "adds" otherwise.

A whole call of several stages, each under its own bound, is measured against the time its
stages would take if each ran at its bound (`call_throughput`).

A share above 100 % is no result but a sign that one of the model's inputs is wrong, so the
row says so (`over_bound`) with the likely causes: ceilings measured on a busy host (they
read low), a working set that fits a faster level than the one judged (the levels' reach is
measured, but a stage's reuse is not), or a cost model that counts more work than the
kernel does.
"""

from __future__ import annotations

from attnbench.measure.ceilings import Ceilings


def throughput(
    ms: float,
    flops: float,
    nbytes: float,
    working_set: float,
    dense_flops: float | None,
    ceilings: Ceilings | None,
    dtype: str,
    other_flops: float = 0.0,
) -> dict:
    """The row fields of work done in `ms` milliseconds: achieved GFLOP/s by the
    algorithmic (`flops`, of which `other_flops` cannot fuse into FMAs) and dense-equivalent
    counts, GB/s, FLOP/byte, the bound and the % of it reached (the last two only with
    `ceilings`). Missing counts give None."""
    if not ms or ms <= 0 or ms != ms:
        return {}
    seconds = ms / 1e3
    fields: dict = {
        "gflops_alg": flops / seconds / 1e9 if flops else None,
        "gflops_dense": dense_flops / seconds / 1e9 if dense_flops else None,
        "gbs_alg": nbytes / seconds / 1e9 if nbytes else None,
        "intensity_alg": flops / nbytes if flops and nbytes else None,
    }
    if ceilings is None or not (flops or nbytes):
        return fields
    bound, attainable = bound_of(flops, nbytes, working_set, ceilings, dtype, other_flops)
    if flops:
        achieved = fields["gflops_alg"]
    else:  # pure data movement: bandwidth is the only ceiling
        achieved = fields["gbs_alg"]
    fields["bound"] = bound
    fields["bound_pct"] = 100.0 * achieved / attainable if attainable else None
    fields["over_bound"] = over_bound(fields["bound_pct"], bound, ceilings)
    return fields


def bound_of(
    flops: float,
    nbytes: float,
    working_set: float,
    ceilings: Ceilings,
    dtype: str,
    other_flops: float = 0.0,
) -> tuple[str, float]:
    """("compute" or "adds", peak GFLOP/s) or (level name, attainable rate) for this work:
    GFLOP/s when it has flops, else GB/s. The level is the one `working_set` bytes fit in."""
    level = ceilings.level_for(working_set or nbytes)
    if not flops:
        return level.name, level.gbs
    name, peak = compute_peak(flops, other_flops, ceilings, dtype)
    if not nbytes:
        return name, peak
    memory_roof = flops / nbytes * level.gbs
    if peak <= memory_roof:
        return name, peak
    return level.name, memory_roof


def compute_peak(
    flops: float, other_flops: float, ceilings: Ceilings, dtype: str
) -> tuple[str, float]:
    """(name, GFLOP/s) of the fastest `flops` can go when the `other_flops` among them run
    at the add peak and the rest at the GEMM peak (module docstring). Without a measured
    add peak every flop is set against the GEMM peak."""
    peak = ceilings.peak(dtype) or float("inf")
    adds = ceilings.add_peak(dtype)
    other = min(max(other_flops, 0.0), flops)
    if not other or not adds:
        return "compute", peak
    fused_s, other_s = (flops - other) / peak, other / adds
    return ("adds" if other_s > fused_s else "compute"), flops / (fused_s + other_s)


def call_throughput(
    ms: float,
    stages: list[tuple[float, float, float, float]],
    dense_flops: float | None,
    ceilings: Ceilings | None,
    dtype: str,
) -> dict:
    """The row fields of a whole call of `stages` (flops, bytes, working set, flops that
    cannot fuse into FMAs, each) taking `ms`: rates of the summed counts, and as `bound_pct`
    the time the stages would take each at its own bound over `ms`; `bound` names the bound
    of the stage that dominates that time. Summed bytes would put a call whose stages run in
    cache under DRAM's roof."""
    flops = sum(stage[0] for stage in stages)
    nbytes = sum(stage[1] for stage in stages)
    fields = throughput(ms, flops, nbytes, nbytes, dense_flops, None, dtype)
    if ceilings is None or not fields or not (flops or nbytes):
        return fields
    least_ms: dict[str, float] = {}
    for f, b, working_set, other in stages:
        if not (f or b):
            continue
        bound, rate = bound_of(f, b, working_set, ceilings, dtype, other)
        if not rate > 0 or rate == float("inf"):
            continue  # no ceiling to set it against
        work = f if f else b  # flops at GFLOP/s, or bytes at GB/s
        least_ms[bound] = least_ms.get(bound, 0.0) + work / rate / 1e6
    if not least_ms:
        return fields
    fields["bound"] = max(least_ms, key=least_ms.get)
    fields["bound_pct"] = 100.0 * sum(least_ms.values()) / ms
    fields["over_bound"] = over_bound(fields["bound_pct"], fields["bound"], ceilings)
    return fields


def over_bound(pct: float | None, bound: str, ceilings: Ceilings) -> str:
    """ "" when `pct` of `bound` is at most 100; else the likely causes, most likely first
    (module docstring)."""
    if pct is None or pct <= 100.0:
        return ""
    causes = []
    if ceilings.provisional:
        causes.append("ceilings measured under load (provisional)")
    names = [level.name for level in ceilings.levels]
    if bound in names[1:]:
        faster = names[names.index(bound) - 1]
        causes.append(f"working set fits a faster level than {bound} ({faster})")
    causes.append("cost model overcounts the work")
    return f"{pct:.0f}% of {bound}: " + "; or ".join(causes)
