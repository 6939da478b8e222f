"""The local cluster as a whole: its folders, its state file, and starting and stopping its parts in order.

What the nodes share is the network (loopback) and one folder, ``<root>/shared``: the RWX volume
``itrlab-shared`` that every pod mounts at ``/mnt/itrlab``. Sweeps keep their storage there
(``--storage <root>/shared/sweeps``) and data sets live there (``dataset.root=<root>/shared/data/...``).
Everything else lives in a short folder ``/tmp/itrlab-*`` (Ray's Unix sockets sit in each node's temp
folder, and a socket's path may not exceed 107 bytes) that ``stop()`` deletes: ``head/``, ``nodes/``,
``mlflow/`` (the artifact store) and ``postgres/``; the logs stay under ``<root>``.

In its mount namespace each worker node mounts a tmpfs of its own over ``nodes/`` (its temp folder
``--temp-dir``, where Ray keeps the job's working directory and the trials' folders, its working folder,
``HOME`` and ``TMPDIR``: invisible to the head, the other nodes and this machine) and empty ones over
``head/`` (the head's temp folder: the job's working directory, the driver's local files), ``mlflow/`` and
``postgres/``; every node gets a ``/dev/shm`` of its own (the pods' ``dshm``). So a trial that reads a
path on the driver's disk finds nothing, and the driver cannot read a trial's local disk.

Nothing here stops any other Ray on the machine (no ``ray stop``): each node's processes end with its
namespace, and the servers with their process groups.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cluster_harness.mlflow_server import BIN, mlflow_args, start_mlflow, stop_mlflow, wait_mlflow
from cluster_harness.nodes import Node, end_node, isolation_problem, launch_node, list_ray_nodes, node_ip
from cluster_harness.postgres import backend_store_uri, start_postgres, stop_postgres
from cluster_harness.processes import (
    LOOPBACK,
    STARTED,
    ClusterError,
    alive,
    free_port,
    http_ok,
    kill_started,
    signals_held,
    wait_until,
)

STATE_FILE = "cluster.json"
REPO = Path(__file__).resolve().parents[2]


@dataclass
class LocalCluster:
    """A Ray head and worker nodes in namespaces of their own, PostgreSQL and an MLflow server, on loopback.

    ``LocalCluster.start(root)`` starts it (or use it as a context manager), ``stop()`` ends every
    process it started; ``load(root)`` reads a running one's state from ``<root>/cluster.json``.
    """

    root: Path
    workers: int = 2
    cpus_per_worker: float = 2
    token: str = field(default_factory=lambda: secrets.token_hex(24))
    gcs_port: int = 0
    dashboard_port: int = 0
    nodes: list[Node] = field(default_factory=list)
    mlflow_uri: str = ""
    mlflow_pid: int = 0
    pg_port: int = 0
    pg_pid: int = 0
    pg_password: str = ""
    object_store_bytes: int = 200 * 1024 * 1024
    node_tmpfs: str = "3g"  # a worker node's own disk (the job's working directory, logs, trial folders)
    node_env: dict[str, str] = field(default_factory=dict)  # more variables for every node
    # the nodes' own disks, MLflow's and PostgreSQL's folders: a short path under /tmp (Ray's Unix sockets
    # live in each node's temp folder, and a socket's path may not exceed 107 bytes), deleted by stop()
    local: str = ""
    tie_to_parent: bool = False  # every process ends when the process that started the cluster dies

    def __post_init__(self) -> None:
        self._processes: dict[str, subprocess.Popen] = {}  # what this process started, by name

    # -- layout ---------------------------------------------------------------------------------
    @property
    def shared(self) -> Path:
        """The one folder every node sees (the RWX volume): sweeps' storage and the data sets."""
        return self.root / "shared"

    @property
    def head_dir(self) -> Path:
        return Path(self.local) / "head"

    @property
    def nodes_dir(self) -> Path:
        return Path(self.local) / "nodes"

    @property
    def mlflow_dir(self) -> Path:
        return Path(self.local) / "mlflow"

    @property
    def pg_dir(self) -> Path:
        return Path(self.local) / "postgres"

    @property
    def dashboard_url(self) -> str:
        return f"http://{LOOPBACK}:{self.dashboard_port}"

    @property
    def gcs_address(self) -> str:
        return f"{node_ip(0)}:{self.gcs_port}"

    @property
    def backend_store_uri(self) -> str:
        return backend_store_uri(self.pg_port)

    def mlflow_args(self, port: int) -> list[str]:
        """The MLflow server's arguments (:func:`cluster_harness.mlflow_server.mlflow_args`)."""
        return mlflow_args(port, self.backend_store_uri, self.mlflow_dir)

    def client_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of a ``ray job submit`` (or ``ray list``) against this cluster."""
        env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("RAY_")}
        return {**env, "RAY_ADDRESS": self.dashboard_url, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}

    # -- lifecycle ------------------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        root: Path,
        workers: int = 2,
        cpus_per_worker: float = 2,
        mlflow: bool = True,
        node_env: dict[str, str] | None = None,
        tie_to_parent: bool = False,
    ) -> LocalCluster:
        """Start PostgreSQL and MLflow (unless ``mlflow`` is False), the head and ``workers`` worker
        nodes; everything started so far is stopped again when one part fails or the start is
        interrupted (KeyboardInterrupt). ``node_env``: more variables for every Ray node (the head's
        driver sees them too). ``tie_to_parent``: every process ends when the calling process dies (a
        test's fixture), not only on ``stop()``."""
        root = Path(root).resolve()
        problem = isolation_problem()
        if problem:
            raise ClusterError(problem)
        if (root / STATE_FILE).is_file():
            raise ClusterError(
                f"a local cluster's state is in {root / STATE_FILE}: `down` it first, or use another root"
            )
        cluster = cls(
            root=root,
            workers=workers,
            cpus_per_worker=cpus_per_worker,
            node_env=dict(node_env or {}),
            tie_to_parent=tie_to_parent,
        )
        started = len(STARTED)
        try:
            cluster._make_folders()
            if mlflow:
                cluster._start_postgres()
                server = cluster._start_mlflow()  # it answers after ~15 s: the Ray nodes start meanwhile
            cluster._start_ray()
            if mlflow:
                wait_mlflow(server, cluster.root)
        except BaseException:
            # SIGKILL at once to all this start made (a start cut short keeps nothing worth a clean shutdown),
            # then the folders: done in a second or two, within the grace that `docker stop`, CI runners and
            # systemd give before their own SIGKILL (a graceful stop took more than 10 s, and SIGKILL then left
            # PostgreSQL running). A second Ctrl-C or SIGTERM does not cut it short.
            with signals_held():
                kill_started(since=started)
                cluster.stop()
            raise
        return cluster

    @classmethod
    def load(cls, root: Path) -> LocalCluster:
        path = Path(root).resolve() / STATE_FILE
        if not path.is_file():
            raise ClusterError(f"no local cluster's state in {path}")
        data = json.loads(path.read_text())
        data["root"] = Path(data["root"])
        data["nodes"] = [Node(**node) for node in data["nodes"]]
        return cls(**data)

    def save(self) -> None:
        data = asdict(self)
        data["root"] = str(self.root)
        path = self.root / STATE_FILE
        path.touch(mode=0o600)
        path.write_text(json.dumps(data, indent=2))

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """End every process this cluster started: each node's namespace, MLflow, PostgreSQL; delete the
        cluster's local folder (the shared storage stays)."""
        left = []
        for node in self.nodes:
            try:
                end_node(node)
            except ClusterError as err:
                left.append(str(err))
        stop_mlflow(self.mlflow_pid)
        stop_postgres(self.pg_pid)
        if self.local:
            shutil.rmtree(self.local, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            (self.root / STATE_FILE).unlink()
        if left:
            raise ClusterError("; ".join(left))

    def _make_folders(self) -> None:
        self.shared.mkdir(parents=True, exist_ok=True)
        self.local = tempfile.mkdtemp(prefix="itrlab-", dir="/tmp" if os.access("/tmp", os.W_OK) else None)
        os.chmod(self.local, 0o711)  # PostgreSQL's user (root runs it as 'postgres') reaches its folder
        for folder in (self.head_dir, self.nodes_dir, self.mlflow_dir, self.pg_dir):
            folder.mkdir(mode=0o700)

    # -- the servers ------------------------------------------------------------------------------
    def _start_postgres(self) -> None:
        server = start_postgres(self.pg_dir, self.root / "postgres.log", self.tie_to_parent)
        self.pg_port, self.pg_pid, self.pg_password = server.port, server.pid, server.password

    def _start_mlflow(self):
        server = start_mlflow(self.mlflow_dir, self.root, self.backend_store_uri, self.pg_password, self.tie_to_parent)
        self._processes["mlflow"] = server.process
        self.mlflow_pid, self.mlflow_uri = server.process.pid, server.uri
        return server

    # -- Ray nodes --------------------------------------------------------------------------------
    def _env_of(self, node: Node, home: Path, tmp: Path) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("RAY_", "MLFLOW_", "PYTEST_", "ITRLAB_")) and k != "OMP_NUM_THREADS"
        }
        env.update(
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN=self.token,
            HOME=str(home),
            TMPDIR=str(tmp),
            PYTHONUNBUFFERED="1",
            ITRLAB_CONFIG_DIR=str(REPO / "configs"),
            GLOO_SOCKET_IFNAME="lo",  # DDP's gloo on loopback, not the host name's address
            PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        )  # `python` is this one (the image's)
        if node.head and self.mlflow_uri:  # where `ray job submit` runs the driver
            env["MLFLOW_TRACKING_URI"] = self.mlflow_uri
        return {**env, **self.node_env}

    def _hidden_from_workers(self) -> list[Path]:
        return [self.head_dir, self.mlflow_dir, self.pg_dir]

    def _ray_command(self, node: Node, temp: Path) -> list[str]:
        command = [
            str(BIN / "ray"),
            "start",
            "--block",
            f"--node-ip-address={node.ip}",
            f"--node-name={node.name}",
            f"--num-cpus={node.cpus:g}",
            "--num-gpus=0",
            f"--temp-dir={temp}",
            f"--object-store-memory={self.object_store_bytes}",
            f"--dashboard-agent-listen-port={node.dashboard_agent_port}",
            "--disable-usage-stats",
        ]
        if node.head:
            return command + [
                "--head",
                f"--port={self.gcs_port}",
                f"--dashboard-port={self.dashboard_port}",
                f"--dashboard-host={LOOPBACK}",
                f"--ray-client-server-port={free_port()}",
            ]
        return command + [f"--address={self.gcs_address}"]

    def _start_node(self, node: Node) -> None:
        node.dashboard_agent_port = free_port()
        if node.head:
            own = self.head_dir
            tmpfs = [("/dev/shm", "1g")]
        else:
            own = self.nodes_dir / node.name
            # over the others' folders an empty tmpfs of its own: a trial that writes under the driver's
            # paths (synthetic data at a relative dataset.root, say) writes into its own copy, as a pod does
            tmpfs = [
                (str(self.nodes_dir), self.node_tmpfs),
                ("/dev/shm", "1g"),
                *((str(path), self.node_tmpfs) for path in self._hidden_from_workers()),
            ]
        self.nodes.append(node)  # before it starts: stop() ends a node whose start was interrupted
        process = launch_node(
            node,
            self._ray_command(node, own / "tmp"),
            tmpfs,
            own,
            self.root / f"node-{node.name}.log",
            self._env_of(node, own / "home", own / "tmp"),
            self.root,
            self.tie_to_parent,
        )
        self._processes[node.name] = process

    def _start_ray(self) -> None:
        self.gcs_port, self.dashboard_port = free_port(), free_port()
        head = Node("head", head=True, cpus=0, ip=node_ip(0))
        self._start_node(head)
        wait_until(
            lambda: http_ok(f"{self.dashboard_url}/api/gcs_healthz"),
            180,
            "the Ray head",
            self._processes["head"],
            self.root / "node-head.log",
        )
        for _ in range(self.workers):
            self._start_node(self._next_worker())
        self.save()
        self._wait_joined()

    def _next_worker(self) -> Node:
        index = max((int(n.name.removeprefix("worker")) for n in self.nodes if not n.head), default=0) + 1
        return Node(f"worker{index}", head=False, cpus=self.cpus_per_worker, ip=node_ip(index))

    def _wait_joined(self) -> None:
        running = {node.name for node in self.nodes if alive(node.pid)}
        wait_until(
            lambda: running <= {info["node_name"] for info in self.ray_nodes()},
            180,
            "the Ray worker nodes joining",
            every=1.0,
        )
        ids = {info["node_name"]: info["node_id"] for info in self.ray_nodes()}
        for node in self.nodes:
            node.node_id = ids.get(node.name, node.node_id)
        self.save()

    def add_worker(self) -> Node:
        """Start one more worker node (as KubeRay replaces a lost worker pod) and wait until it joined."""
        node = self._next_worker()
        self._start_node(node)
        self.save()
        self._wait_joined()
        return node

    def live_workers(self) -> list[Node]:
        return [node for node in self.nodes if not node.head and alive(node.pid)]

    def ray_nodes(self, alive: bool = True) -> list[dict[str, Any]]:
        """The cluster's nodes as Ray's state API lists them (node_id, node_name, state, resources_total, ...)."""
        return list_ray_nodes(self.dashboard_url, self.token, alive)

    def node(self, name_or_id: str) -> Node:
        for node in self.nodes:
            if name_or_id in (node.name, node.node_id):
                return node
        raise KeyError(name_or_id)

    def lose_node(self, name_or_id: str, timeout: float = 30.0) -> Node:
        """Kill a node as a lost machine dies: SIGKILL to its namespace's first process, which ends
        every process of the namespace (raylet, agents, workers, trials) at once; waits until none is left."""
        node = self.node(name_or_id)
        if node.head:
            raise ValueError("lose_node: the head; stop() ends the whole cluster")
        end_node(node, timeout)
        return node

    # -- reporting ----------------------------------------------------------------------------------
    def describe(self) -> str:
        lines = [
            f"local Ray cluster under {self.root}",
            f"  dashboard / job API : {self.dashboard_url}  (GCS {self.gcs_address}; token auth)",
            f"  shared storage      : {self.shared}  (sweeps: --storage {self.shared / 'sweeps'}; "
            f"data: dataset.root={self.shared / 'data'}/...)",
        ]
        if self.mlflow_uri:
            lines.append(
                f"  MLflow              : {self.mlflow_uri}  (PostgreSQL on {LOOPBACK}:{self.pg_port}, "
                f"artifacts served from {self.mlflow_dir / 'artifacts'})"
            )
        for node in self.nodes:
            state = "running" if alive(node.pid) else "gone"
            lines.append(
                f"  {node.name:<9} {'head' if node.head else 'worker'}  {node.cpus:g} CPU  "
                f"node id {node.node_id or '?'}  pid {node.pid} ({state})"
            )
        return "\n".join(lines)
