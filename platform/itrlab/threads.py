"""The CPU thread policy: how torch's OpenMP threads wait, and how many a run uses
(docs/speed.md#cpu-threads-beside-other-work gives the figures).

torch's CPU wheel runs its intra-op pool, and MKL's, on the GNU OpenMP it ships (``libgomp.so.1``), whose idle threads
spin for 300,000 iterations (``GOMP_SPINCOUNT``) before they sleep; a training step runs hundreds of small parallel
regions, so the threads never stop spinning, and on a core another process wants they burn the time slices the working
thread needs: an epoch beside a busy process takes many times its quiet time, erratically.

**Wait policy.** ``OMP_WAIT_POLICY=PASSIVE``: a waiting thread sleeps at once. libgomp reads it when it is loaded, so
:func:`configure_env` sets it in ``os.environ`` when ``itrlab`` is imported, before any module can import torch; child
processes inherit it, and a Ray cluster's workers get it through :func:`worker_env`. A value the user set wins
(``OMP_WAIT_POLICY``, or ``GOMP_SPINCOUNT``, which libgomp prefers), and ``ITRLAB_THREAD_POLICY=off`` leaves OpenMP and
torch's thread count as torch sets them. The price: each parallel region wakes a sleeping thread, so on a quiet machine
of few vCPUs two passive threads are slower than spinning ones; one thread is faster still.

**Thread count** (:func:`thread_count`, set by :func:`apply` once where a run starts,
:func:`itrlab.train.device.place`):

1. in a Ray worker: the CPUs Ray reserved for it (``num_cpus``, rounded down, at least 1), or ``train.threads`` if
   that asks for fewer;
2. else ``train.threads`` when it is set (> 0);
3. else ``$OMP_NUM_THREADS`` when the user set it;
4. else the CPUs this process may run on: its affinity mask, capped by the cgroup's CPU quota; on a machine of
   ``SMALL_MACHINE`` (2) CPUs or fewer, one thread, since a passive second thread's wake-ups cost more than it adds.

So concurrent trials use the CPUs they reserved, a run alone uses the machine, and one that shares its cores slows down
about in proportion to the load instead of tenfold.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

POLICY_ENV = "ITRLAB_THREAD_POLICY"  # "off": leave the wait policy and thread count to torch
WAIT_POLICY = {"OMP_WAIT_POLICY": "PASSIVE"}
# either one set by the user means the user chose how OpenMP threads wait
USER_WAIT_KEYS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")

_set_here: dict[str, str] = {}  # what configure_env put in this process's os.environ


def enabled(environ: MutableMapping[str, str] | None = None) -> bool:
    environ = os.environ if environ is None else environ
    return environ.get(POLICY_ENV, "").strip().lower() not in ("off", "0", "false", "no")


def configure_env(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Put the wait policy into ``environ`` (``os.environ``) unless the user chose one; returns what it
    set. Takes effect on OpenMP only if it runs before the process imports torch."""
    own = environ is None
    environ = os.environ if environ is None else environ
    if not enabled(environ) or any(key in environ for key in USER_WAIT_KEYS):
        return {}
    added = {key: value for key, value in WAIT_POLICY.items() if key not in environ}
    environ.update(added)
    if own:
        _set_here.update(added)
    return added


def worker_env() -> dict[str, str]:
    """The policy's variables for the runtime env of Ray workers: those :func:`configure_env` set in this
    process, or would set in it now. None the user set (it reaches a local Ray's workers by inheritance,
    and a cluster's through the job's own runtime env, where repeating it would conflict)."""
    own = {key: value for key, value in _set_here.items() if os.environ.get(key) == value}
    return {**own, **configure_env({key: value for key, value in os.environ.items() if key not in own})}


