"""Small file helpers shared by every layer: atomic writes (a temporary sibling, fsync, rename: a process killed
mid-write never leaves a truncated file), JSON reading (:func:`read_json`; typed by a pydantic schema:
:func:`read_record`), regular files only (:func:`regular_file`: a FIFO would block a reader forever), a file's sha256,
weights-only torch loading (:func:`load_tensors`), advisory locks (:func:`file_lock`) and a folder's check before a run
writes to it (:func:`check_writable_dir`). Each failure is one line naming the file."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from itrlab.errors import DataError, UserInputError


class _Writes:
    """A binary file as ``write`` sees it, keeping the first OSError a write raised: a writer that turns it into
    an error of its own (torch's zip writer says ``unexpected pos 48384 vs 48336`` on a full disk) does not
    hide it."""

    def __init__(self, file: BinaryIO):
        self.file, self.error = file, None

    def write(self, data) -> int:
        try:
            return self.file.write(data)
        except OSError as err:
            self.error = self.error or err
            raise

    def __getattr__(self, name: str):
        return getattr(self.file, name)


def atomic_write_bytes(path: str | Path, write: Callable[[BinaryIO], Any]) -> None:
    """Call ``write(f)`` on a temporary sibling of ``path``, fsync it, and rename it over ``path``. An OSError
    of the file system (a full disk) is raised as itself, with the file's name, whatever ``write`` made of it."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            writes = _Writes(f)
            try:
                write(writes)
            except Exception as err:
                if writes.error is None or err is writes.error:
                    raise
                raise writes.error from None
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if err.filename is None:  # a write's or fsync's error names no file: this one
            err.filename = str(path)
        raise
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, lambda f: f.write(text.encode("utf-8")))


def atomic_write_json(path: str | Path, payload: Any, indent: int | None = 2) -> None:
    atomic_write_text(path, json.dumps(payload, indent=indent) + "\n")


def atomic_copy(source: str | Path, target: str | Path) -> None:
    """Copy the file ``source`` to ``target`` as :func:`atomic_write_bytes` writes: ``target`` is the old file or
    the whole copy, never a part of it."""
    with open(source, "rb") as read:
        atomic_write_bytes(target, lambda f: shutil.copyfileobj(read, f, 1 << 20))


