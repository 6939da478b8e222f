"""COCO-format caption files: reading, validation, captions per image, split assignment.

A COCO caption file is a JSON object with ``images`` (``{"id": int, "file_name": str, ...}``) and ``annotations``
(``{"image_id": int, "caption": str, ...}``). :func:`load_coco_captions` validates it (each problem a
:class:`~itrlab.errors.DataError` naming the file and the entries) and groups the captions per image in file order,
each made one line (the precomp layout stores one caption per line); blank ones are counted and left out.
:func:`select_captions` keeps the first ``per_image`` (5) of each image and excludes images with fewer, or pads
them by repeating their captions with ``pad=True``. Splits come from fractions and a seed (:func:`assign_fractions`)
or a split file (:func:`assign_from_file`: ``{"train": [keys], ...}``, ``{"key": "split"}``, Karpathy's
``dataset_coco.json``, or ``key split`` text lines), a key being a file name, its base name or an image id.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from itrlab.errors import DataError, UserInputError

CAPTIONS_PER_IMAGE = 5
DEFAULT_SPLIT_NAMES = ("train", "dev", "test")
_SPLIT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_SHOWN = 10  # how many offending entries an error message lists


@dataclass(frozen=True)
class CocoImage:
    """One image of a caption file with its captions (file order, normalised to one line)."""

    image_id: int
    file_name: str
    captions: tuple[str, ...]


@dataclass(frozen=True)
class CocoCaptions:
    """A validated COCO caption file."""

    path: Path
    images: tuple[CocoImage, ...]  # in the file's order
    n_annotations: int
    blank_captions: int  # annotations whose caption was empty or whitespace only (left out)

    def by_id(self) -> dict[int, CocoImage]:
        return {image.image_id: image for image in self.images}


def _listing(items: Sequence[Any]) -> str:
    shown = ", ".join(repr(item) if isinstance(item, str) else str(item) for item in items[:_SHOWN])
    more = f" (first {_SHOWN} of {len(items)} shown)" if len(items) > _SHOWN else ""
    return shown + more


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise DataError(path, "file not found" if not path.exists() else "not a regular file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(path, f"cannot read file: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DataError(path, f"not UTF-8 text (byte {data[exc.start]:#04x})", line=line) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(path, f"malformed JSON: {exc.msg} (column {exc.colno})", line=exc.lineno) from None
    except RecursionError:
        raise DataError(path, "malformed JSON: nested too deeply") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def normalise_caption(caption: str) -> str:
    """One line: every run of whitespace (newlines and tabs included) becomes a single space."""
    return " ".join(caption.split())


def load_coco_captions(path: str | Path) -> CocoCaptions:
    """Read and validate a COCO-format caption JSON file; group its captions per image."""
    path = Path(path)
    doc = _read_json(path)
    if not isinstance(doc, dict):
        raise DataError(path, f"expected a JSON object with 'images' and 'annotations', got a {type(doc).__name__}")
    for key in ("images", "annotations"):
        if key not in doc:
            raise DataError(
                path,
                f"no '{key}' list; a COCO caption file has 'images' (id, file_name) "
                f"and 'annotations' (image_id, caption)",
            )
        if not isinstance(doc[key], list):
            raise DataError(path, f"'{key}' must be a list, got a {type(doc[key]).__name__}")

    order: list[int] = []
    names: dict[int, str] = {}
    seen_files: dict[str, int] = {}
    for i, entry in enumerate(doc["images"]):
        if not isinstance(entry, dict):
            raise DataError(path, f"images[{i}] must be an object, got {entry!r:.60}")
        image_id, file_name = entry.get("id"), entry.get("file_name")
        if not _is_int(image_id):
            raise DataError(path, f"images[{i}]: 'id' must be an integer, got {image_id!r:.60}")
        if not isinstance(file_name, str) or not file_name.strip():
            raise DataError(
                path, f"images[{i}] (id {image_id}): 'file_name' must be a non-empty string, got {file_name!r:.60}"
            )
        if image_id in names:
            raise DataError(path, f"images[{i}]: image id {image_id} appears twice")
        if file_name in seen_files:
            raise DataError(path, f"images[{i}]: file_name {file_name!r} is also image {seen_files[file_name]}")
        order.append(image_id)
        names[image_id] = file_name
        seen_files[file_name] = image_id

    captions: dict[int, list[str]] = {image_id: [] for image_id in order}
    unknown: list[int] = []
    blank = 0
    for i, entry in enumerate(doc["annotations"]):
        if not isinstance(entry, dict):
            raise DataError(path, f"annotations[{i}] must be an object, got {entry!r:.60}")
        image_id, caption = entry.get("image_id"), entry.get("caption")
        if not _is_int(image_id):
            raise DataError(path, f"annotations[{i}]: 'image_id' must be an integer, got {image_id!r:.60}")
        if not isinstance(caption, str):
            raise DataError(
                path, f"annotations[{i}] (image {image_id}): 'caption' must be a string, got {caption!r:.60}"
            )
        if image_id not in captions:
            unknown.append(image_id)
            continue
        text = normalise_caption(caption)
        if text:
            captions[image_id].append(text)
        else:
            blank += 1
    if unknown:
        ids = sorted(set(unknown))
        raise DataError(
            path, f"{len(unknown)} annotations refer to {len(ids)} image ids that are not in 'images': {_listing(ids)}"
        )
    images = tuple(CocoImage(i, names[i], tuple(captions[i])) for i in order)
    return CocoCaptions(path, images, len(doc["annotations"]), blank)


@dataclass
class CaptionSelection:
    """Images with exactly ``per_image`` captions, and what it took to get there."""

    images: list[CocoImage]
    per_image: int
    truncated_images: int = 0  # images that had more than per_image captions
    dropped_captions: int = 0  # captions beyond the first per_image, left out
    excluded: list[tuple[CocoImage, int]] = field(default_factory=list)  # (image, captions it had)
    padded: list[tuple[CocoImage, int]] = field(default_factory=list)  # (image, captions it had)

    def to_json(self) -> dict[str, Any]:
        def entries(pairs: list[tuple[CocoImage, int]]) -> list[dict[str, Any]]:
            return [{"id": im.image_id, "file_name": im.file_name, "captions": n} for im, n in pairs]

        return {
            "per_image": self.per_image,
            "truncated_images": self.truncated_images,
            "dropped_captions": self.dropped_captions,
            "excluded_images": entries(self.excluded),
            "padded_images": entries(self.padded),
        }

    def summary(self) -> list[str]:
        """Human-readable lines for the job's report (nothing when nothing was changed)."""
        lines = []
        if self.truncated_images:
            lines.append(
                f"{self.truncated_images} images had more than {self.per_image} captions: kept the first "
                f"{self.per_image}, dropped {self.dropped_captions} captions"
            )
        if self.excluded:
            shown = _listing([f"{im.file_name} ({n})" for im, n in self.excluded])
            lines.append(
                f"{len(self.excluded)} images had fewer than {self.per_image} captions and were excluded"
                + ("" if any(n == 0 for _, n in self.excluded) else " (--pad-captions pads them)")
                + f": {shown}"
            )
        if self.padded:
            shown = _listing([f"{im.file_name} ({n})" for im, n in self.padded])
            lines.append(
                f"{len(self.padded)} images had fewer than {self.per_image} captions and were padded "
                f"by repetition: {shown}"
            )
        return lines


