"""Where a study's cases run, in one vocabulary from the options to the rows' `worker`:
`in-process` (this process), `isolated` (a fresh process per case, so a crash is a row) or
`ray` (a Ray cluster's workers, each length's backends on one worker)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from attnbench.api.parse import check_threads, positive
from attnbench.errors import UsageError
from attnbench.run.procedure import Where

# the names of `run.executors.EXECUTORS`, known here before torch loads with that module
EXECUTORS = ("in-process", "isolated", "ray")


def check_executor(executor: str, ray_address: str | None, cpus_per_worker: int | None) -> str:
    """The executor's name and options, checked without starting anything."""
    if executor not in EXECUTORS:
        raise UsageError(
            f"--executor: unknown executor {executor!r}; valid: {', '.join(EXECUTORS)}"
        )
    if executor != "ray":
        for given, name in ((ray_address, "--ray-address"), (cpus_per_worker, "--cpus-per-worker")):
            if given is not None:
                raise UsageError(f"{name} is an option of --executor ray")
    elif cpus_per_worker is not None:
        positive(cpus_per_worker, "--cpus-per-worker")
    return executor


@contextmanager
def where(
    executor: str = "in-process",
    ray_address: str | None = None,
    cpus_per_worker: int | None = None,
    threads: int | None = None,
) -> Iterator[Where]:
    """Where the run goes, checked; with ray, the cluster is reached now (one UsageError if
    Ray is missing or the address does not answer) and left when the block ends, however it
    ends."""
    check_executor(executor, ray_address, cpus_per_worker)
    threads = check_threads(threads, executor == "ray")
    if executor != "ray":
        yield Where(executor, None, threads)
        return
    from attnbench.run.executors import executor_for
    from attnbench.run.ray_cluster import connect

    cluster = connect(ray_address)
    try:
        pool = executor_for("ray", cluster=cluster, cpus_per_worker=cpus_per_worker)
        yield Where(pool, cluster, threads)
    finally:
        cluster.close()


def cluster_gpus(at: Where) -> bool | None:
    """Whether the cluster has GPUs, which decides what --device auto means there; None:
    the run is here, where torch tells."""
    return None if at.cluster is None else at.cluster.has_gpus
