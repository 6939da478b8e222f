"""The local cluster's Ray nodes: each a ``ray start --block`` in a PID and a mount namespace of its own.

``unshare --pid --mount --fork`` (plus ``--user --map-root-user`` when not run as root) makes what a pod
is, without containers. The namespace's first process (:data:`NODE_INIT`) mounts the node's own tmpfs
folders, runs ``ray start`` and reaps orphans; in its PID namespace a node's processes (raylet, agents,
workers) see only each other, and killing that first process ends every one of them at once, as losing
the machine does (:func:`end_node`). Each node has a loopback address of its own (:func:`node_ip`) and
token authentication (``RAY_AUTH_MODE=token``).

Why namespaces rather than one Linux user per node: pods run as the same user (10001, ``fsGroup``)
and share the volume with the same ownership; separate users would need group-writable storage
(umask, setgid folders) that the cluster does not have, root would still read every node's files, and
ending a user's processes is not atomic. Namespaces need no account on the machine and, with a user
namespace, no root either.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster_harness.processes import ClusterError, alive, child_of, cmdline, in_namespace, pid_namespace, popen

# PID 1 of a node's namespace: mounts the node's own tmpfs folders, runs `ray start --block` and reaps
# every orphan until it ends; when it ends, the kernel ends every process of the namespace.
NODE_INIT = r"""
import json, os, subprocess, sys
spec = json.loads(sys.argv[1])
for target, size in spec["tmpfs"]:
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "itrlab-node", target], check=True)
for folder in spec["mkdir"]:
    os.makedirs(folder, exist_ok=True)
os.chdir(spec["cwd"])
ray = subprocess.Popen(spec["command"])
while True:
    pid, status = os.wait()
    if pid == ray.pid:
        sys.exit(os.waitstatus_to_exitcode(status))
"""


@dataclass
class Node:
    name: str
    head: bool
    cpus: float
    pid: int = 0  # the `unshare` process (leads its own session)
    init_pid: int = 0  # PID 1 of the node's namespace, as this machine sees it
    namespace: str = ""  # its PID namespace, "pid:[inode]"
    node_id: str = ""  # Ray's node id, once it joined
    dashboard_agent_port: int = 0
    ip: str = ""  # a loopback address of its own: 127.0.0.2 for the head, .3, .4, ... for the workers


def node_ip(index: int) -> str:
    """The loopback address of node ``index`` (0: the head). Not 127.0.0.1: ``ray start`` replaces that
    one by the machine's network address (its "localhost" rule), and the cluster would leave loopback."""
    return f"127.0.0.{2 + index}"


def unshare_command() -> list[str]:
    """``unshare`` for a node: its own PID and mount namespaces (a user namespace too when not root);
    ``--kill-child``: the node ends when the ``unshare`` process is killed."""
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", *user, "--mount", "--pid", "--fork", "--kill-child", "--mount-proc", "--propagation", "private"]


def isolation_problem() -> str | None:
    """Why nodes cannot get namespaces of their own on this machine (None: they can)."""
    if shutil.which("unshare") is None:
        return "`unshare` (util-linux) is not installed"
    try:
        done = subprocess.run(
            [*unshare_command(), "mount", "-t", "tmpfs", "-o", "size=1m", "itrlab-probe", "/mnt"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as err:
        return f"unshare failed: {err}"
    if done.returncode != 0:
        return (
            "this machine does not let a process create PID and mount namespaces (unshare: "
            f"{(done.stderr.strip().splitlines() or ['failed'])[-1]})"
        )
    return None


def launch_node(
    node: Node,
    ray_command: list[str],
    tmpfs: list[tuple[str, str]],
    own: Path,
    log: Path,
    env: dict[str, str],
    cwd: Path,
    tie_to_parent: bool = False,
) -> subprocess.Popen:
    """Start ``node``: in new namespaces, mount ``tmpfs`` (target, size), make its ``own`` folders (``tmp``,
    ``work``, ``home``) and run ``ray_command`` in ``own/work``; ``node`` gets its pids and namespace."""
    spec = {
        "tmpfs": tmpfs,
        "mkdir": [str(own / "tmp"), str(own / "work"), str(own / "home")],
        "cwd": str(own / "work"),
        "command": ray_command,
    }
    process = popen(
        [*unshare_command(), sys.executable, "-c", NODE_INIT, json.dumps(spec)], log, tie_to_parent, cwd=cwd, env=env
    )
    node.pid = process.pid
    node.init_pid = child_of(process.pid) or 0
    node.namespace = pid_namespace(node.init_pid) or "" if node.init_pid else ""
    return process


def end_node(node: Node, timeout: float = 30.0) -> None:
    """Kill a node as a lost machine dies: SIGKILL to its namespace's first process (and ``unshare``), which
    ends every process of the namespace at once; waits until none is left."""
    # only the processes that are still this node's (pids read back from cluster.json may be reused)
    ours = [
        pid
        for pid in (node.init_pid, node.pid)
        if pid
        and pid_namespace(pid) is not None
        and (pid_namespace(pid) == node.namespace or "unshare" in cmdline(pid).split(" ", 1)[0])
    ]
    for pid in ours:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while (
        (node.pid in ours and alive(node.pid)) or (node.namespace and in_namespace(node.namespace))
    ) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(node.pid, os.WNOHANG)
        time.sleep(0.1)
    if node.namespace and in_namespace(node.namespace):
        raise ClusterError(f"node {node.name}: processes left in its namespace after {timeout:.0f} s")


def list_ray_nodes(dashboard_url: str, token: str, alive_only: bool = True) -> list[dict[str, Any]]:
    """The cluster's nodes as Ray's state API lists them (node_id, node_name, state, resources_total, ...)."""
    request = urllib.request.Request(
        f"{dashboard_url}/api/v0/nodes?limit=100&detail=true", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        listed = json.loads(response.read())["data"]["result"]["result"]
    return [info for info in listed if not alive_only or info.get("state") == "ALIVE"]