def select_captions(
    coco: CocoCaptions | Iterable[CocoImage], per_image: int = CAPTIONS_PER_IMAGE, pad: bool = False
) -> CaptionSelection:
    """Give every image exactly ``per_image`` captions (truncate, exclude, or pad by repetition)."""
    if per_image < 1:
        raise UserInputError(f"captions per image must be >= 1, got {per_image}")
    images = coco.images if isinstance(coco, CocoCaptions) else tuple(coco)
    selection = CaptionSelection([], per_image)
    for image in images:
        n = len(image.captions)
        if n >= per_image:
            if n > per_image:
                selection.truncated_images += 1
                selection.dropped_captions += n - per_image
            selection.images.append(CocoImage(image.image_id, image.file_name, image.captions[:per_image]))
        elif pad and n > 0:
            repeated = tuple(image.captions[i % n] for i in range(per_image))
            selection.images.append(CocoImage(image.image_id, image.file_name, repeated))
            selection.padded.append((image, n))
        else:
            selection.excluded.append((image, n))
    return selection


# ---------------------------------------------------------------------------------------------
# Splits


def check_split_names(names: Sequence[str], source: str = "--split-names") -> tuple[str, ...]:
    """Split names become file prefixes (``{split}_ims.npy``): letters, digits, ``_ . -``, unique."""
    names = tuple(names)
    for name in names:
        if not _SPLIT_NAME.match(name):
            raise UserInputError(
                f"{source}: split name {name!r} is not allowed; use letters, digits, '_', '.', '-' "
                f"(it becomes the file prefix '{{split}}_ims.npy')"
            )
    duplicates = [name for name, count in Counter(names).items() if count > 1]
    if duplicates:
        raise UserInputError(f"{source}: split names must be unique, {duplicates[0]!r} appears twice")
    return names


