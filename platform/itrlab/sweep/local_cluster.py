"""A multi-node Ray cluster on one machine, to check here what a KubeRay cluster does (docs/cluster.md).

``jobs/local_cluster.py up`` (and the fixture of ``tests/test_multinode.py``) starts, all on loopback:

* **PostgreSQL**, a server of its own: ``initdb`` in a fresh data folder (user ``mlflow``, password
  authentication), a free port, its socket in that folder. As root it runs as the ``postgres`` user
  (or ``nobody``): PostgreSQL refuses to run as root.
* **MLflow**: ``mlflow server`` with the flags of ``k8s/base/mlflow.yaml`` (``--backend-store-uri
  postgresql://mlflow@...`` with the password in ``PGPASSWORD``, ``--serve-artifacts
  --artifacts-destination``, ``--allowed-hosts``), swapping only the host, port, worker count and a
  local folder for the S3 bucket. Runs, metrics and artifacts go through the server: no Ray node
  needs the store's files.
* **Ray**: a head (``--num-cpus 0``, as in ``k8s/base/raycluster.yaml``: it runs the sweep's driver,
  the GCS and the dashboard, no trial) and ``workers`` worker nodes (``ray start --address``), with
  token authentication (``RAY_AUTH_MODE=token``, one random ``RAY_AUTH_TOKEN`` for every node). Each
  node has a loopback address of its own (127.0.0.2 the head, .3, .4, ... the workers).

What the nodes share is the network (loopback) and one folder, ``<root>/shared``: the RWX volume
``itrlab-shared`` that every pod mounts at ``/mnt/itrlab``. Sweeps keep their storage there
(``--storage <root>/shared/sweeps``) and data sets live there (``dataset.root=<root>/shared/data/...``).
Everything else lives in a short folder ``/tmp/itrlab-*`` (Ray's Unix sockets sit in each node's temp
folder, and a socket's path may not exceed 107 bytes) that ``stop()`` deletes: ``head/``, ``nodes/``,
``mlflow/`` (the artifact store) and ``postgres/``; the logs stay under ``<root>``.

**Isolation: a PID and a mount namespace per node** (``unshare --pid --mount --fork``, plus ``--user
--map-root-user`` when not run as root), which is what a pod is, without containers. In its mount
namespace each worker node mounts a tmpfs of its own over ``nodes/`` (its temp folder ``--temp-dir``,
where Ray keeps the job's working directory and the trials' folders, its working folder, ``HOME`` and
``TMPDIR``: invisible to the head, the other nodes and this machine) and empty ones over ``head/`` (the
head's temp folder: the job's working directory, the driver's local files), ``mlflow/`` and
``postgres/``; every node gets a ``/dev/shm`` of its own (the pods' ``dshm``). So a trial that reads a
path on the driver's disk finds nothing, and the driver cannot read a trial's local disk. In its PID
namespace a node's processes (raylet, agents, workers) see only each other, and killing the namespace's
first process ends every one of them at once, as losing the machine does (:meth:`LocalCluster.lose_node`).

Why namespaces rather than one Linux user per node: pods run as the same user (10001, ``fsGroup``)
and share the volume with the same ownership; separate users would need group-writable storage
(umask, setgid folders) that the cluster does not have, root would still read every node's files, and
ending a user's processes is not atomic. Namespaces need no account on the machine and, with a user
namespace, no root either.

Nothing here stops any other Ray on the machine (no ``ray stop``): each node's processes end with its
namespace, and the servers with their process groups.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

LOOPBACK = "127.0.0.1"
STATE_FILE = "cluster.json"
BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[3]
PG_BIN_ENV = "ITRLAB_PG_BIN"
ALLOWED_HOSTS = "localhost,localhost:*,127.0.0.1,127.0.0.1:*"  # the manifest's loopback entries

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


class ClusterError(RuntimeError):
    """The local cluster could not start (a server did not answer, a node did not join): one line, and
    the log file to read."""


def node_ip(index: int) -> str:
    """The loopback address of node ``index`` (0: the head). Not 127.0.0.1: ``ray start`` replaces that
    one by the machine's network address (its "localhost" rule), and the cluster would leave loopback."""
    return f"127.0.0.{2 + index}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server programs (``initdb``, ``postgres``): ``$ITRLAB_PG_BIN``, else
    ``initdb`` on the PATH, else Debian's newest ``/usr/lib/postgresql/<version>/bin``; None without."""
    if os.environ.get(PG_BIN_ENV):
        folder = Path(os.environ[PG_BIN_ENV])
        return folder if (folder / "initdb").is_file() else None
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                      key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0)
    return versions[-1].parent if versions else None


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
        done = subprocess.run([*unshare_command(), "mount", "-t", "tmpfs", "-o", "size=1m", "itrlab-probe", "/mnt"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        return f"unshare failed: {err}"
    if done.returncode != 0:
        return ("this machine does not let a process create PID and mount namespaces (unshare: "
                f"{(done.stderr.strip().splitlines() or ['failed'])[-1]})")
    return None


def _service_user() -> str | None:
    """Who runs PostgreSQL: None (this user) unless root, which PostgreSQL refuses."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise ClusterError("PostgreSQL cannot run as root and this machine has neither a 'postgres' nor a 'nobody' user")


def _wait(ready, timeout: float, what: str, process: subprocess.Popen | None = None, log: Path | None = None,
          every: float = 0.3) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise ClusterError(f"{what}: the process ended with {process.returncode}" + (f"; see {log}" if log else ""))
        with contextlib.suppress(Exception):
            if ready():
                return
        time.sleep(every)
    raise ClusterError(f"{what}: not ready within {timeout:.0f} s" + (f"; see {log}" if log else ""))


def _http_ok(url: str, headers: dict[str, str] | None = None) -> bool:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=5) as response:
        return response.status == 200


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        state = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("State:"))
    except (OSError, StopIteration):
        return False
    return "zombie" not in state


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return ""


def _kill_group(pid: int | None, program: str, sig: int = signal.SIGKILL) -> None:
    """Signal the process group that ``pid`` leads, if ``pid`` still runs ``program`` (a pid read back from
    cluster.json may belong to another process by now)."""
    if pid and program in _cmdline(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)


def _pid_namespace(pid: int) -> str | None:
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{pid}/ns/pid")
    return None


def _in_namespace(namespace: str) -> list[int]:
    """Live processes of a PID namespace (as the ``pid:[inode]`` link names it)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _pid_namespace(int(entry.name)) == namespace and _alive(int(entry.name)):
            pids.append(int(entry.name))
    return pids


def _child_of(pid: int, timeout: float = 10.0) -> int | None:
    """The first child of ``pid`` (the PID 1 of the namespace ``unshare --fork`` made)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if children:
                return int(children[0])
        time.sleep(0.05)
    return None


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

    def client_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of a ``ray job submit`` (or ``ray list``) against this cluster."""
        env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("RAY_")}
        return {**env, "RAY_ADDRESS": self.dashboard_url, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}

    # -- lifecycle ------------------------------------------------------------------------------
    @classmethod
    def start(cls, root: Path, workers: int = 2, cpus_per_worker: float = 2, mlflow: bool = True,
              node_env: dict[str, str] | None = None, tie_to_parent: bool = False) -> "LocalCluster":
        """Start PostgreSQL and MLflow (unless ``mlflow`` is False), the head and ``workers`` worker
        nodes; everything started so far is stopped again when one part fails. ``node_env``: more
        variables for every Ray node (the head's driver sees them too). ``tie_to_parent``: every
        process ends when the calling process dies (a test's fixture), not only on ``stop()``."""
        root = Path(root).resolve()
        problem = isolation_problem()
        if problem:
            raise ClusterError(problem)
        if (root / STATE_FILE).is_file():
            raise ClusterError(f"a local cluster's state is in {root / STATE_FILE}: `down` it first, "
                               f"or use another root")
        cluster = cls(root=root, workers=workers, cpus_per_worker=cpus_per_worker, node_env=dict(node_env or {}),
                      tie_to_parent=tie_to_parent)
        cluster.shared.mkdir(parents=True, exist_ok=True)
        cluster.local = tempfile.mkdtemp(prefix="itrlab-", dir="/tmp" if os.access("/tmp", os.W_OK) else None)
        os.chmod(cluster.local, 0o711)  # PostgreSQL's user (root runs it as 'postgres') reaches its folder
        for folder in (cluster.head_dir, cluster.nodes_dir, cluster.mlflow_dir, cluster.pg_dir):
            folder.mkdir(mode=0o700)
        try:
            if mlflow:
                cluster._start_postgres()
                cluster._start_mlflow()  # it answers after ~15 s (schema migrations): the Ray nodes start meanwhile
            cluster._start_ray()
            if mlflow:
                log = cluster.root / "mlflow-server.log"
                _wait(lambda: _http_ok(f"{cluster.mlflow_uri}/health"), 120, "the MLflow server",
                      cluster._processes["mlflow"], log)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    @classmethod
    def load(cls, root: Path) -> "LocalCluster":
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

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """End every process this cluster started: each node's namespace, MLflow, PostgreSQL; delete the
        cluster's local folder (the shared storage stays)."""
        left = []
        for node in self.nodes:
            try:
                self._end_node(node)
            except ClusterError as err:
                left.append(str(err))
        _kill_group(self.mlflow_pid, "mlflow", signal.SIGTERM)
        self._wait_gone(self.mlflow_pid, 15)
        _kill_group(self.mlflow_pid, "mlflow")
        _kill_group(self.pg_pid, "postgres", signal.SIGINT)  # PostgreSQL's fast shutdown
        self._wait_gone(self.pg_pid, 15)
        _kill_group(self.pg_pid, "postgres")
        if self.local:
            shutil.rmtree(self.local, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            (self.root / STATE_FILE).unlink()
        if left:
            raise ClusterError("; ".join(left))

    @staticmethod
    def _wait_gone(pid: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.1)

    # -- PostgreSQL and MLflow --------------------------------------------------------------------
    def _popen(self, command: list[str], log: Path, **kwargs) -> subprocess.Popen:
        def preexec() -> None:
            if self.tie_to_parent:  # PR_SET_PDEATHSIG: SIGKILL when the starting thread's process dies
                import ctypes

                ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
        with open(log, "ab") as out:
            return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=preexec, **kwargs)

    def _start_postgres(self) -> None:
        binaries = postgres_bin()
        if binaries is None:
            raise ClusterError(f"PostgreSQL's server programs (initdb, postgres) are not installed "
                               f"(Debian: apt-get install postgresql; or set ${PG_BIN_ENV})")
        user = _service_user()
        folder = self.pg_dir
        self.pg_password = secrets.token_hex(16)
        (folder / "password").write_text(self.pg_password + "\n")
        if user:
            entry = pwd.getpwnam(user)
            for path in (folder, folder / "password"):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        as_user = {"user": user} if user else {}
        log = self.root / "postgres.log"
        done = subprocess.run([str(binaries / "initdb"), "-D", str(folder / "data"), "-U", "mlflow",
                               "--auth=scram-sha-256", f"--pwfile={folder / 'password'}", "-E", "UTF8", "--no-sync",
                               "--no-instructions"],
                              capture_output=True, text=True, timeout=120, cwd=folder, **as_user)
        if done.returncode != 0:
            raise ClusterError(f"initdb failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
        self.pg_port = free_port()
        # fsync off: a throwaway store, written on every metric
        process = self._popen([str(binaries / "postgres"), "-D", str(folder / "data"), "-p", str(self.pg_port),
                               "-k", str(folder), "-c", f"listen_addresses={LOOPBACK}", "-c", "fsync=off",
                               "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
                              log, cwd=folder, **as_user)
        self.pg_pid = process.pid
        env = {**os.environ, "PGPASSWORD": self.pg_password, "PGCONNECT_TIMEOUT": "5"}

        def created() -> bool:  # the database the manifests' URI names
            return subprocess.run([str(binaries / "createdb"), "-h", LOOPBACK, "-p", str(self.pg_port), "-U", "mlflow",
                                   "mlflow"], env=env, capture_output=True, timeout=30).returncode == 0
        _wait(created, 60, "PostgreSQL", process, log)

    @property
    def backend_store_uri(self) -> str:
        return f"postgresql://mlflow@{LOOPBACK}:{self.pg_port}/mlflow"  # the password: PGPASSWORD

    def mlflow_args(self, port: int) -> list[str]:
        """The server's arguments: k8s/base/mlflow.yaml's flags, with this machine's host, port, one
        worker, the local PostgreSQL and a folder for the S3 bucket."""
        return ["server", f"--host={LOOPBACK}", f"--port={port}", "--workers=1",
                f"--backend-store-uri={self.backend_store_uri}", "--serve-artifacts",
                f"--artifacts-destination={self.mlflow_dir / 'artifacts'}", f"--allowed-hosts={ALLOWED_HOSTS}"]

    def _start_mlflow(self) -> None:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AWS_"))}
        env.update(PGPASSWORD=self.pg_password, HOME=str(self.mlflow_dir))
        process = self._popen([str(BIN / "mlflow"), *self.mlflow_args(port)], self.root / "mlflow-server.log",
                              cwd=self.mlflow_dir, env=env)
        self._processes["mlflow"] = process
        self.mlflow_pid = process.pid
        self.mlflow_uri = f"http://{LOOPBACK}:{port}"

    # -- Ray nodes --------------------------------------------------------------------------------
    def _env_of(self, node: Node, home: Path, tmp: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("RAY_", "MLFLOW_", "PYTEST_", "ITRLAB_")) and k != "OMP_NUM_THREADS"}
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.token, HOME=str(home), TMPDIR=str(tmp),
                   PYTHONUNBUFFERED="1", ITRLAB_CONFIG_DIR=str(REPO / "configs"),
                   GLOO_SOCKET_IFNAME="lo",  # DDP's gloo on loopback, not the host name's address
                   PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")  # `python` is this one (the image's)
        if node.head and self.mlflow_uri:  # where `ray job submit` runs the driver
            env["MLFLOW_TRACKING_URI"] = self.mlflow_uri
        return {**env, **self.node_env}

    def _hidden_from_workers(self) -> list[Path]:
        return [self.head_dir, self.mlflow_dir, self.pg_dir]

    def _start_node(self, node: Node) -> None:
        node.dashboard_agent_port = free_port()
        if node.head:
            own = self.head_dir
            tmpfs = [("/dev/shm", "1g")]
        else:
            own = self.nodes_dir / node.name
            # over the others' folders an empty tmpfs of its own: a trial that writes under the driver's
            # paths (synthetic data at a relative dataset.root, say) writes into its own copy, as a pod does
            tmpfs = [(str(self.nodes_dir), self.node_tmpfs), ("/dev/shm", "1g"),
                     *((str(path), self.node_tmpfs) for path in self._hidden_from_workers())]
        temp, work, home = own / "tmp", own / "work", own / "home"
        command = [str(BIN / "ray"), "start", "--block", f"--node-ip-address={node.ip}", f"--node-name={node.name}",
                   f"--num-cpus={node.cpus:g}", "--num-gpus=0", f"--temp-dir={temp}",
                   f"--object-store-memory={self.object_store_bytes}",
                   f"--dashboard-agent-listen-port={node.dashboard_agent_port}", "--disable-usage-stats"]
        if node.head:
            command += ["--head", f"--port={self.gcs_port}", f"--dashboard-port={self.dashboard_port}",
                        f"--dashboard-host={LOOPBACK}", f"--ray-client-server-port={free_port()}"]
        else:
            command += [f"--address={self.gcs_address}"]
        spec = {"tmpfs": tmpfs, "mkdir": [str(temp), str(work), str(home)], "cwd": str(work), "command": command}
        log = self.root / f"node-{node.name}.log"
        process = self._popen([*unshare_command(), sys.executable, "-c", NODE_INIT, json.dumps(spec)], log,
                              cwd=self.root, env=self._env_of(node, home, temp))
        node.pid = process.pid
        node.init_pid = _child_of(process.pid) or 0
        node.namespace = _pid_namespace(node.init_pid) or "" if node.init_pid else ""
        self.nodes.append(node)
        self._processes[node.name] = process

    def _start_ray(self) -> None:
        self.gcs_port, self.dashboard_port = free_port(), free_port()
        head = Node("head", head=True, cpus=0, ip=node_ip(0))
        self._start_node(head)
        log = self.root / "node-head.log"
        _wait(lambda: _http_ok(f"{self.dashboard_url}/api/gcs_healthz"), 180, "the Ray head",
              self._processes["head"], log)
        for _ in range(self.workers):
            self._start_node(self._next_worker())
        self.save()
        self._wait_joined()

    def _next_worker(self) -> Node:
        index = max((int(n.name.removeprefix("worker")) for n in self.nodes if not n.head), default=0) + 1
        return Node(f"worker{index}", head=False, cpus=self.cpus_per_worker, ip=node_ip(index))

    def _wait_joined(self) -> None:
        running = {node.name for node in self.nodes if _alive(node.pid)}
        _wait(lambda: running <= {info["node_name"] for info in self.ray_nodes()}, 180,
              "the Ray worker nodes joining", every=1.0)
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
        return [node for node in self.nodes if not node.head and _alive(node.pid)]

    def ray_nodes(self, alive: bool = True) -> list[dict[str, Any]]:
        """The cluster's nodes as Ray's state API lists them (node_id, node_name, state, resources_total, ...)."""
        request = urllib.request.Request(f"{self.dashboard_url}/api/v0/nodes?limit=100&detail=true",
                                         headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            listed = json.loads(response.read())["data"]["result"]["result"]
        return [info for info in listed if not alive or info.get("state") == "ALIVE"]

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
        self._end_node(node, timeout)
        return node

    def _end_node(self, node: Node, timeout: float = 30.0) -> None:
        # only the processes that are still this node's (pids read back from cluster.json may be reused)
        ours = [pid for pid in (node.init_pid, node.pid) if pid and _pid_namespace(pid) is not None
                and (_pid_namespace(pid) == node.namespace or "unshare" in _cmdline(pid).split(" ", 1)[0])]
        for pid in ours:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while ((node.pid in ours and _alive(node.pid)) or (node.namespace and _in_namespace(node.namespace))) \
                and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(node.pid, os.WNOHANG)
            time.sleep(0.1)
        if node.namespace and _in_namespace(node.namespace):
            raise ClusterError(f"node {node.name}: processes left in its namespace after {timeout:.0f} s")

    # -- reporting ----------------------------------------------------------------------------------
    def describe(self) -> str:
        lines = [f"local Ray cluster under {self.root}",
                 f"  dashboard / job API : {self.dashboard_url}  (GCS {self.gcs_address}; token auth)",
                 f"  shared storage      : {self.shared}  (sweeps: --storage {self.shared / 'sweeps'}; "
                 f"data: dataset.root={self.shared / 'data'}/...)"]
        if self.mlflow_uri:
            lines.append(f"  MLflow              : {self.mlflow_uri}  (PostgreSQL on {LOOPBACK}:{self.pg_port}, "
                         f"artifacts served from {self.mlflow_dir / 'artifacts'})")
        for node in self.nodes:
            state = "running" if _alive(node.pid) else "gone"
            lines.append(f"  {node.name:<9} {'head' if node.head else 'worker'}  {node.cpus:g} CPU  "
                         f"node id {node.node_id or '?'}  pid {node.pid} ({state})")
        return "\n".join(lines)


# -- DDP across nodes -----------------------------------------------------------------------------

def _ddp_worker(loop_config: dict[str, Any]) -> None:
    """A Ray Train worker of the DDP check: notes its node on the shared storage, then trains as a
    sweep trial's TorchTrainer worker does (:func:`itrlab.sweep.distributed.worker_loop`)."""
    import ray
    import ray.train

    from itrlab.sweep.distributed import worker_loop

    rank = ray.train.get_context().get_world_rank()
    nodes = Path(loop_config["nodes_dir"])
    nodes.mkdir(parents=True, exist_ok=True)
    (nodes / f"rank{rank}").write_text(ray.get_runtime_context().get_node_id())
    worker_loop(loop_config)


def ddp_run(tree: dict[str, Any], placement: str, storage: Path, tracking_uri: str, name: str) -> dict[str, Any]:
    """Train the experiment ``tree`` as a two-worker DDP trial (gloo, one CPU each) whose workers Ray
    places by ``placement`` (``STRICT_SPREAD``: two nodes; ``STRICT_PACK``: one); its final metrics and
    the node of each rank. Rank 0 logs the run to MLflow (experiment ``name``)."""
    import ray.train
    from ray.train.torch import TorchConfig, TorchTrainer

    from itrlab.sweep.trial import TRIAL_TAG, TrialContext, trial_tags
    from itrlab.tracking import MlflowTracker, source_tags

    folder = storage / name
    context = TrialContext(tree, name, tracking_uri, parent_run_id="", sweep_name=name, storage_dir=str(folder),
                           source=tuple(source_tags().items()))
    trainer = TorchTrainer(
        _ddp_worker,
        train_loop_config={"params": {}, "context": context, "trial_id": name, "run_dir": str(folder / "local"),
                           "tags": dict(context.source) | trial_tags(name, name, {}, run_dir=str(folder)),
                           "nodes_dir": str(folder / "nodes")},
        torch_config=TorchConfig(backend="gloo"),
        scaling_config=ray.train.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1},
                                               placement_strategy=placement),
        run_config=ray.train.RunConfig(name=name, storage_path=str(folder / "ray")),
    )
    trainer.fit()
    nodes = [(folder / "nodes" / f"rank{rank}").read_text() for rank in range(2)]
    # the run's metrics as MLflow holds them (the last epoch's validation, the test table, ...)
    tracker = MlflowTracker(name, tracking_uri)
    run_id = tracker.find_run({TRIAL_TAG: name})
    run = tracker.client.get_run(run_id)
    return {"name": name, "placement": placement, "nodes": nodes, "run_id": run_id, "status": run.info.status,
            "metrics": dict(run.data.metrics)}


def probe_workers(paths: Sequence[str]) -> dict[str, dict[str, Any]]:
    """What each live worker node sees of ``paths`` (run from a driver on the head): per node id, for each
    path, None where it does not exist, else its entries."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0)
    def look(wanted: list[str]) -> dict[str, Any]:
        return {path: sorted(os.listdir(path)) if os.path.isdir(path) else None for path in wanted}

    head = ray.get_runtime_context().get_node_id()
    workers = [node["NodeID"] for node in ray.nodes() if node["Alive"] and node["NodeID"] != head]
    return {node: ray.get(look.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
                          .remote(list(paths))) for node in workers}


def ddp_check(storage: Path, overrides: Sequence[str] = (),
              experiment: str = "dbl_synthetic_tiny") -> dict[str, Any]:
    """The same tiny DDP trial on two nodes and on one (run as a Ray job on the cluster: its driver on
    the head); writes and returns both results (``<storage>/ddp_check.json``), with what the worker
    nodes see of the driver's working directory and of the storage."""
    import ray

    from itrlab.sweep.cluster import init_ray
    from itrlab.sweep.runner import base_tree
    from itrlab.sweep.trial import trial_config
    from itrlab.tracking import check_tracking_store, resolve_tracking_uri
    from itrlab.train.experiment import generate_if_synthetic

    storage = Path(storage).resolve()
    storage.mkdir(parents=True, exist_ok=True)
    tree = base_tree(SimpleNamespace(experiment=experiment, overrides=list(overrides)), [])
    generate_if_synthetic(trial_config(tree, {}))  # once, on the shared storage
    tracking_uri = check_tracking_store(resolve_tracking_uri())
    init_ray(tracking_uri)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    try:
        # the driver's working directory (the job's, on the head's disk) and the storage, as workers see them
        seen = probe_workers([os.getcwd(), str(storage)])
        runs = {placement: ddp_run(tree, placement, storage, tracking_uri, f"ddp_{placement.lower()}_{stamp}")
                for placement in ("STRICT_SPREAD", "STRICT_PACK")}
    finally:
        ray.shutdown()
    report = {"experiment": experiment, "overrides": list(overrides), "runs": runs, "driver_cwd": os.getcwd(),
              "workers_see": seen}
    (storage / "ddp_check.json").write_text(json.dumps(report, indent=2))
    for placement, run in runs.items():
        print(f"{placement}: ranks on nodes {run['nodes']}; test_rsum {run['metrics'].get('test_rsum')!r}",
              flush=True)
    return report


# -- command line ------------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jobs/local_cluster.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start PostgreSQL, MLflow, a Ray head and worker nodes under --root")
    down = sub.add_parser("down", help="stop every process of the cluster under --root")
    status = sub.add_parser("status", help="the cluster's addresses and nodes")
    for command in (up, down, status):
        command.add_argument("--root", default="runs/local_cluster",
                             help="the cluster's folder: its state, logs and shared storage (default: %(default)s)")
    up.add_argument("--workers", type=int, default=2, help="worker nodes (default: %(default)s)")
    up.add_argument("--cpus-per-worker", type=float, default=2,
                    help="logical CPUs of each worker node (default: %(default)s)")
    up.add_argument("--no-mlflow", action="store_true", help="no PostgreSQL and MLflow server")
    ddp = sub.add_parser("ddp", help="(as a Ray job on the cluster) the same tiny DDP trial on two nodes and on one")
    ddp.add_argument("--storage", required=True, help="the shared storage folder")
    ddp.add_argument("--experiment", default="dbl_synthetic_tiny")
    ddp.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            cluster = LocalCluster.start(Path(args.root), workers=args.workers, cpus_per_worker=args.cpus_per_worker,
                                         mlflow=not args.no_mlflow)
            token = f"$(python -c \"import json; print(json.load(open('{cluster.root / STATE_FILE}'))['token'])\")"
            print(cluster.describe())
            print(f"\nsubmit a sweep:\n  RAY_AUTH_MODE=token RAY_AUTH_TOKEN={token} \\\n"
                  f"  ray job submit --address {cluster.dashboard_url} --working-dir . -- python jobs/sweep_dbl.py "
                  f"--preset smoke --storage {cluster.shared / 'sweeps'} "
                  f"dataset.root={cluster.shared / 'data' / 'synthetic' / 'small'}\n"
                  f"stop it: jobs/local_cluster.py down --root {args.root}")
        elif args.command == "down":
            LocalCluster.load(Path(args.root)).stop()
            print(f"stopped the local cluster under {Path(args.root).resolve()}")
        elif args.command == "status":
            cluster = LocalCluster.load(Path(args.root))
            print(cluster.describe())
            with contextlib.suppress(Exception):
                alive = cluster.ray_nodes()
                print(f"  Ray lists {len(alive)} live node(s): {', '.join(n['node_name'] for n in alive)}")
        else:
            ddp_check(Path(args.storage), args.overrides, args.experiment)
    except ClusterError as err:
        print(f"itrlab: {err}", file=sys.stderr)
        return 1
    return 0
