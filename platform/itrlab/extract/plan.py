"""The plan of an extraction job: its options, its splits, its chunks, and which are already done; all before
the model loads.

:func:`plan_splits` reads the captions with the options' format's reader (:mod:`itrlab.extract.readers`) and
chooses the captions and splits. :func:`prepare` checks the output folder against the fingerprint of the
settings, a content digest of every image included (:mod:`itrlab.extract.digests`), so the output is a cache of
its inputs: the same fingerprint resumes or leaves it; a change the user did not choose (an image, the model,
the preprocessing) extracts again, saying what changed; options the user chose that differ (dtype, chunk size,
captions, split) are refused unless ``overwrite``, so a folder is never replaced by another data set by mistake.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from itrlab.errors import DataError, UserInputError
from itrlab.extract.captions import CAPTIONS_PER_IMAGE, DEFAULT_SPLIT_NAMES, CocoImage
from itrlab.extract.digests import content_digest, image_digests
from itrlab.extract.image_encoder import model_info
from itrlab.extract.images import PREPROCESSING, BadImagesError, check_image
from itrlab.extract.layouts import layout_folders, parse_pool
from itrlab.extract.readers import DEFAULT_FORMAT, Reader, SplitPlan, reader_of
from itrlab.extract.shards import Chunk, read_shard_meta
from itrlab.files import atomic_write_text, check_writable_dir, file_lock

DTYPES = ("float32", "float16")
MANIFEST = "extract.json"
WORK_DIR = ".extract_work"
FORMAT_VERSION = 1
# settings the user does not choose: when only these changed, the output is extracted again
FOLLOWS_INPUTS = frozenset({"format_version", "model", "preprocessing", "images", "images_dir"})


@dataclass
class ExtractOptions:
    """Everything a feature-extraction job needs (the command line's options).

    ``format`` names the reader (:mod:`itrlab.extract.readers`) of ``captions``, what the data set's captions
    come from (``--annotations``, alias ``--captions``): a COCO caption file with the photos in ``images`` and
    ``split_fractions`` or ``split_file`` (``coco``, the default), a Flickr8K folder in its original form whose
    official split and 5 captions per image are used as they are (``flickr8k``), ... Which options apply is the
    format's to say.
    """

    out: Path
    images: Path | None = None
    captions: Path | None = None
    format: str = DEFAULT_FORMAT
    split_fractions: str | Sequence[float] | None = None
    split_names: Sequence[str] = DEFAULT_SPLIT_NAMES
    split_file: Path | None = None
    seed: int = 0
    dtype: str = "float32"
    skip_bad: bool = False
    pad_captions: bool = False
    captions_per_image: int = CAPTIONS_PER_IMAGE
    batch_size: int = 16
    chunk_size: int = 256
    threads: int | None = None
    device: str = "cpu"
    overwrite: bool = False
    keep_shards: bool = False
    progress: bool = True
    pool: str | Sequence[int] | None = None  # layouts derived from the grid: "3x3,1x1" (itrlab.extract.layouts)

    def reader(self) -> Reader:
        """The reader of ``format``, bound to these options (a UserInputError for an unknown format)."""
        return reader_of(self.format)(self)

    @property
    def images_dir(self) -> Path:
        return self.reader().images_dir()

    def check(self) -> None:
        """Option errors, before anything is read."""
        if self.dtype not in DTYPES:
            raise UserInputError(f"--dtype: got {self.dtype!r}; allowed: {', '.join(DTYPES)}")
        for name in ("batch_size", "chunk_size", "captions_per_image"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise UserInputError(f"--{name.replace('_', '-')}: got {value!r}; must be an integer >= 1")
        if self.threads is not None and self.threads < 1:
            raise UserInputError(f"--threads: got {self.threads!r}; must be >= 1")
        parse_pool(self.pool)
        self.reader().check()
        if Path(self.out).exists() and not Path(self.out).is_dir():
            raise UserInputError(f"--out {self.out}: exists and is not a folder")
        check_writable_dir(self.out, "--out")  # a read-only file system: one line before the model loads


@dataclass
class Plan:
    """What a job will write: split membership, chunks, and which chunks are already done."""

    options: ExtractOptions
    splits: dict[str, list[CocoImage]]
    chunks: list[Chunk]
    pending: list[Chunk]
    settings: dict[str, Any]
    fingerprint: str
    report: dict[str, Any]  # caption statistics for the manifest
    messages: list[str] = field(default_factory=list)
    complete: dict[str, Any] | None = None  # the manifest when the output is already finished

    @property
    def out(self) -> Path:
        return Path(self.options.out)

    @property
    def work_dir(self) -> Path:
        return self.out / WORK_DIR

    @property
    def images_dir(self) -> Path:
        return self.options.images_dir

    @property
    def n_images(self) -> int:
        return sum(len(images) for images in self.splits.values())

    @property
    def n_pending(self) -> int:
        return sum(len(chunk.images) for chunk in self.pending)


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def _output_files(out: Path, splits: Sequence[str]) -> list[Path]:
    names = [f"{s}_{suffix}" for s in splits for suffix in ("ims.npy", "global.npy", "caps.txt", "ids.txt")]
    return [out / name for name in names] + [out / MANIFEST]


def _differences(old: dict[str, Any], new: dict[str, Any]) -> str:
    keys = sorted(set(old) | set(new))
    diffs = []
    for key in keys:
        if old.get(key) != new.get(key):
            if key == "splits":
                diffs.append("the images, captions or split assignment")
            elif key == "images":
                diffs.append("the content of the images")
            elif key == "model":
                diffs.append(f"the model {old.get(key)!r} -> {new.get(key)!r}")
            else:
                diffs.append(f"{key} {old.get(key)!r} -> {new.get(key)!r}")
    return ", ".join(diffs) or "the format version"


def _follows_inputs(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether only settings the user does not choose differ (:data:`FOLLOWS_INPUTS`)."""
    differing = {key for key in set(old) | set(new) if old.get(key) != new.get(key)}
    return bool(old) and differing <= FOLLOWS_INPUTS


def _clear(out: Path, splits: Sequence[str]) -> None:
    old_splits: list[str] = []
    manifest = out / MANIFEST
    if manifest.is_file():
        with contextlib.suppress(OSError, ValueError):
            old_splits = list(json.loads(manifest.read_text(encoding="utf-8")).get("splits", {}))
    shutil.rmtree(out / WORK_DIR, ignore_errors=True)
    for folder in layout_folders(out):  # derived from the grid being replaced
        shutil.rmtree(folder, ignore_errors=True)
    for path in _output_files(out, [*splits, *old_splits]):
        path.unlink(missing_ok=True)


def plan_splits(options: ExtractOptions, log: Callable[[str], None] = lambda s: None) -> SplitPlan:
    """Check the options, read the captions with the format's reader, choose the captions and the splits (no
    writes)."""
    options.check()
    splits, report, messages = options.reader().read()
    for line in messages:
        log(line)
    return splits, report, messages


def prepare(
    options: ExtractOptions, log: Callable[[str], None] = lambda s: None, planned: SplitPlan | None = None
) -> Plan:
    """Validate the inputs and the output folder, plan the chunks, find the bad images.

    Everything here runs before the model loads. Call it with the output folder locked
    (:func:`extraction_lock`); ``planned`` is :func:`plan_splits`'s result if already computed.
    """
    splits, report, messages = planned if planned is not None else plan_splits(options, log)
    out = Path(options.out)
    digests, changed = image_digests(options.images_dir, [im.file_name for ims in splits.values() for im in ims], out)
    if changed:
        log(
            f"{len(changed)} image(s) changed since they were last read: {', '.join(changed[:5])}"
            + (" ..." if len(changed) > 5 else "")
        )
    settings = {
        "format_version": FORMAT_VERSION,
        "model": model_info(),
        "preprocessing": PREPROCESSING,
        "dtype": options.dtype,
        "chunk_size": options.chunk_size,
        "images": content_digest(digests),
        "splits": _digest(
            {s: [[im.image_id, im.file_name, list(im.captions)] for im in ims] for s, ims in splits.items()}
        ),
    }
    fingerprint = _digest(settings)
    chunks = [
        Chunk(split, number, tuple(images[lo : lo + options.chunk_size]))
        for split, images in splits.items()
        for number, lo in enumerate(range(0, len(images), options.chunk_size))
    ]
    plan = Plan(options, splits, chunks, [], settings, fingerprint, report, messages)

    if options.overwrite:
        _clear(out, list(splits))
    manifest_path, plan_path = out / MANIFEST, out / WORK_DIR / "plan.json"
    if manifest_path.is_file():
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            manifest = {}
        if manifest.get("fingerprint") == fingerprint:
            if all(p.is_file() for p in _output_files(out, list(splits))):
                if not options.keep_shards:
                    shutil.rmtree(plan.work_dir, ignore_errors=True)
                plan.complete = manifest
                return plan
            log(f"{out} lacks some files of its extraction; extracting again")
            _clear(out, list(splits))  # our own files, incomplete: start again
        elif _follows_inputs(manifest.get("settings", {}), settings):
            log(
                f"{out}: {_differences(manifest.get('settings', {}), settings)} changed since it was extracted; "
                f"extracting again"
            )
            _clear(out, list(splits))
        else:
            raise UserInputError(
                f"--out {out} holds an extraction with other settings ("
                f"{_differences(manifest.get('settings', {}), settings)}); pass --overwrite "
                f"to replace it, or choose another --out"
            )
    if plan_path.is_file():
        try:
            previous = json.loads(plan_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            previous = {}
        if previous.get("fingerprint") != fingerprint:
            if not _follows_inputs(previous.get("settings", {}), settings):
                raise UserInputError(
                    f"--out {out} holds an unfinished extraction with other settings ("
                    f"{_differences(previous.get('settings', {}), settings)}); re-run it with its "
                    f"settings to finish it, or pass --overwrite to start again"
                )
            log(
                f"{out}: {_differences(previous.get('settings', {}), settings)} changed since its unfinished "
                f"extraction started; starting again"
            )
            shutil.rmtree(plan.work_dir, ignore_errors=True)
    if not plan_path.is_file():
        foreign = [p.name for p in _output_files(out, list(splits)) if p.exists()]
        if foreign:
            raise UserInputError(
                f"--out {out} already holds {', '.join(foreign[:4])} not written by this job; "
                f"pass --overwrite to replace them, or choose another --out"
            )
        plan.work_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(plan_path, json.dumps({"fingerprint": fingerprint, "settings": settings}, indent=1))

    done_bad: list[tuple[str, str]] = []
    for chunk in chunks:
        meta = read_shard_meta(plan.work_dir, chunk)
        if meta is None:
            plan.pending.append(chunk)
        else:
            done_bad += [(b["file_name"], b["problem"]) for b in meta.get("bad", [])]
    finished = plan.n_images - plan.n_pending
    if finished:
        log(f"resuming: {finished} of {plan.n_images} images already extracted in {plan.work_dir}")

    start = time.perf_counter()
    bad = done_bad + scan_images(plan)
    if plan.n_pending >= 1000:
        log(f"checked {plan.n_pending} images in {time.perf_counter() - start:.0f} s")
    if bad:
        if not options.skip_bad:
            raise BadImagesError(plan.images_dir, bad)
        log(
            f"skipping {len(bad)} bad image(s): "
            + "; ".join(f"{n} ({p})" for n, p in bad[:20])
            + (" ..." if len(bad) > 20 else "")
        )
        bad_names = {name for name, _ in bad}
        for split, images in splits.items():
            if all(im.file_name in bad_names for im in images):
                raise DataError(plan.images_dir, f"split '{split}' has no readable image left")
    return plan


def scan_images(plan: Plan) -> list[tuple[str, str]]:
    """(file name, problem) of the pending images that are missing, unreadable or corrupt."""
    bad = []
    for chunk in plan.pending:
        for image in chunk.images:
            problem = check_image(plan.images_dir / image.file_name)
            if problem is not None:
                bad.append((image.file_name, problem))
    return bad


@contextlib.contextmanager
def extraction_lock(out: Path) -> Iterator[None]:
    """Hold the output folder (an flock on the folder itself) for one job at a time."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with file_lock(out, blocking=False, what=f"--out {out} (another extraction is writing to this folder)"):
        yield
