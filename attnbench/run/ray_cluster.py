"""The Ray cluster a sweep runs on: reached (or started) once per command, asked what it
holds, planned into workers, and left as it was found.

Ray is imported here only when `--executor ray` is used, so attnbench runs without it. An
address that does not answer is a user error before any work: Ray itself would retry for
minutes.

A local cluster started for the run ends with it, however the run ends: every process Ray
starts carries a mark in its environment, and a watchdog started before Ray kills every
marked process once the run has closed the cluster or died (even by SIGKILL, which Ray's
own agents outlive by a minute). While Ray starts the cluster its SIGTERM handler (stop the
cluster, exit 1) stands in for the run's; that exit becomes the run's interrupt, and the
run's handlers are back once Ray is up.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

from attnbench.errors import UsageError
from attnbench.measure import is_cuda
from attnbench.results.interrupts import Terminated

INSTALL = "pip install 'attnbench[ray]'"
PROBE_S = 5.0  # how long the head may take to accept a connection
PORTS = {"": 6379, "ray": 10001}  # the head's default port: the GCS, or Ray Client's
MARK = "ATTNBENCH_RAY_RUN"  # the environment variable marking the processes of a run's cluster
WATCHDOG_S = 30.0  # the longest the watchdog goes on killing marked processes

# The watchdog: stdlib only, its own session (a Ctrl-C at the terminal is not for it). Its
# stdin is a pipe from the run: end of file means the run closed the cluster or died. Until
# then it notes the run's descendants each second; after, it kills them and every marked
# process, until three scans in a row find none (a process's environment can read empty).
WATCHDOG = """
import os, select, signal, sys, time
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)
mark, run, limit = sys.argv[1].encode(), int(sys.argv[2]), float(sys.argv[3])

def table():
    procs = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            if fields[0] != b"Z":
                procs[int(name)] = (int(fields[1]), fields[19])
        except (OSError, IndexError, ValueError):
            pass
    return procs

def below(roots, procs):
    found, todo = set(), list(roots)
    while todo:
        parent = todo.pop()
        for pid, (ppid, _) in procs.items():
            if ppid == parent and pid not in found:
                found.add(pid)
                todo.append(pid)
    return found

def marked(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as env:
            return mark in env.read().split(b"\\0")
    except OSError:
        return False

seen = {}
while True:
    procs = table()
    seen.update({pid: procs[pid][1] for pid in below([run], procs)})
    if select.select([0], [], [], 1.0)[0] and not os.read(0, 4096):
        break
deadline, quiet = time.monotonic() + limit, 0
while quiet < 3 and time.monotonic() < deadline:
    procs = table()
    ours = {p for p, (_, start) in procs.items() if seen.get(p) == start or marked(p)}
    ours = (ours | below(ours, procs)) - {os.getpid(), run}
    for pid in ours:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    quiet = 0 if ours else quiet + 1
    time.sleep(0.2)
"""


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

    def __init__(
        self, ray, address: str | None, started: bool, watchdog: subprocess.Popen | None = None
    ):
        self.ray, self.address, self.started = ray, address, started
        self.watchdog = watchdog

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
        try:
            if self.started and self.ray.is_initialized():
                self.ray.shutdown()
        finally:
            _release(self.watchdog)


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
    watchdog = _watchdog() if local and sys.platform.startswith("linux") else None
    handlers = _handlers()
    try:
        if local:
            ray.init(address=address, include_dashboard=False, **quiet)
        else:
            ray.init(address=address, **quiet)
    except SystemExit:  # Ray's SIGTERM handler, while it started the cluster, then stopped it
        _release(watchdog)
        raise Terminated from None
    except (ConnectionError, RuntimeError, ValueError) as exc:
        _release(watchdog)
        what = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        where = "a local Ray cluster" if local else f"the Ray cluster at {address}"
        raise UsageError(f"--ray-address: cannot reach {where} ({what})") from None
    except BaseException:
        _release(watchdog)
        raise
    finally:
        os.environ.pop(MARK, None)
        _restore(handlers)
    return Cluster(ray, address, started=True, watchdog=watchdog)


def _watchdog() -> subprocess.Popen:
    """Start the watchdog and mark this process's environment, which every process Ray
    starts from now on inherits, with this run's token."""
    token = f"{os.getpid()}-{secrets.token_hex(8)}"
    watchdog = subprocess.Popen(
        [sys.executable, "-c", WATCHDOG, f"{MARK}={token}", str(os.getpid()), str(WATCHDOG_S)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    os.environ[MARK] = token
    return watchdog


def _release(watchdog: subprocess.Popen | None) -> None:
    """Let the watchdog kill what is left of the cluster, and wait until it has."""
    if watchdog is None or watchdog.stdin.closed:
        return
    watchdog.stdin.close()
    try:
        watchdog.wait(WATCHDOG_S + 5)
    except subprocess.TimeoutExpired:
        watchdog.kill()


def _handlers() -> dict | None:
    """This process's SIGINT and SIGTERM handlers (None outside the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}


def _restore(handlers: dict | None) -> None:
    for sig, handler in (handlers or {}).items():
        signal.signal(sig, signal.SIG_DFL if handler is None else handler)


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