FILE_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def regular_file(path: str | Path, what: str = "file") -> os.stat_result:
    """The status of ``path`` (links followed) when it is a regular file; DataError naming it otherwise, before
    anything opens it."""
    path = Path(path)
    try:
        status = path.stat()
    except FileNotFoundError:
        raise DataError(path, f"{what} not found") from None
    except OSError as exc:
        raise DataError(path, f"cannot read the {what}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(status.st_mode):
        kind = FILE_KINDS.get(stat.S_IFMT(status.st_mode), "not a regular file")
        raise DataError(path, f"the {what} is {kind}, not a regular file; refused without opening it")
    return status


def sha256_file(path: str | Path) -> str:
    """The sha256 of the bytes of the file ``path`` (hex), read a MiB at a time."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_json(path: str | Path, what: str = "file", max_bytes: int | None = None) -> Any:
    """The JSON value in ``path``; DataError naming the file (``what``, and the line) when it cannot be read or parsed,
    is not a regular file, or is larger than ``max_bytes``."""
    path = Path(path)
    size = regular_file(path, what).st_size
    if max_bytes is not None and size > max_bytes:
        raise DataError(path, f"the {what} is {size:,} bytes; at most {max_bytes:,} are read")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(path, f"{what} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(path, f"cannot read the {what}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise DataError(path, f"not valid JSON: {exc.msg}", line=exc.lineno) from None


def read_record(path: str | Path, schema: type, what: str, max_bytes: int = 1 << 20) -> Any:
    """The JSON object in ``path`` typed by the pydantic model ``schema``: DataError naming the file and its
    first bad key (what it holds, what is allowed) on one line, before any value of it is used."""
    return validate_record(path, read_json(path, what, max_bytes), schema, what)


def validate_record(path: str | Path, data: Any, schema: type, what: str) -> Any:
    """``data`` (read from ``path``) typed by the pydantic model ``schema``, as :func:`read_record` types it."""
    from pydantic import ValidationError

    try:
        return schema.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "the top level"
        if first["type"] == "missing":
            raise DataError(path, f"the {what} lacks '{key}'") from None
        shown = repr(first.get("input"))
        if len(shown) > 80:
            shown = f"{shown[:60]}... ({len(shown):,} characters)"
        reason = first["msg"].removeprefix("Value error, ")
        raise DataError(path, f"'{key}': got {shown}; {reason[:200]}") from None


@contextlib.contextmanager
def file_lock(path: str | Path, *, blocking: bool = True, what: str | None = None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (an empty lock file unless it is a folder). With ``blocking=False`` a
    lock another process holds is a UserInputError at once, naming ``what`` it protects. The lock goes with the process:
    a killed holder leaves no stale lock."""
    path = Path(path)
    if path.is_dir():
        fd = os.open(path, os.O_RDONLY)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            raise UserInputError(
                f"{what or path} is in use by another process (lock {path}); wait for it to finish or stop it first"
            ) from None
        yield
    finally:
        os.close(fd)  # releases the lock


def load_tensors(path: str | Path, what: str = "checkpoint") -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU: tensors, numbers, strings, lists and dicts only. Anything
    else (another format, a pickle that would build objects or call functions) is a UserInputError naming the file;
    nothing in it runs."""
    import pickle

    import torch

    path = Path(path)
    if path.exists():
        regular_file(path, what)  # a FIFO would block torch.load forever
    try:
        with torch.serialization.safe_globals(_numpy_value_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise UserInputError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise UserInputError(f"{what} {path} cannot be read ({exc.strerror or exc})") from None
    except (
        pickle.UnpicklingError,
        RuntimeError,
        EOFError,
        ValueError,
        AttributeError,
        ImportError,
        TypeError,
        IndexError,
        KeyError,
        UnicodeDecodeError,
        OverflowError,
        MemoryError,
    ) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserInputError(
            f"{what} {path} is not an itrlab checkpoint (a torch file of tensors only); refused to load it: {reason}"
        ) from None


def _numpy_value_globals() -> list:
    """What rebuilds numpy arrays and scalars from their bytes (no code runs): files written by
    itrlab before it stored RNG states and metrics as plain values hold some."""
    import numpy as np

    try:
        from numpy._core.multiarray import _reconstruct, scalar  # numpy >= 2
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import _reconstruct, scalar
    dtypes = {type(np.dtype(t)) for t in (np.uint32, np.int64, np.float32, np.float64)}
    return [_reconstruct, scalar, np.ndarray, np.dtype, *dtypes]


def claim_new_dir(parent: str | Path, name: str, attempts: int = 10_000) -> Path:
    """A new, empty folder ``parent/name`` (or ``name-1``, ``name-2`` ... when taken), created atomically:
    two processes that ask for the same name in the same instant never get the same folder."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(attempts):
        path = parent / (name if attempt == 0 else f"{name}-{attempt}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise UserInputError(f"{parent}: no free folder name like {name}-N ({attempts:,} taken)")


PATH_MAX, NAME_MAX = 4096, 255  # Linux's limits on a path and on one of its names, in bytes


def check_path_length(path: str | Path, what: str) -> None:
    """UserInputError when ``path`` (absolute) is longer than the system allows, or one of its names is, or it
    holds characters that are not printable (control characters, direction marks)."""
    text = str(Path(path).expanduser().absolute())
    size = len(os.fsencode(text))
    longest = max((len(os.fsencode(part)) for part in Path(text).parts), default=0)
    if size >= PATH_MAX or longest > NAME_MAX:
        raise UserInputError(
            f"{what}: the path {text[:80]}... is {size:,} bytes long, one of its names {longest:,}; "
            f"paths may hold {PATH_MAX - 1:,} bytes and names {NAME_MAX}"
        )
    if not text.isprintable():
        raise UserInputError(f"{what}: the path {text!r} holds control or direction characters; name a plain folder")


def check_writable_dir(path: str | Path, what: str) -> Path:
    """Make sure ``path`` is, or can be created as, a writable folder, without creating it: a temporary file is written
    and removed in it or its nearest existing parent (what the file system allows, not the mode bits, which root
    ignores). UserInputError naming ``what`` and the folder otherwise; returns ``path`` resolved."""
    check_path_length(path, what)
    try:
        path = Path(path).expanduser().resolve()
        probe = path
        while not probe.exists():
            if probe.parent == probe:
                break
            probe = probe.parent
    except OSError as err:  # a component that is a file, a loop of links ...
        raise UserInputError(f"{what}: {str(path)[:200]} cannot be a folder: {err.strerror or err}") from None
    if not probe.is_dir():
        raise UserInputError(f"{what}: {path} cannot be a folder: {probe} is a file")
    try:
        fd, name = tempfile.mkstemp(prefix=".itrlab-write-check-", dir=probe)
        os.close(fd)
        os.unlink(name)
    except OSError as err:
        where = "" if probe == path else f" (its parent {probe} exists)"
        raise UserInputError(
            f"{what}: cannot write in {probe}{where}: {err.strerror or err}; pick a folder you can write to"
        ) from None
    return path
