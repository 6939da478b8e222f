"""The Ray a sweep runs on: a local one on loopback only, or a cluster it joins, and whether either has room for
one trial (refused up front here, a bounded wait on a cluster).

A busy machine is not a broken one: a local Ray whose node fails to register in Ray's 30 s is stopped and started
again after a pause, ``$ITRLAB_RAY_START_ATTEMPTS`` times in all (default 3); then the sweep ends on one line
(exit status 1) before any MLflow run exists.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from typing import Any

import ray
import torch

from itrlab import threads as thread_policy
from itrlab.config.loader import config_dir
from itrlab.config.sweep import SweepSpec
from itrlab.console_log import CONSOLE_ENV
from itrlab.errors import UnavailableError, UserInputError
from itrlab.sweep import console
from itrlab.sweep.quiet_workers import WORKER_SETUP_HOOK
from itrlab.train.loop import STEP_PROGRESS_ENV
from itrlab.workdir import job_runtime_env

_log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
RESOURCE_WAIT_ENV = "ITRLAB_RESOURCE_WAIT_S"  # how long a sweep on a cluster waits for room for one trial
RESOURCE_WAIT_DEFAULT_S = 600.0
START_ATTEMPTS_ENV = "ITRLAB_RAY_START_ATTEMPTS"  # how often a local Ray's start is tried on a busy machine
START_ATTEMPTS_DEFAULT = 3
# The Ray dashboard of a sweep's own local Ray: started where a trial runs a TorchTrainer (Train inside
# Tune frees a stopped trial's workers through it), else only when asked (it costs start-up time and CPU:
# docs/speed.md#cpu-figures)
DASHBOARD_ENV = "ITRLAB_RAY_DASHBOARD"
RAY_PROGRAMS = (
    "gcs_server",
    "raylet",
    "ray/dashboard",
    "log_monitor",
    "ray_process_reaper",
    "runtime_env",
    "monitor.py",
    "default_worker.py",
    "ray::",
)  # what ray.init starts on this machine


def loopback_options() -> dict[str, Any]:
    """``ray.init`` options that keep a Ray that itrlab starts on this machine on loopback.

    The dashboard listens on ``dashboard_host``; the other servers (GCS, raylet, workers, the agents and
    the Prometheus metrics endpoint) listen on all interfaces unless the node's IP is a loopback address.
    ``ray.init(_node_ip_address=...)`` replaces 127.0.0.1 by the machine's address unless Ray runs in its
    single-machine mode (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, the default on macOS and Windows), read
    at call time from ``ray._private.ray_constants``, and by Ray's own processes from the environment.
    """
    from ray._private import ray_constants

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    return {"_node_ip_address": LOOPBACK, "dashboard_host": LOOPBACK}


def wants_dashboard(needed: bool) -> bool:
    """Whether a local Ray starts its dashboard: where the sweep ``needed`` it (TorchTrainer trials), or
    ``$ITRLAB_RAY_DASHBOARD=1`` asks for it (to watch the trials at http://127.0.0.1:8265)."""
    value = os.environ.get(DASHBOARD_ENV, "").strip()
    if value not in ("", "0", "1"):
        raise UserInputError(f"{DASHBOARD_ENV}={value!r}: 1 (start the Ray dashboard) or 0 (only where trials need it)")
    return needed or value == "1"


def init_ray(tracking_uri: str, logical_cpus: float = 0, dashboard: bool = True) -> bool:
    """Join ``$RAY_ADDRESS`` (a cluster, or the job's own cluster under ``ray job submit``) or start a
    local Ray, on loopback only, with at least ``logical_cpus`` (a TorchTrainer trial needs CPUs to spare
    beside its workers for its controller, or it waits forever on a 2-core machine), and its dashboard
    where ``dashboard`` needs it or :func:`wants_dashboard` asks. Returns whether this process started
    Ray itself (False: it joined a cluster, or Ray was already initialised)."""
    if ray.is_initialized():
        return False
    address = os.environ.get("RAY_ADDRESS") or None
    num_cpus = None if address else max(os.cpu_count() or 1, math.ceil(logical_cpus)) or None
    wanted = {"MLFLOW_TRACKING_URI": tracking_uri, "ITRLAB_CONFIG_DIR": str(config_dir().resolve())}
    # Under `ray job submit` the job's runtime env already sets some; repeating a key is refused.
    env_vars = {key: value for key, value in wanted.items() if key not in os.environ}
    env_vars |= thread_policy.worker_env()  # OpenMP's wait policy for a cluster's workers (itrlab.threads)
    runtime_env: dict[str, Any] = console_runtime_env(env_vars)
    # "local": a new Ray of its own, even where `ray start --head` runs on this machine (address=None
    # would join that one, and refuse num_cpus)
    options = dict(
        address=address or "local",
        num_cpus=num_cpus,
        runtime_env=runtime_env or None,
        log_to_driver=True,
        **({} if address else {**loopback_options(), "include_dashboard": wants_dashboard(dashboard)}),
    )
    if address:
        ray.init(**options)
    else:
        start_local_ray(options)
    return address is None


# Ray 2.60 turns token authentication on for every new local Ray when RAY_AUTH_MODE is unset
# (ray._private.worker.init -> authentication_token_setup.enable_token_auth_by_default) and says so with a
# warning on every start, which would open every sweep. Authentication stays on; for the Ray a
# sweep starts itself on loopback, the sentence is dropped. Joining a cluster (RAY_ADDRESS) is untouched.
TOKEN_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
TOKEN_AUTH_NOTICE = "Token authentication is enabled for this Ray cluster"


def _not_the_token_notice(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(TOKEN_AUTH_NOTICE)


@contextlib.contextmanager
def token_notice_dropped():
    """Ray's notice that it turned token authentication on by default, dropped while a local Ray starts."""
    logger = logging.getLogger(TOKEN_AUTH_LOGGER)
    logger.addFilter(_not_the_token_notice)
    try:
        yield
    finally:
        logger.removeFilter(_not_the_token_notice)


def start_local_ray(options: dict[str, Any]) -> None:
    """``ray.init(**options)`` of a local Ray, tried again after a pause when its start times out; Ray's
    notice that token authentication is on by default is dropped (:func:`token_notice_dropped`)."""
    try:
        attempts = max(1, int(os.environ.get(START_ATTEMPTS_ENV) or START_ATTEMPTS_DEFAULT))
    except ValueError:
        raise UserInputError(f"{START_ATTEMPTS_ENV}={os.environ[START_ATTEMPTS_ENV]!r}: a whole number") from None
    for attempt in range(1, attempts + 1):
        try:
            with token_notice_dropped():
                ray.init(**options)
            return
        except Exception as err:  # noqa: BLE001 - Ray's start raises bare Exceptions
            text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            if not _slow_start(err):
                raise
            stop_own_ray_processes()
            if attempt == attempts:
                raise UnavailableError(
                    f"Ray did not start on this machine in {attempts} attempt(s) (the last: {text}); "
                    f"the machine is too busy now: nothing was started, try again later or allow "
                    f"more attempts (${START_ATTEMPTS_ENV})"
                ) from None
            pause = 10.0 * attempt
            _log.info(
                f"itrlab: Ray did not start ({text}); the machine is busy: starting it again in {pause:g} s "
                f"(attempt {attempt + 1} of {attempts})"
            )
            time.sleep(pause)


def _slow_start(err: BaseException) -> bool:
    """Whether Ray's start failed for want of time (its node or GCS did not come up in time)."""
    text = str(err).lower()
    return (
        isinstance(err, TimeoutError) or "timed out" in text or "timeout" in text or "failed to connect to gcs" in text
    )


def stop_own_ray_processes(timeout_s: float = 15.0) -> None:
    """After a failed start: ``ray.shutdown()``, and SIGKILL to what this process started for that Ray and still
    runs (its children running one of Ray's programs, and theirs), by process id."""
    import signal

    from itrlab.ray_head import descendants, process_table, send, wait_ended

    with contextlib.suppress(Exception):
        ray.shutdown()
    table = process_table()
    started = {
        pid
        for pid, proc in table.items()
        if proc.parent == os.getpid() and any(program in " ".join(proc.args) for program in RAY_PROGRAMS)
    }
    doomed = descendants(started, table)
    send(doomed, signal.SIGKILL)
    wait_ended(doomed, timeout_s)


def console_runtime_env(env_vars: dict[str, str]) -> dict[str, Any]:
    """The runtime env of the sweep's Ray: ``env_vars`` plus the console's (:mod:`itrlab.sweep.console`): when quiet,
    its variables and the worker setup hook; always ``-v``, the step counter's interval and the command line's console
    (:data:`itrlab.console_log.CONSOLE_ENV`) where set here, so that a cluster's trials see them too. A key the
    submitted job's runtime env sets is left to it."""
    env_vars = dict(env_vars) | console.quiet_env()
    env_vars |= {
        key: os.environ[key] for key in (console.VERBOSE_ENV, STEP_PROGRESS_ENV, CONSOLE_ENV) if os.environ.get(key)
    }
    job = job_runtime_env()
    env_vars = {key: value for key, value in env_vars.items() if key not in (job.get("env_vars") or {})}
    runtime_env: dict[str, Any] = {"env_vars": env_vars} if env_vars else {}
    if (
        not console.is_verbose()
        and "worker_process_setup_hook" not in job
        and "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR" not in os.environ
    ):  # one hook of the user's own wins
        runtime_env["worker_process_setup_hook"] = WORKER_SETUP_HOOK
    return runtime_env


def trial_demand(spec: SweepSpec) -> tuple[dict[str, float], int, dict[str, float]]:
    """(one worker's resources, workers, the whole trial's resources) in Ray's resource names."""
    workers, cpus, gpus = spec.workers
    bundle = {"CPU": float(cpus), **({"GPU": float(gpus)} if gpus else {})}
    in_process = workers == 1 and spec.trainer == "auto"
    total = {key: value * workers for key, value in bundle.items()}
    if not in_process:
        total["CPU"] += 0.1  # the trial's own process, which only waits on its workers
    return bundle, workers, total


def _describe(resources: dict[str, float]) -> str:
    return ", ".join(f"{value:g} {key}" for key, value in resources.items())


def check_local_resources(spec: SweepSpec) -> None:
    """A sweep that starts its own Ray must not ask for more CPUs or GPUs per trial than this machine
    has (Tune would wait for them forever). On a cluster the autoscaler may add nodes: there
    :func:`wait_for_room` waits a bounded time instead."""
    if os.environ.get("RAY_ADDRESS") or ray.is_initialized():
        return
    wants_dashboard(False)  # a bad $ITRLAB_RAY_DASHBOARD, refused before MLflow or the sweep's folder
    workers, cpus, gpus = spec.workers
    machine = os.cpu_count() or 1
    if cpus * workers > machine:
        raise UserInputError(
            f"--cpus-per-trial / resources.cpu: a trial asks for {cpus * workers:g} CPU(s) "
            f"({cpus:g} per worker x {workers} workers) and this machine has {machine}; "
            "ask for fewer, or submit the sweep to a cluster (RAY_ADDRESS)"
        )
    wanted = gpus * workers
    if wanted == 0:
        return
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if wanted > visible:
        raise UserInputError(
            f"--gpus-per-trial / resources.gpu: a trial asks for {wanted:g} GPU(s) "
            f"({gpus:g} per worker x {workers} workers) and this machine "
            f"has {visible}; ask for fewer, or submit the sweep to a cluster with GPU nodes"
        )


def wait_for_room(spec: SweepSpec, timeout_s: float | None = None, poll_s: float = 2.0) -> None:
    """On a Ray this process did not start (a cluster): wait until its nodes could hold one trial,
    asking the autoscaler for them, at most ``timeout_s`` (``$ITRLAB_RESOURCE_WAIT_S``, default 600 s);
    then fail with a message instead of letting Tune wait forever."""
    if timeout_s is None:
        timeout_s = float(os.environ.get(RESOURCE_WAIT_ENV) or RESOURCE_WAIT_DEFAULT_S)
    bundle, workers, total = trial_demand(spec)

    def nodes() -> list[dict[str, float]]:
        return [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]

    def room(resources: list[dict[str, float]]) -> bool:
        one_worker = any(all(node.get(k, 0) >= v for k, v in bundle.items()) for node in resources)
        return one_worker and all(sum(node.get(k, 0) for node in resources) >= v for k, v in total.items())

    if room(nodes()):
        return
    _log.info(
        f"waiting up to {timeout_s:g} s for the Ray cluster to offer one trial's resources "
        f"({_describe(total)}; {workers} worker(s) of {_describe(bundle)})"
    )
    requested = False
    with contextlib.suppress(Exception):  # a hint to the autoscaler, where there is one
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=[bundle] * workers)
        requested = True
    deadline = time.monotonic() + timeout_s
    try:
        while not room(current := nodes()):
            if time.monotonic() >= deadline:
                largest = max(current, key=lambda node: node.get("CPU", 0), default={})
                cluster = {k: sum(node.get(k, 0) for node in current) for k in ("CPU", "GPU")}
                raise UserInputError(
                    f"--cpus-per-trial / --gpus-per-trial: the Ray cluster has no room for one trial "
                    f"({_describe(total)}) after {timeout_s:g} s; it has {len(current)} node(s), "
                    f"{_describe(cluster)} in all, the largest node "
                    f"{_describe({k: largest.get(k, 0) for k in ('CPU', 'GPU')})}; "
                    f"ask for less, add nodes, or wait longer (${RESOURCE_WAIT_ENV})"
                )
            time.sleep(poll_s)
    finally:
        if requested:
            with contextlib.suppress(Exception):
                request_resources(bundles=[])
