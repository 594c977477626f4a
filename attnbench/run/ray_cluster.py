"""The Ray cluster a sweep runs on: reached (or started) once per command, asked what it
holds, planned into workers, and left as it was found.

Ray is imported here only when `--executor ray` is used, so attnbench runs without it. An
address that does not answer is a user error before any work: Ray itself would retry for
minutes.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from attnbench.errors import UsageError
from attnbench.measure import is_cuda

INSTALL = "pip install 'attnbench[ray]'"
PROBE_S = 5.0  # how long the head may take to accept a connection
PORTS = {"": 6379, "ray": 10001}  # the head's default port: the GCS, or Ray Client's


def import_ray():
    """The `ray` module, or one error line saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UsageError(f"--executor ray: Ray is not installed ({INSTALL})") from None
    return ray


@dataclass(frozen=True)
class WorkerPlan:
    """One worker: on `node_id` (host `node`), holding `cpus` CPUs and `gpus` whole GPUs
    (0 or 1: a share of a GPU would time several workers on one device), with `threads`
    CPU threads pinned for torch, OpenMP and numba."""

    node_id: str
    node: str
    cpus: int
    gpus: int
    threads: int


class Cluster:
    """A connection to a Ray cluster; `close()` disconnects, and stops the cluster if this
    run started it. Ray already initialised in this process is used as it is."""

    def __init__(self, ray, address: str | None, started: bool):
        self.ray, self.address, self.started = ray, address, started

    @property
    def has_gpus(self) -> bool:
        return any(_count(node, "GPU") for node in self.nodes())

    def nodes(self) -> list[dict]:
        return [node for node in self.ray.nodes() if node.get("Alive")]

    def plan(
        self, device: str, cpus_per_worker: int | None, threads: int | None
    ) -> list[WorkerPlan]:
        return plan_workers(self.nodes(), device, cpus_per_worker, threads)

    def close(self) -> None:
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()


def connect(address: str | None) -> Cluster:
    """The cluster at `address` (default: $RAY_ADDRESS, else a local one started for this
    run), or one error line if Ray is missing or the address does not answer."""
    ray = import_ray()
    if ray.is_initialized():
        return Cluster(ray, None, started=False)
    address = address or os.environ.get("RAY_ADDRESS") or None
    local = address in (None, "local")
    if not local and address != "auto":
        _probe(address)
    # the run's own output only: Ray's log lines and the workers' output stay in Ray's logs
    quiet = dict(logging_level=logging.ERROR, log_to_driver=False)
    try:
        if local:
            ray.init(address=address, include_dashboard=False, **quiet)
        else:
            ray.init(address=address, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        what = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        where = "a local Ray cluster" if local else f"the Ray cluster at {address}"
        raise UsageError(f"--ray-address: cannot reach {where} ({what})") from None
    return Cluster(ray, address, started=True)


def _probe(address: str) -> None:
    """UsageError unless the head at `address` (host:port or ray://host:port) accepts a
    connection within PROBE_S seconds."""
    parts = urlsplit(address if "://" in address else f"//{address}")
    try:
        host, port = parts.hostname, parts.port or PORTS.get(parts.scheme, PORTS[""])
    except ValueError:
        host = None
    if not host:
        raise UsageError(f"--ray-address: {address!r} is not host:port or ray://host:port")
    try:
        socket.create_connection((host, port), timeout=PROBE_S).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise UsageError(
            f"--ray-address: no Ray cluster answers at {host}:{port} ({why})"
        ) from None


def plan_workers(
    nodes: list[dict], device: str, cpus_per_worker: int | None, threads: int | None
) -> list[WorkerPlan]:
    """The workers the live `nodes` (Ray's node records) hold, nodes taking turns so that a
    short sweep spreads over machines: for a GPU, one per whole GPU, each with
    `cpus_per_worker` CPUs (default: its share of the node's); on the CPU, one per node with
    every CPU, or one per `cpus_per_worker` of them. Threads: `threads`, else the CPUs held.
    UsageError when no worker fits, or when `threads` exceeds a worker's CPUs."""
    per_node = []
    for node in nodes:
        cpus, gpus = _count(node, "CPU"), _count(node, "GPU")
        if is_cuda(device):
            block = cpus_per_worker if cpus_per_worker is not None else cpus // max(gpus, 1)
            count = gpus if block == 0 else min(gpus, cpus // block)
        else:
            block = cpus_per_worker or cpus
            count = cpus // block if block else 0
        held = max(block, 1)
        if threads is not None and threads > held and count:
            raise UsageError(
                f"--threads: {threads} is more than the {held} CPU(s) a Ray worker holds "
                "(--cpus-per-worker)"
            )
        plan = WorkerPlan(
            node["NodeID"], node.get("NodeManagerHostname", ""), block,
            1 if is_cuda(device) else 0, threads or held,
        )  # fmt: skip
        per_node.append([plan] * count)
    plans = [plan for turn in _take_turns(per_node) for plan in turn]
    if not plans:
        need = "a whole GPU" if is_cuda(device) else f"{cpus_per_worker or 1} CPU(s)"
        raise UsageError(f"--executor ray: no node of the Ray cluster has {need} for a worker")
    return plans


def _take_turns(lists: list[list]) -> list[list]:
    """The first of each list, then the second of each, ..."""
    longest = max(map(len, lists), default=0)
    return [[items[i] for items in lists if i < len(items)] for i in range(longest)]


def _count(node: dict, resource: str) -> int:
    """Whole units of `resource` on a node: a fractional GPU is no GPU for timing."""
    return int(node.get("Resources", {}).get(resource, 0))
