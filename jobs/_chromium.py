"""The MLflow UI as a person first sees it: the UI started by the command itrlab prints (:func:`mlflow_ui`), and
headless Chromium (:class:`Browser`) with a fresh profile, as on a browser's first visit (MLflow's default
view, its Assistant panel open), driven over the DevTools protocol: open a page in a window of a given width,
wait for a state of the page (a script's answer, never a time), measure it, save a screenshot.

Used by ``jobs/mlflow_screenshots.py`` (the docs' screenshots), beside it; not part of the installed package.
Nothing here imports MLflow: the UI runs as a program, Chromium as another (``apt-get install chromium``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from itrlab.errors import UserInputError
from itrlab.interrupts import stop_process_group
from itrlab.tracking.store import ui_command

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
NEEDS_CHROMIUM = "needs headless Chromium: apt-get install chromium"
HEIGHT = 1000  # the window's height in pixels (a laptop's browser window)


def chromium() -> str | None:
    """The Chromium program on PATH, or None."""
    return next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(ready, timeout: float, what: str, process: subprocess.Popen, log: Path, every: float = 0.3):
    """``ready()``'s first true answer (an exception counts as none) within ``timeout`` seconds; a RuntimeError
    naming ``what`` and the end of ``log`` when ``process`` ends first or the time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        with contextlib.suppress(Exception):
            if answer := ready():
                return answer
        time.sleep(every)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    state = f"ended with status {process.returncode}" if process.poll() is not None else f"not within {timeout:g} s"
    raise RuntimeError(f"{what}: {state}; the end of {log}:\n{tail}")


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the process group ``process`` leads, SIGKILL after 15 s."""
    stop_process_group(process, 15, 15)


def _answers(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status == 200


@contextlib.contextmanager
def mlflow_ui(tracking_uri: str, folder: Path, timeout: float = 600) -> Iterator[str]:
    """The MLflow UI on ``tracking_uri``, started by the command a training or a sweep prints
    (:func:`~itrlab.tracking.store.ui_command`) on a free loopback port, its output in ``folder/mlflow-ui.log``;
    yields its address once it answers its health check."""
    port = _free_port()
    words = shlex.split(ui_command(tracking_uri, port))
    env = dict(word.split("=", 1) for word in words if re.fullmatch(r"[A-Z_]+=.*", word))
    command = [word for word in words if word.split("=", 1)[0] not in env]
    if os.sep in command[0]:  # the printed `.venv/bin/mlflow` is the caller's, not the log folder's
        command[0] = str(Path(command[0]).resolve())
    log = folder / "mlflow-ui.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, cwd=folder, start_new_session=True, env={**os.environ, **env}
        )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: _answers(f"{base}/health"), timeout, "the MLflow UI", process, log)
        yield base
    finally:
        _stop(process)


class Browser:
    """Headless Chromium with a profile of its own, one page, ``width`` x :data:`HEIGHT` pixels; close it
    (or use it as a context manager)."""

    def __init__(self, width: int, folder: Path, timeout: float = 120):
        program = chromium()
        if program is None:
            raise UserInputError(f"no Chromium on PATH ({', '.join(CHROMIUM_NAMES)}): {NEEDS_CHROMIUM}")
        self.width, self.timeout = width, timeout
        self.profile = Path(tempfile.mkdtemp(prefix="itrlab-chromium-"))
        self.log = folder / f"chromium-{width}.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [
                    program,
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--no-first-run",
                    "--hide-scrollbars",
                    "--remote-debugging-port=0",
                    f"--user-data-dir={self.profile}",
                    f"--window-size={width},{HEIGHT}",
                    "about:blank",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._loop = asyncio.new_event_loop()
        self._calls = 0
        try:
            address = _wait(self._devtools_address, timeout, "headless Chromium", self.process, self.log)
            self._loop.run_until_complete(self._connect(address))
            self.call(
                "Emulation.setDeviceMetricsOverride", width=width, height=HEIGHT, deviceScaleFactor=1, mobile=False
            )
        except BaseException:
            self.close()
            raise

    def _devtools_address(self) -> str | None:
        found = re.search(r"DevTools listening on (ws://\S+)", self.log.read_text(errors="replace"))
        return found.group(1) if found else None

    async def _connect(self, address: str) -> None:
        """The browser's own DevTools socket (its frames are targets of their own), and a session on its page."""
        import aiohttp  # Ray's dashboard's dependency (ray[default])

        self._session = aiohttp.ClientSession()
        self._socket = await self._session.ws_connect(address, max_msg_size=0)
        self._page = None
        targets = (await self._call("Target.getTargets", {}, None))["targetInfos"]
        page = next(target["targetId"] for target in targets if target["type"] == "page")
        self._page = (await self._call("Target.attachToTarget", {"targetId": page, "flatten": True}, None))["sessionId"]

    def call(self, method: str, session: str | None = None, **params) -> dict:
        """One DevTools command to the page, or to the target attached as ``session``; its result (a
        RuntimeError for its error)."""
        session = session or (None if method.startswith("Target.") else self._page)  # Target: the browser's
        return self._loop.run_until_complete(asyncio.wait_for(self._call(method, params, session), self.timeout))

    async def _call(self, method: str, params: dict, session: str | None) -> dict:
        self._calls += 1
        ident = self._calls
        await self._socket.send_json(
            {"id": ident, "method": method, "params": params, **({"sessionId": session} if session else {})}
        )
        async for message in self._socket:
            answer = json.loads(message.data)
            if answer.get("id") == ident:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]
        raise RuntimeError(f"{method}: Chromium closed the connection")

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, script: str, frame: str | None = None) -> Any:
        """The value of the JavaScript expression ``script`` in the page, or in its frame ``frame`` (a target id
        of :meth:`frames`)."""
        session = self.call("Target.attachToTarget", targetId=frame, flatten=True)["sessionId"] if frame else None
        answer = self.call("Runtime.evaluate", session, expression=script, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in answer:
            raise RuntimeError(f"{script[:80]}...: {answer['exceptionDetails'].get('text')}")
        return answer["result"].get("value")

    def frames(self) -> list[str]:
        """The target ids of the page's frames that run in processes of their own: MLflow shows an HTML artifact
        in a sandboxed frame (another origin, so another process)."""
        return [
            target["targetId"] for target in self.call("Target.getTargets")["targetInfos"] if target["type"] == "iframe"
        ]

    def wait_for(self, script: str, what: str, frame_of: bool = False) -> Any:
        """The first true value of ``script`` (in the page, or with ``frame_of`` in its first frame that answers),
        asked every half second until :attr:`timeout`; a RuntimeError naming ``what`` otherwise."""

        def answer():
            if not frame_of:
                return self.evaluate(script)
            return next((value for frame in self.frames() if (value := self.evaluate(script, frame))), None)

        return _wait(answer, self.timeout, f"{what} (in Chromium, {self.width} px)", self.process, self.log, every=0.5)

    def screenshot(self, path: Path) -> Path:
        """The window as it shows now, a PNG at ``path``."""
        shot = self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if getattr(self, "_session", None) is not None:
                self._loop.run_until_complete(self._session.close())
        self._loop.close()
        _stop(self.process)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
