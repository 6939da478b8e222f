"""An archive fetched over http(s), resumably.

The bytes go to ``<folder>/<name>.part`` (``<name>``: the URL's last path part) beside a record of the URL, the server's
validator (``ETag`` or ``Last-Modified``) and length, and the finished file is renamed to ``<folder>/<name>``, so a file
of that name is always whole. A connection that drops or goes quiet after some bytes is asked for the rest with a
``Range`` request (``If-Range``: the same file, else the whole again); a run that stops leaves the part file, which the
next run with the same URL continues. A server that answers an error, or nothing within the timeout, is one line.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

from itrlab.errors import UserInputError, disk_full, no_space
from itrlab.files import atomic_write_json

BLOCK = 1 << 20
MAX_REQUESTS = 64  # per run; each request after the first must have been preceded by one that brought bytes
QUIET, DROPPED = (
    "quiet",
    "dropped",
)  # why a response ended early: the timeout passed with nothing, the connection closed


class DownloadError(UserInputError):
    """The server answered an error, or nothing in time, or the disk filled: one line; the same command
    resumes what was fetched."""


@dataclass
class Fetched:
    """What a download did: its file, its size, the bytes fetched this run and where it started."""

    path: Path
    size: int
    fetched: int = 0
    resumed_at: int = 0
    requests: int = 0


def file_name(url: str) -> str:
    """The name the download gets: the URL path's last part (``download`` when it has none)."""
    name = PurePosixPath(unquote(urlsplit(url).path)).name
    return name if name not in ("", ".", "..") else "download"


def _record(part: Path) -> Path:
    return part.with_name(part.name + ".json")


def _read_record(path: Path) -> dict:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def size_text(size: int) -> str:
    """A size in bytes as a person reads it: ``4,096 bytes``, ``134.2 MB``."""
    return f"{size:,} bytes" if size < 1e6 else f"{size / 1e6:,.1f} MB"


def download(
    url: str, folder: Path, timeout: float, progress: bool = True, say: Callable[[str], None] = lambda line: None
) -> Fetched:
    """Fetch ``url`` into ``folder`` (resuming a part file of the same URL); returns what was done."""
    folder.mkdir(parents=True, exist_ok=True)
    name = file_name(url)
    target, part = folder / name, folder / f"{name}.part"
    record = _read_record(_record(part))
    if record.get("url") == url and record.get("complete") and target.is_file():
        return Fetched(target, target.stat().st_size)
    if record.get("url") != url:
        record = {"url": url}
    offset = part.stat().st_size if part.is_file() and record.get("size") else 0
    fetched = Fetched(target, 0, resumed_at=offset)
    while True:
        got, ended, size = _request(url, part, record, offset, timeout, progress, fetched)
        offset = part.stat().st_size
        if ended is None:
            break
        if not got:
            raise DownloadError(_quiet(url, timeout, offset) if ended == QUIET else _dropped(url, offset, size))
        if fetched.requests >= MAX_REQUESTS:
            raise DownloadError(_dropped(url, offset, size))
        say(
            f"download: the connection ended at {size_text(offset)}"
            + (f" of {size_text(size)}" if size else "")
            + "; asking for the rest"
        )
    part.replace(target)
    atomic_write_json(_record(part), {**record, "complete": True})
    fetched.size = target.stat().st_size
    return fetched


def _request(
    url: str, part: Path, record: dict, offset: int, timeout: float, progress: bool, fetched: Fetched
) -> tuple[int, str | None, int | None]:
    """One request for the bytes from ``offset`` on, appended to ``part`` (written anew when the server sends the whole
    file): (bytes received, why it ended early (:data:`QUIET`, :data:`DROPPED`) or None, the file's size when the server
    says it)."""
    headers = {"User-Agent": "itrlab", "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
        if record.get("validator"):
            headers["If-Range"] = record["validator"]
    fetched.requests += 1
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as err:
        if err.code == 416 and offset and offset == record.get("size"):  # the part file is whole already
            return 0, None, offset
        kept = f"; the {size_text(offset)} fetched so far are kept: the same command resumes" if offset else ""
        raise DownloadError(f"--from {url}: the server answered {err.code} {err.reason}{kept}") from None
    except urllib.error.URLError as err:
        if isinstance(err.reason, TimeoutError):
            raise DownloadError(_quiet(url, timeout, offset)) from None
        raise DownloadError(f"--from {url}: cannot reach the server ({err.reason})") from None
    except TimeoutError:
        raise DownloadError(_quiet(url, timeout, offset)) from None
    except (ConnectionError, http.client.HTTPException) as err:
        raise DownloadError(f"--from {url}: the server closed the connection without an answer ({err})") from None
    with response:
        length = response.headers.get("Content-Length")
        length = int(length) if length and length.isdigit() else None
        if response.status == 206 and offset:
            start = _range_start(response.headers.get("Content-Range"))
            if start != offset:
                raise DownloadError(f"--from {url}: the server sent bytes from {start}, not from {offset} as asked")
        else:
            offset = fetched.resumed_at = 0  # the whole file: the server ignored the range, or the file changed
        size = offset + length if length is not None else None
        validator = response.headers.get("ETag") or response.headers.get("Last-Modified")
        record.update(url=url, size=size, validator=validator)
        atomic_write_json(_record(part), record)
        got, ended = _receive(response, part, offset, size, progress, fetched)
        if ended is None and size is not None and offset + got < size:
            ended = DROPPED
        return got, ended, size


def _receive(
    response, part: Path, offset: int, size: int | None, progress: bool, fetched: Fetched
) -> tuple[int, str | None]:
    """Append the response's bytes to ``part``: (bytes received, why it ended early or None)."""
    from tqdm import tqdm

    got, ended = 0, None
    try:
        with (
            open(part, "ab" if offset else "wb") as out,
            tqdm(
                total=size,
                initial=offset,
                unit="B",
                unit_scale=True,
                desc="download",
                disable=not progress,
                leave=False,
            ) as bar,
        ):
            while True:
                try:
                    block = response.read(BLOCK)
                except TimeoutError:
                    ended = QUIET
                    break
                except (ConnectionError, http.client.HTTPException):
                    ended = DROPPED
                    break
                if not block:
                    break
                out.write(block)
                got += len(block)
                fetched.fetched += len(block)
                bar.update(len(block))
    except OSError as err:
        if disk_full(err):
            raise DownloadError(
                f"{no_space(part.parent)}: the download stopped at {size_text(offset + got)}"
                + (f" of {size_text(size)}" if size else "")
                + "; free space there and run the same command: it resumes"
            ) from None
        raise
    return got, ended


def _dropped(url: str, offset: int, size: int | None) -> str:
    of = f" of {size_text(size)}" if size else ""
    return f"--from {url}: the connection ended at {size_text(offset)}{of}; the same command resumes from there"


def _range_start(header: str | None) -> int | None:
    """The first byte a ``Content-Range: bytes a-b/n`` header says it holds."""
    try:
        return int(header.split()[1].split("-")[0]) if header else None
    except (IndexError, ValueError):
        return None


def _quiet(url: str, timeout: float, offset: int) -> str:
    kept = f"; the {size_text(offset)} fetched so far are kept" if offset else ""
    return (
        f"--from {url}: the server sent nothing for {timeout:g} s (read timeout; --timeout sets it){kept}; "
        f"the same command tries again"
    )


__all__ = ["DownloadError", "Fetched", "download", "file_name", "size_text"]