def parse_fractions(text: str | Sequence[float], names: Sequence[str] = DEFAULT_SPLIT_NAMES) -> tuple[float, ...]:
    """``"0.6,0.2,0.2"`` -> (0.6, 0.2, 0.2): one positive fraction per split name, summing to 1."""
    if isinstance(text, str):
        try:
            fractions = tuple(float(part) for part in text.split(","))
        except ValueError:
            raise UserInputError(
                f"--split-fractions: got {text!r}; expected comma-separated numbers such as 0.6,0.2,0.2"
            ) from None
    else:
        fractions = tuple(float(f) for f in text)
    if len(fractions) != len(names):
        raise UserInputError(
            f"--split-fractions: got {len(fractions)} fractions for {len(names)} splits ({', '.join(names)})"
        )
    if not all(np.isfinite(f) and f > 0 for f in fractions):
        raise UserInputError(f"--split-fractions: got {text!r}; every fraction must be > 0")
    if abs(sum(fractions) - 1.0) > 1e-6:
        raise UserInputError(
            f"--split-fractions: got {text!r}; the fractions must sum to 1 (they sum to {sum(fractions):g})"
        )
    return fractions


def split_sizes(n: int, fractions: Sequence[float]) -> list[int]:
    """Sizes by largest remainder: they sum to ``n``; ties go to the earlier split."""
    exact = [f * n for f in fractions]
    sizes = [int(np.floor(x)) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: (-(exact[i] - sizes[i]), i))
    for i in by_remainder[: n - sum(sizes)]:
        sizes[i] += 1
    return sizes


def assign_fractions(
    images: Sequence[CocoImage], fractions: Sequence[float], names: Sequence[str] = DEFAULT_SPLIT_NAMES, seed: int = 0
) -> dict[str, list[CocoImage]]:
    """A seeded random split; the same images, fractions and seed always give the same split.

    The images are sorted by id first (so the file's order does not matter), permuted with
    ``numpy.random.default_rng(seed)``, cut by :func:`split_sizes`; each split is sorted by id.
    """
    names = check_split_names(names)
    fractions = parse_fractions(fractions, names)
    ordered = sorted(images, key=lambda im: im.image_id)
    sizes = split_sizes(len(ordered), fractions)
    empty = [name for name, size in zip(names, sizes) if size == 0]
    if empty:
        raise UserInputError(
            f"--split-fractions: split '{empty[0]}' would get no image of {len(ordered)} "
            f"({', '.join(f'{n} {s}' for n, s in zip(names, sizes))}); use more images "
            f"or larger fractions"
        )
    permutation = np.random.default_rng(seed).permutation(len(ordered))
    splits: dict[str, list[CocoImage]] = {}
    start = 0
    for name, size in zip(names, sizes):
        chosen = permutation[start : start + size]
        splits[name] = sorted((ordered[i] for i in chosen), key=lambda im: im.image_id)
        start += size
    return splits


