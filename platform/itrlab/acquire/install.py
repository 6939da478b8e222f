"""A data set onto this machine, checked, and its features: what ``itrlab data NAME --from PATH_OR_URL`` runs.

The steps, each timed: *download* an http(s) URL (:mod:`itrlab.acquire.download`); *unpack* an archive or *copy* a
folder into a staging folder, only the paths the manifest names (:mod:`itrlab.acquire.origins`); *verify* the staged
copy (:mod:`itrlab.acquire.verify`) and rename it into place as the raw copy; then the *image features* and *text
features*, as ``jobs/extract_features.py`` computes them (:mod:`itrlab.extract`). A copy with a file missing, extra or
altered is refused with one line before anything is put in place or extracted.

Beside the raw copy, ``data/.NAME.download/`` holds the download (removed once the copy is in place),
``data/.NAME.partial/`` the staging folder with its verified digests (``.digests.json``), and ``data/.NAME.lock`` lets
one such command run at a time. The same command resumes each step (docs/data.md, "How it resumes").
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tarfile
import time
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from itrlab.acquire.download import download, size_text
from itrlab.acquire.manifest import STATE, DataManifest
from itrlab.acquire.origins import FolderSource, Source, archive_source, classify, opened, unpack
from itrlab.acquire.verify import Problems, files_of, verify_folder
from itrlab.console_log import TO_STDERR
from itrlab.errors import UserInputError, disk_full, no_space
from itrlab.files import check_writable_dir, file_lock

log = logging.getLogger(__name__)

ARCHIVE_ERRORS = (EOFError, zlib.error, zipfile.BadZipFile, tarfile.TarError)


@dataclass
class Step:
    """One timed step: its name, its seconds, and what it did."""

    name: str
    seconds: float
    what: str


@dataclass
class Installed:
    """What :func:`install` did: the raw copy, the features' folder, the timed steps, and the extraction's own
    report lines."""

    raw: Path
    precomp: Path
    steps: list[Step] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def _say(message: str) -> None:
    log.info(message, extra=TO_STDERR)


def folders(manifest: DataManifest) -> tuple[Path, Path, Path, Path]:
    """(the raw copy, its staging folder, its download folder, its lock file)."""
    raw = Path(manifest.raw)
    return (
        raw,
        raw.parent / f".{raw.name}.partial",
        raw.parent / f".{raw.name}.download",
        raw.parent / f".{raw.name}.lock",
    )


def install(
    manifest: DataManifest,
    given: str,
    *,
    timeout: float = 60.0,
    features: bool = True,
    threads: int | None = None,
    device: str = "cpu",
    text_model: Path | None = None,
    progress: bool = True,
) -> Installed:
    """Get the data set of ``manifest`` from ``given`` (``--from``), verified, into its raw folder, and (with
    ``features``) its image and text features into its precomp folder. Bad input, or a copy that differs from the
    manifest, is one UserInputError before anything is put in place."""
    source = classify(given)
    raw, staging, downloads, lock = folders(manifest)
    done = Installed(raw, Path(manifest.precomp))
    check_writable_dir(raw.parent, "the raw copy's folder")
    if features:
        check_writable_dir(done.precomp, "the features' folder")
    raw.parent.mkdir(parents=True, exist_ok=True)
    with (
        opened(source) if isinstance(source, Source) else contextlib.nullcontext(),
        file_lock(lock, blocking=False, what=f"{raw} (another `itrlab data` is writing it)"),
    ):
        if raw.is_dir():
            _verify_in_place(manifest, raw, source, done)
        else:
            _acquire(manifest, given, source, staging, downloads, timeout, progress, done)
    if features:
        _features(manifest, done, threads, device, text_model, progress)
    return done


def _verify_in_place(manifest: DataManifest, raw: Path, source: str | Source, done: Installed) -> None:
    """The raw copy already there, verified (from its remembered digests where its files are unchanged)."""
    started = time.perf_counter()
    problems = verify_folder(raw, manifest)
    if problems:
        line = problems.line(str(raw), manifest)
        if not (isinstance(source, FolderSource) and source.path.resolve() == raw.resolve()):
            line += "; it was there before this command: move it away and run the same command"
        raise UserInputError(line)
    done.steps.append(Step("verify", time.perf_counter() - started, f"{raw}: {_counted(manifest)}, as recorded"))


def _acquire(
    manifest: DataManifest,
    given: str,
    source: str | Source,
    staging: Path,
    downloads: Path,
    timeout: float,
    progress: bool,
    done: Installed,
) -> None:
    """Download (a URL), unpack or copy into ``staging``, verify, and rename ``staging`` into place."""
    from_url = isinstance(source, str)
    if isinstance(source, str):
        started = time.perf_counter()
        fetched = download(source, downloads, timeout, progress, _say)
        resumed = f", resumed at {size_text(fetched.resumed_at)}" if fetched.resumed_at else ""
        what = (
            f"{size_text(fetched.fetched)} of {size_text(fetched.size)} in {fetched.requests} request(s){resumed}"
            if fetched.requests
            else f"{fetched.path} downloaded before"
        )
        done.steps.append(Step("download", time.perf_counter() - started, what))
        source = archive_source(fetched.path)
    staging.mkdir(exist_ok=True)
    with opened(source):
        listed = _unpack(manifest, source, staging, progress, done)
    started = time.perf_counter()
    problems = verify_folder(staging, manifest, listed=False).merge(listed)
    done.steps.append(Step("verify", time.perf_counter() - started, f"{_counted(manifest)}, as recorded"))
    if problems:
        if from_url:  # a refused download is not kept
            shutil.rmtree(downloads, ignore_errors=True)
        raise UserInputError(problems.line(given, manifest) + f"; nothing was put in {done.raw}")
    staging.rename(done.raw)
    shutil.rmtree(downloads, ignore_errors=True)


def _unpack(manifest: DataManifest, source: Source, staging: Path, progress: bool, done: Installed) -> Problems:
    """Unpack or copy what the manifest names into ``staging``; the listing's problems (extra entries)."""
    from tqdm import tqdm

    from itrlab.extract.digests import remembered_digests

    started = time.perf_counter()
    try:
        members = source.members(manifest.top_level())
        recorded = {**manifest.checked_files(), **manifest.optional}
        wanted = {*recorded, manifest.split_file}
        for name in files_of(staging)[0]:  # staged under another manifest: never part of this copy
            if name not in wanted:
                (staging / name).unlink()
        known = remembered_digests(staging, recorded, staging, cache=STATE)
        with tqdm(total=len(members), unit="file", desc=source.kind, disable=not progress) as bar:
            written, size = unpack(
                source,
                members,
                wanted,
                staging,
                lambda name: name in known and known[name] == recorded[name],
                bar.update,
            )
    except ARCHIVE_ERRORS as err:
        raise UserInputError(f"{source.path}: cannot read the archive ({err})") from None
    except OSError as err:
        if not disk_full(err):
            raise
        raise UserInputError(
            f"{no_space(staging.parent)}: the {source.kind} into {staging} stopped; free space there and run the "
            f"same command: it resumes"
        ) from None
    kept = len([m for m in members if m.regular and m.name in wanted]) - written
    what = f"{written:,} files ({size_text(size)}) from {source.path}" + (
        f"; {kept:,} verified before, kept" if kept else ""
    )
    done.steps.append(Step(source.kind, time.perf_counter() - started, what))
    return Problems(extra=sorted(m.name for m in members if m.name not in wanted or not m.regular))