def _cgroup_quota(root: Path = Path("/sys/fs/cgroup"), proc_cgroup: Path = Path("/proc/self/cgroup")) -> float | None:
    """CPUs the process's cgroup may use (quota / period), None where unlimited or unknown."""
    paths = {"v2": "/", "v1": "/"}
    try:
        for line in proc_cgroup.read_text().splitlines():
            number, controllers, path = line.split(":", 2)
            if number == "0" and controllers == "":
                paths["v2"] = path
            elif "cpu" in controllers.split(","):
                paths["v1"] = path
    except (OSError, ValueError):
        pass
    candidates = []
    for rel in dict.fromkeys((paths["v2"].lstrip("/"), "")):
        candidates.append(("v2", root / rel / "cpu.max"))
    for mount in ("cpu", "cpu,cpuacct"):
        for rel in dict.fromkeys((paths["v1"].lstrip("/"), "")):
            candidates.append(("v1", root / mount / rel))
    for kind, path in candidates:
        try:
            if kind == "v2":
                quota, period = path.read_text().split()[:2]
                if quota == "max":
                    return None
            else:
                quota = (path / "cpu.cfs_quota_us").read_text().strip()
                period = (path / "cpu.cfs_period_us").read_text().strip()
                if int(quota) < 0:
                    return None
            return int(quota) / int(period)
        except (OSError, ValueError, ZeroDivisionError):
            continue
    return None


def available_cpus() -> int:
    """CPUs this process may run on: its affinity mask, capped by its cgroup's CPU quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cpus = os.cpu_count() or 1
    quota = _cgroup_quota()
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, cpus)


def cpu_share(processes: int) -> int:
    """Threads for each of ``processes`` processes that share this machine's CPUs (pytest-xdist's workers)."""
    return max(1, available_cpus() // max(1, processes))


def ray_reserved_cpus() -> float | None:
    """CPUs Ray reserved for this process when it is a Ray worker (a trial, a Ray Train worker); None
    elsewhere (no Ray, or the driver). Looks at Ray only if this process already imported it."""
    ray = sys.modules.get("ray")
    if ray is None:
        return None
    try:
        if not ray.is_initialized():
            return None
        context = ray.get_runtime_context()
        if context.worker.mode != ray._private.worker.WORKER_MODE:  # (no import: ray stays in its layers)
            return None
        cpus = context.get_assigned_resources().get("CPU")
    except Exception:  # an older or newer Ray without these internals: fall back to its OMP_NUM_THREADS
        value = _positive_int(os.environ.get("OMP_NUM_THREADS"))
        return float(value) if value else None
    return 1.0 if cpus is None else float(cpus)  # an actor without num_cpus: Ray's own default, 1 thread


def _positive_int(value: str | None) -> int | None:
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return number if number > 0 else None


SMALL_MACHINE = 2  # CPUs; at most this many: one thread (module doc, rule 4)


def thread_count(
    requested: int = 0,
    environ: MutableMapping[str, str] | None = None,
    reserved: float | None = None,
    cpus: int | None = None,
) -> tuple[int, str]:
    """(torch threads, where the number comes from) under the policy of the module doc.

    ``requested``: ``train.threads`` (0: not set). ``reserved``, ``cpus``: Ray's reservation and the
    available CPUs (default: looked up)."""
    environ = os.environ if environ is None else environ
    if requested < 0:
        raise ValueError(f"threads must be >= 0 (0: the policy's choice), got {requested}")
    reserved = ray_reserved_cpus() if reserved is None else reserved
    if reserved is not None:
        share = max(1, math.floor(reserved))
        if requested and requested < share:
            return requested, "train.threads"
        return share, "Ray reservation"
    if requested:
        return requested, "train.threads"
    user = _positive_int(environ.get("OMP_NUM_THREADS"))
    if user:
        return user, "OMP_NUM_THREADS"
    cpus = available_cpus() if cpus is None else cpus
    if cpus <= SMALL_MACHINE:
        return 1, f"{cpus} CPUs: one thread"
    return cpus, "available CPUs"


def apply(requested: int = 0) -> int:
    """Set torch's intra-op threads by :func:`thread_count` (unless ``ITRLAB_THREAD_POLICY=off``);
    returns torch's thread count."""
    import torch

    if enabled():
        threads, _source = thread_count(requested)
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
    return torch.get_num_threads()


def wait_policy() -> str:
    """``OMP_WAIT_POLICY=PASSIVE`` (or ``GOMP_SPINCOUNT=...``, ``default``): how this process's OpenMP
    threads wait, as set in its environment."""
    shown = [f"{key}={os.environ[key]}" for key in USER_WAIT_KEYS if key in os.environ]
    return ", ".join(shown) or "OpenMP default wait policy"
