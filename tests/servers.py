"""Real servers for tests, started on loopback ports and stopped afterwards."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from cluster_harness.processes import free_port  # noqa: F401  # one port never given twice
from itrlab.tracking.store import JOB_EXECUTION_ENV

BIN = Path(sys.executable).parent


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


def stop(process: subprocess.Popen) -> None:
    """Terminate a server process, killing it if it does not exit within 15 s."""
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()


@contextlib.contextmanager
def serve(
    command: list[str], workdir: Path, name: str, health_path: str, timeout: float, env: dict[str, str] | None = None
) -> Iterator[str]:
    """Run ``command`` (which serves HTTP on ``url``'s port) until the block ends; yields the URL.

    ``command`` holds ``{port}``, filled with a free loopback port; output goes to ``<name>.log``; ``env``
    is added to this process's environment.
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(workdir / f"{name}.log", "wb") as log:
        process = subprocess.Popen(
            [arg.format(port=port) for arg in command],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env={**os.environ, **(env or {})},
        )
        try:
            wait_http(f"{url}{health_path}", timeout=timeout, process=process)
            yield url
        finally:
            stop(process)


def mlflow_server(workdir: Path, extra_args: tuple[str, ...] = ()):
    """``mlflow server`` with a SQLite backend and served artifacts, its job runner off as every server and
    UI the project starts or documents (7 huey consumers, about 40 CPU-seconds here); yields its http URI."""
    return serve(
        [
            str(BIN / "mlflow"),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{workdir / 'server.db'}",
            "--serve-artifacts",
            "--artifacts-destination",
            str(workdir / "artifacts"),
            *extra_args,
        ],
        workdir,
        "mlflow-server",
        "/health",
        timeout=180,  # 85-90 s seen at load 15
        env=JOB_EXECUTION_ENV,
    )


def moto_server(workdir: Path):
    """A real S3 API (``moto`` in server mode) on a loopback port; yields its endpoint URL.

    Any access key is accepted; the data lives in the server's memory until it stops.
    """
    return serve(
        [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", "{port}"], workdir, "moto-server", "/moto-api/", timeout=60
    )


@contextlib.contextmanager
def busy_proxy(target: str, busy) -> Iterator[str]:
    """A loopback HTTP server in front of ``target`` that answers 503 (a busy shared server: up, but refusing
    work) while ``busy()`` holds, and forwards every other request; yields its URL."""
    import http.server
    import threading
    import urllib.error

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if busy():
                self.send_response(503)
                self.send_header("Content-Length", "4")
                self.end_headers()
                self.wfile.write(b"busy")
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
            request = urllib.request.Request(
                target + self.path, data=body or None, headers=headers, method=self.command
            )
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    status, data, kind = response.status, response.read(), response.headers.get("Content-Type")
            except urllib.error.HTTPError as err:
                status, data, kind = err.code, err.read(), err.headers.get("Content-Type")
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            if kind:
                self.send_header("Content-Type", kind)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer  # PUT: artifacts (mlflow-artifacts)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
