"""The local cluster's MLflow server: ``mlflow server`` with the flags of ``k8s/base/mlflow.yaml``.

Only the host, port, worker count and a local folder for the S3 bucket differ from the manifest:
``--backend-store-uri postgresql://mlflow@...`` (the password in ``PGPASSWORD``), ``--serve-artifacts
--artifacts-destination`` and ``--allowed-hosts``. Runs, metrics and artifacts go through the server, so
no Ray node needs the store's files. (It starts MLflow as a program; only ``itrlab.tracking`` imports it.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from cluster_harness.processes import LOOPBACK, free_port, http_ok, popen, stop_group, wait_until
from itrlab.tracking.store import JOB_EXECUTION_ENV

BIN = Path(sys.executable).parent  # the environment's programs: mlflow, ray
ALLOWED_HOSTS = "localhost,localhost:*,127.0.0.1,127.0.0.1:*"  # the manifest's loopback entries
LOG = "mlflow-server.log"


@dataclass
class MlflowServer:
    uri: str
    process: subprocess.Popen  # leads its own process group


def mlflow_args(port: int, backend_store_uri: str, folder: Path) -> list[str]:
    """The server's arguments: k8s/base/mlflow.yaml's flags, with this machine's host, ``port``, one
    worker, the local PostgreSQL and ``<folder>/artifacts`` for the S3 bucket."""
    return [
        "server",
        f"--host={LOOPBACK}",
        f"--port={port}",
        "--workers=1",
        f"--backend-store-uri={backend_store_uri}",
        "--serve-artifacts",
        f"--artifacts-destination={folder / 'artifacts'}",
        f"--allowed-hosts={ALLOWED_HOSTS}",
    ]


def start_mlflow(
    folder: Path, logs: Path, backend_store_uri: str, pg_password: str, tie_to_parent: bool = False
) -> MlflowServer:
    """Start the server (``folder``: its HOME and artifacts; its log under ``logs``) without waiting: it
    answers after ~15 s of schema migrations, time the caller uses to start the Ray nodes (:func:`wait_mlflow`)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AWS_"))}
    env.update(PGPASSWORD=pg_password, HOME=str(folder), **JOB_EXECUTION_ENV)  # no job runner
    process = popen(
        [str(BIN / "mlflow"), *mlflow_args(port, backend_store_uri, folder)],
        logs / LOG,
        tie_to_parent,
        cwd=folder,
        env=env,
    )
    return MlflowServer(f"http://{LOOPBACK}:{port}", process)


def wait_mlflow(server: MlflowServer, logs: Path, timeout: float = 120) -> None:
    """Until the server answers its health check; a ClusterError if it ends or stays silent."""
    wait_until(lambda: http_ok(f"{server.uri}/health"), timeout, "the MLflow server", server.process, logs / LOG)


def stop_mlflow(pid: int) -> None:
    """SIGTERM to the server's process group (gunicorn/uvicorn and its workers), SIGKILL after 15 s."""
    stop_group(pid, "mlflow", signal.SIGTERM)