def split_file_pairs(path: Path) -> list[tuple[Any, str, int | None]]:
    """(key, split, line or None) pairs from a split file in any supported form."""
    if path.suffix.lower() == ".json":
        doc = _read_json(path)
        pairs: list[tuple[Any, str, int | None]] = []
        if isinstance(doc, dict) and isinstance(doc.get("images"), list):  # Karpathy's dataset_coco.json
            for i, entry in enumerate(doc["images"]):
                if not isinstance(entry, dict) or not isinstance(entry.get("split"), str):
                    raise DataError(path, f"images[{i}] needs a 'split' string (Karpathy split format)")
                key = entry.get("filename", entry.get("file_name", entry.get("cocoid", entry.get("id"))))
                if key is None:
                    raise DataError(path, f"images[{i}] needs 'filename' or 'cocoid' (Karpathy split format)")
                pairs.append((key, entry["split"], None))
            return pairs
        if isinstance(doc, dict) and doc and all(isinstance(v, list) for v in doc.values()):
            return [(key, split, None) for split, keys in doc.items() for key in keys]
        if isinstance(doc, dict) and doc and all(isinstance(v, str) for v in doc.values()):
            return [(key, split, None) for key, split in doc.items()]
        raise DataError(
            path,
            'expected {"split": [file names or ids]}, {"file name or id": "split"} '
            'or Karpathy\'s {"images": [{"filename", "split"}]}',
        )
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise DataError(path, "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(path, f"cannot read file as UTF-8 text ({exc})") from None
    pairs = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = [p for p in re.split(r"[\s,]+", line) if p]
        if len(parts) != 2:
            raise DataError(path, f"expected '<file name or id> <split>', got {line!r:.80}", line=number)
        pairs.append((parts[0], parts[1], number))
    if not pairs:
        raise DataError(path, "no '<file name or id> <split>' lines")
    return pairs


def assign_from_file(
    images: Sequence[CocoImage], path: str | Path, known: Iterable[CocoImage] | None = None
) -> tuple[dict[str, list[CocoImage]], int]:
    """Splits from a split file; returns ({split: images in the file's order}, number not listed).

    ``images`` are the candidates (e.g. those left after caption selection); ``known`` are all the
    images of the caption file (default: ``images``): a key that matches none of them is an
    error, a key of a known but non-candidate image is skipped.
    """
    path = Path(path)
    known = list(images if known is None else known)
    by_name = {im.file_name: im.image_id for im in known}
    by_base: dict[str, list[int]] = {}
    for im in known:
        by_base.setdefault(PurePosixPath(im.file_name).name, []).append(im.image_id)
    ids = {im.image_id for im in known}
    candidates = {im.image_id: im for im in images}

    def resolve(key: Any) -> int | None:
        if _is_int(key):
            return key if key in ids else None
        if not isinstance(key, str):
            return None
        if key in by_name:
            return by_name[key]
        base = by_base.get(PurePosixPath(key).name, [])
        if len(base) == 1:
            return base[0]
        if key.strip().isdigit() and int(key) in ids:
            return int(key)
        return None

    assigned: dict[int, str] = {}
    splits: dict[str, list[CocoImage]] = {}
    unknown: list[Any] = []
    for key, split, line in split_file_pairs(path):
        if not isinstance(split, str) or not _SPLIT_NAME.match(split):
            raise DataError(
                path, f"split name {split!r} for {key!r} is not allowed (letters, digits, '_', '.', '-')", line=line
            )
        image_id = resolve(key)
        if image_id is None:
            unknown.append(key)
            continue
        previous = assigned.get(image_id)
        if previous is not None and previous != split:
            raise DataError(
                path, f"{key!r} (image {image_id}) is assigned to both '{previous}' and '{split}'", line=line
            )
        if previous is None:
            assigned[image_id] = split
            if image_id in candidates:
                splits.setdefault(split, []).append(candidates[image_id])
    if unknown:
        raise DataError(path, f"{len(unknown)} entries name no image of the caption file: {_listing(unknown)}")
    if not splits:
        raise DataError(path, "assigns none of the images (with enough captions) to a split")
    unassigned = sum(1 for image_id in candidates if image_id not in assigned)
    return splits, unassigned
