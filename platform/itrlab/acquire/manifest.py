"""A data set's manifest: what a checked copy of its raw files holds, shipped as
``configs/datasets/manifests/<name>.json.gz``.

It records, with its own format version: the sha256 of every image, by split (the official split lists: an image's split
is the list it sits in); the caption file's sha256; the name of the split file (its content held against the lists, not
its bytes); the other files a copy may carry (a README, a checksum list) with their sha256; where the raw copy and its
features go (``raw``, ``precomp``, relative to the working folder like a data set config's ``root``); and how the
features are extracted (``extract``: the options of ``jobs/extract_features.py``). :func:`write_manifest` makes one from
a reference folder (``jobs/make_data_manifest.py``); :func:`find_manifest` and :func:`read_manifest` find and read one,
checked.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from itrlab.errors import DataError, UserInputError, resolved_from

FORMAT_VERSION = 1
SUFFIX = ".json.gz"
STATE = ".digests.json"  # a copy's remembered digests (itrlab.extract.digests), never part of the data set


def manifests_dir() -> Path:
    """The shipped manifests: ``configs/datasets/manifests/``."""
    from itrlab.config.loader import config_dir

    return config_dir() / "datasets" / "manifests"


def manifest_names() -> list[str]:
    """The names of the shipped manifests (what ``itrlab data NAME`` takes)."""
    return sorted(path.name[: -len(SUFFIX)] for path in manifests_dir().glob(f"*{SUFFIX}"))


def safe_relative(name: str) -> str:
    """``name`` if it is a relative POSIX path that stays inside its folder (no ``..``, no empty part), else a
    ValueError: what a manifest may name."""
    path = PurePosixPath(name)
    if not name or "\\" in name or path.is_absolute() or any(part in ("", ".", "..") for part in name.split("/")):
        raise ValueError(f"{name!r} is not a relative path inside the data set's folder")
    return name


class ExtractSettings(BaseModel):
    """How the raw copy becomes features: ``jobs/extract_features.py``'s ``--dtype``, ``--pool`` and ``--text``."""

    model_config = ConfigDict(extra="forbid")

    dtype: str = "float16"
    pool: str | None = None
    text: str | None = "tokens"  # None: no text features

    @model_validator(mode="after")
    def _known(self) -> ExtractSettings:
        from itrlab.extract.layouts import parse_pool
        from itrlab.extract.plan import DTYPES
        from itrlab.extract.text import TEXT_KINDS

        if self.dtype not in DTYPES:
            raise ValueError(f"extract.dtype {self.dtype!r}: allowed {', '.join(DTYPES)}")
        if self.text is not None and self.text not in TEXT_KINDS:
            raise ValueError(f"extract.text {self.text!r}: allowed {', '.join(TEXT_KINDS)} or null")
        try:
            parse_pool(self.pool)
        except UserInputError as err:
            raise ValueError(str(err)) from None
        return self


class Checked(BaseModel):
    """A file and its sha256."""

    model_config = ConfigDict(extra="forbid")

    path: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")

    @field_validator("path")
    @classmethod
    def _inside(cls, value: str) -> str:
        return safe_relative(value)


