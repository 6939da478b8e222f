"""Real servers for tests, started on loopback ports and stopped afterwards."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_http(url: str, timeout: float, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {timeout} s")


@contextlib.contextmanager
def mlflow_server(workdir: Path, extra_args: tuple[str, ...] = ()) -> Iterator[str]:
    """``mlflow server`` with a SQLite backend and served artifacts; yields its http URI."""
    port = free_port()
    log = open(workdir / "mlflow-server.log", "wb")
    process = subprocess.Popen(
        [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{workdir / 'server.db'}",
         "--serve-artifacts", "--artifacts-destination", str(workdir / "artifacts"), *extra_args],
        stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{uri}/health", timeout=90, process=process)
        yield uri
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@contextlib.contextmanager
def moto_server(workdir: Path) -> Iterator[str]:
    """A real S3 API (``moto`` in server mode) on a loopback port; yields its endpoint URL.

    Any access key is accepted; the data lives in the server's memory until it stops.
    """
    port = free_port()
    log = open(workdir / "moto-server.log", "wb")
    process = subprocess.Popen([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                               stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/moto-api/", timeout=60, process=process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