def _counted(manifest: DataManifest) -> str:
    images = sum(len(images) for images in manifest.splits.values())
    return f"{images:,} images, {manifest.captions.path} and {manifest.split_file}"


def _features(
    manifest: DataManifest, done: Installed, threads: int | None, device: str, text_model: Path | None, progress: bool
) -> None:
    """The image features, then the text features, of the verified raw copy."""
    from itrlab.extract import job, text
    from itrlab.extract.plan import ExtractOptions
    from itrlab.extract.ray_tasks import extract_dataset

    raw, settings = done.raw, manifest.extract
    options = ExtractOptions(
        out=done.precomp,
        images=raw / manifest.images,
        captions=raw / manifest.captions.path,
        split_file=raw / manifest.split_file,
        dtype=settings.dtype,
        pool=settings.pool,
        threads=threads,
        device=device,
        progress=progress,
    )
    text_options = None
    if settings.text is not None:
        text_options = text.TextOptions(
            precomp=done.precomp,
            kind=settings.text,
            model_dir=text_model,
            threads=threads,
            device=device,
            progress=progress,
        )
        text_options.check()
    started = time.perf_counter()
    extracted = extract_dataset(options, log=lambda line: _say(f"extract: {line}"))
    run = extracted["run"]
    what = (
        f"{done.precomp} already up to date"
        if extracted.get("up_to_date")
        else f"{run['images_this_run']:,} images at {run['images_per_s']:.1f} images/s -> {done.precomp}"
    )
    done.steps.append(Step("image features", time.perf_counter() - started, what))
    done.lines += job.summary_lines(extracted)
    if text_options is None:
        return
    started = time.perf_counter()
    encoded = text.extract_text(text_options, log=lambda line: _say(f"extract: {line}"))
    what = (
        f"{text_options.folder} already up to date"
        if encoded.get("up_to_date")
        else f"{encoded['run']['captions_this_run']:,} captions -> {text_options.folder}"
    )
    done.steps.append(Step("text features", time.perf_counter() - started, what))
    done.lines += text.summary_lines(encoded)


__all__ = ["Installed", "Step", "folders", "install"]