class DataManifest(BaseModel):
    """One data set's manifest (the module's docstring says what each field holds)."""

    model_config = ConfigDict(extra="forbid")

    format_version: int
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    raw: str
    precomp: str
    extract: ExtractSettings
    images: str
    captions: Checked
    split_file: str
    optional: dict[str, str] = {}
    splits: dict[str, dict[str, str]]

    @field_validator("images", "split_file")
    @classmethod
    def _inside(cls, value: str) -> str:
        return safe_relative(value)

    @field_validator("optional")
    @classmethod
    def _optional(cls, value: dict[str, str]) -> dict[str, str]:
        for name, digest in value.items():
            Checked(path=name, sha256=digest)
        return value

    @field_validator("splits")
    @classmethod
    def _splits(cls, value: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        seen: set[str] = set()
        for split, images in value.items():
            if not images:
                raise ValueError(f"split {split!r} lists no image")
            for name, digest in images.items():
                Checked(path=name, sha256=digest)
                if name in seen:
                    raise ValueError(f"{name!r} is listed in two splits")
                seen.add(name)
        return value

    def image_path(self, name: str) -> str:
        """An image's path in the copy."""
        return f"{self.images}/{name}"

    def checked_files(self) -> dict[str, str]:
        """{path in the copy: sha256} of every file that must be there and be as recorded: the images and the
        caption file."""
        files = {self.image_path(name): digest for images in self.splits.values() for name, digest in images.items()}
        files[self.captions.path] = self.captions.sha256
        return files

    def required(self) -> set[str]:
        """Every path a copy must hold: the checked files and the split file."""
        return {*self.checked_files(), self.split_file}

    def official_split(self) -> dict[str, str]:
        """{image file name: split} of the official lists."""
        return {name: split for split, images in self.splits.items() for name in images}

    def top_level(self) -> set[str]:
        """The first part of every path a copy may hold: what tells a copy's own folder from one around it."""
        return {path.split("/")[0] for path in (*self.required(), *self.optional)}


def find_manifest(name_or_path: str) -> Path:
    """The manifest ``itrlab data`` names: a shipped one by name, or a manifest file's path."""
    path = Path(name_or_path).expanduser()
    if name_or_path.endswith((".json", SUFFIX)) or os.sep in name_or_path:
        if not path.is_file():
            raise UserInputError(f"manifest {name_or_path}: no such file{resolved_from(path)}")
        return path
    shipped = manifests_dir() / f"{name_or_path}{SUFFIX}"
    if not shipped.is_file():
        names = manifest_names()
        raise UserInputError(
            f"no data set {name_or_path!r}: the shipped manifests are {', '.join(names) or '(none)'} "
            f"({manifests_dir()}); or give a manifest file's path"
        )
    return shipped


def read_manifest(path: str | Path) -> DataManifest:
    """The manifest in ``path`` (gzip-compressed or plain JSON), checked; a DataError names what is wrong."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8")
        tree = json.loads(text)
    except FileNotFoundError:
        raise DataError(path, "manifest not found") from None
    except (OSError, EOFError, UnicodeDecodeError, ValueError) as err:
        raise DataError(path, f"not a readable manifest (gzip-compressed JSON): {err}") from None
    if not isinstance(tree, dict):
        raise DataError(path, "a manifest is a JSON object")
    version = tree.get("format_version")
    if version != FORMAT_VERSION:
        raise DataError(
            path, f"manifest format version {version!r}; this itrlab reads version {FORMAT_VERSION} (update itrlab)"
        )
    try:
        return DataManifest.model_validate(tree)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise DataError(path, f"{where}: {first['msg']}") from None


def manifest_bytes(manifest: DataManifest) -> bytes:
    """The manifest as shipped: JSON, gzip-compressed with no time stamp, so that the same folder gives the same
    bytes."""
    text = json.dumps(manifest.model_dump(), indent=1, ensure_ascii=False) + "\n"
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", fileobj=buffer, mode="wb", compresslevel=9, mtime=0) as handle:
        handle.write(text.encode("utf-8"))
    return buffer.getvalue()


def write_manifest(
    folder: str | Path,
    out: str | Path,
    *,
    name: str,
    images: str,
    captions: str,
    split_file: str,
    raw: str | None = None,
    precomp: str | None = None,
    extract: ExtractSettings | None = None,
) -> DataManifest:
    """Make the manifest of the reference copy ``folder`` and write it to ``out``: the sha256 of every image its
    split file lists (by split), of the caption file and of every other file (optional). A folder whose split file
    does not list every image of ``images`` exactly once is refused (DataError), so that a manifest never records a
    broken copy."""
    from itrlab.extract.captions import split_file_pairs
    from itrlab.extract.digests import sha256_file
    from itrlab.files import atomic_write_bytes

    root = Path(folder)
    if not root.is_dir():
        raise UserInputError(f"{folder}: not a folder{resolved_from(root)}")
    for what, rel in (("--images", images), ("--captions", captions), ("--split-file", split_file)):
        try:
            safe_relative(rel)
        except ValueError as err:
            raise UserInputError(f"{what}: {err}") from None
    image_dir = root / images
    on_disk = sorted(p.name for p in image_dir.iterdir() if p.is_file()) if image_dir.is_dir() else []
    if not on_disk:
        raise DataError(image_dir, "no image files")
    for rel in (captions, split_file):
        if not (root / rel).is_file():
            raise DataError(root / rel, "file not found")
    splits: dict[str, dict[str, str]] = {}
    listed: dict[str, str] = {}
    for key, split, line in split_file_pairs(root / split_file):
        key = str(key)
        if key in listed and listed[key] != split:
            raise DataError(root / split_file, f"{key!r} is in both '{listed[key]}' and '{split}'", line=line)
        listed[key] = split
    unlisted = sorted(set(on_disk) - set(listed))
    absent = sorted(set(listed) - set(on_disk))
    if unlisted or absent:
        raise DataError(
            root / split_file,
            f"lists {len(absent)} image(s) not in {images}/ ({', '.join(absent[:3])}) and leaves out "
            f"{len(unlisted)} of its images ({', '.join(unlisted[:3])})",
        )
    for key in sorted(listed):
        splits.setdefault(listed[key], {})[key] = sha256_file(image_dir / key)
    known = {captions, split_file}
    optional = {
        rel: sha256_file(root / rel)
        for rel in sorted(
            str(p.relative_to(root).as_posix())
            for p in root.rglob("*")
            if p.is_file() and not p.is_relative_to(image_dir) and p.name != STATE
        )
        if rel not in known
    }
    manifest = DataManifest(
        format_version=FORMAT_VERSION,
        name=name,
        raw=raw or f"data/{name}",
        precomp=precomp or f"data/{name}_precomp",
        extract=extract or ExtractSettings(),
        images=images,
        captions=Checked(path=captions, sha256=sha256_file(root / captions)),
        split_file=split_file,
        optional=optional,
        splits={split: splits[split] for split in sorted(splits, key=_split_order)},
    )
    data = manifest_bytes(manifest)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, lambda handle: handle.write(data))
    return manifest


def _split_order(split: str) -> tuple[int, str]:
    from itrlab.extract.captions import DEFAULT_SPLIT_NAMES

    order = list(DEFAULT_SPLIT_NAMES)
    return (order.index(split) if split in order else len(order), split)


__all__ = [
    "FORMAT_VERSION",
    "STATE",
    "SUFFIX",
    "DataManifest",
    "ExtractSettings",
    "find_manifest",
    "manifest_names",
    "manifests_dir",
    "read_manifest",
    "write_manifest",
]
