"""Busy is not broken, in the check that runs before a training or a sweep starts
(:func:`itrlab.tracking.check_tracking_store`): a refused connection fails at once, whatever digits the
port holds; an HTTP 502, 503 or 504 is waited for (real busy servers: tests/test_faults_busy.py)."""

from __future__ import annotations

import socket
import time

import pytest

from itrlab.errors import UserInputError
from itrlab.tracking import check_tracking_store
from itrlab.tracking.store import BUSY, WAIT_ENV


def dead_port_with(digits: str) -> int:
    """A free loopback port whose number holds ``digits`` (nothing listens there)."""
    for port in (int(f"{digits}{tail}") for tail in range(10, 100)):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.skip(f"no free port with {digits} in it")


@pytest.mark.parametrize("digits", ["502", "503", "504"])
def test_a_refused_port_that_reads_like_a_status_code_fails_at_once(digits, monkeypatch):
    """Nothing listens on port 503xx: one line at once, not "busy" and two minutes of asking again (a
    regular expression took the port's digits for HTTP 503; the CLI test failed on such a port)."""
    monkeypatch.setenv(WAIT_ENV, "60")
    uri = f"http://127.0.0.1:{dead_port_with(digits)}"
    started = time.monotonic()
    with pytest.raises(UserInputError, match="does not work: connection refused"):
        check_tracking_store(uri)
    assert time.monotonic() - started < 20


@pytest.mark.parametrize(
    "text, busy",
    [
        (
            "503 Server Error: Service Unavailable for url: http://127.0.0.1:5000/api/2.0/mlflow/experiments/search",
            True,
        ),
        ("Max retries exceeded with url: /api (Caused by ResponseError('too many 503 error responses'))", True),
        ("API request to http://127.0.0.1:5000/ failed with error code 504 != 200", True),
        (
            "HTTPConnectionPool(host='127.0.0.1', port=50321): Max retries exceeded ([Errno 111] Connection refused)",
            False,
        ),
        ("HTTPConnectionPool(host='127.0.0.1', port=5032): Failed to establish a new connection", False),
        ("http://10.0.5.503/api: Name or service not known", False),
    ],
)
def test_status_codes_count_as_busy_and_port_numbers_do_not(text, busy):
    assert bool(BUSY.search(text)) is busy
