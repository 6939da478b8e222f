"""The local cluster's PostgreSQL: MLflow's backend store, a server of its own on loopback.

``initdb`` in a fresh data folder (user ``mlflow``, password authentication, the password in a file of
that folder), a free port, its Unix socket in that folder, then the database ``mlflow`` that the
manifests' URI names. As root it runs as the ``postgres`` user (or ``nobody``): PostgreSQL refuses to run
as root. fsync is off: the store is thrown away with the cluster.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cluster_harness.processes import LOOPBACK, ClusterError, free_port, popen, stop_group, wait_until

PG_BIN_ENV = "ITRLAB_PG_BIN"


@dataclass(frozen=True)
class PostgresServer:
    port: int
    pid: int  # leads its own process group
    password: str  # of the user ``mlflow``; clients get it in PGPASSWORD, never in a URI


def postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server programs (``initdb``, ``postgres``): ``$ITRLAB_PG_BIN``, else
    ``initdb`` on the PATH, else Debian's newest ``/usr/lib/postgresql/<version>/bin``; None without."""
    if os.environ.get(PG_BIN_ENV):
        folder = Path(os.environ[PG_BIN_ENV])
        return folder if (folder / "initdb").is_file() else None
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0
    )
    return versions[-1].parent if versions else None


def service_user() -> str | None:
    """Who runs PostgreSQL: None (this user) unless root, which PostgreSQL refuses."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise ClusterError("PostgreSQL cannot run as root and this machine has neither a 'postgres' nor a 'nobody' user")


def backend_store_uri(port: int) -> str:
    """MLflow's ``--backend-store-uri`` for the server on ``port`` (the password: PGPASSWORD)."""
    return f"postgresql://mlflow@{LOOPBACK}:{port}/mlflow"


def start_postgres(folder: Path, log: Path, tie_to_parent: bool = False) -> PostgresServer:
    """A new PostgreSQL in ``folder`` (its data, socket and password file), answering with the database
    ``mlflow`` created; its output appended to ``log``."""
    binaries = postgres_bin()
    if binaries is None:
        raise ClusterError(
            f"PostgreSQL's server programs (initdb, postgres) are not installed "
            f"(Debian: apt-get install postgresql; or set ${PG_BIN_ENV})"
        )
    user = service_user()
    password = secrets.token_hex(16)
    (folder / "password").write_text(password + "\n")
    if user:
        entry = pwd.getpwnam(user)
        for path in (folder, folder / "password"):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    as_user = {"user": user} if user else {}
    done = subprocess.run(
        [
            str(binaries / "initdb"),
            "-D",
            str(folder / "data"),
            "-U",
            "mlflow",
            "--auth=scram-sha-256",
            f"--pwfile={folder / 'password'}",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=folder,
        **as_user,
    )
    if done.returncode != 0:
        raise ClusterError(f"initdb failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    port = free_port()
    # fsync off: a throwaway store, written on every metric
    process = popen(
        [
            str(binaries / "postgres"),
            "-D",
            str(folder / "data"),
            "-p",
            str(port),
            "-k",
            str(folder),
            "-c",
            f"listen_addresses={LOOPBACK}",
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
        ],
        log,
        tie_to_parent,
        cwd=folder,
        **as_user,
    )
    server = PostgresServer(port, process.pid, password)
    env = {**os.environ, "PGPASSWORD": password, "PGCONNECT_TIMEOUT": "5"}

    def created() -> bool:  # the database the manifests' URI names
        return (
            subprocess.run(
                [str(binaries / "createdb"), "-h", LOOPBACK, "-p", str(port), "-U", "mlflow", "mlflow"],
                env=env,
                capture_output=True,
                timeout=30,
            ).returncode
            == 0
        )

    try:
        wait_until(created, 60, "PostgreSQL", process, log)
    except BaseException:
        stop_postgres(server.pid)
        raise
    return server


def stop_postgres(pid: int) -> None:
    """PostgreSQL's fast shutdown (SIGINT), SIGKILL after 15 s."""
    stop_group(pid, "postgres", signal.SIGINT)
