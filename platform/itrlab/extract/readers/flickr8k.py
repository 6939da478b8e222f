"""The ``flickr8k`` format: Flickr8K in its original form, the folder researchers download, read as it is.

The folder holds

- ``Flicker8k_Dataset/``: the JPEGs (the misspelling is the original's);
- ``Flickr8k.token.txt``: one caption per line, ``<file>#<n><TAB><caption>``, ``n`` = 0..4;
- ``Flickr_8k.trainImages.txt``, ``Flickr_8k.devImages.txt``, ``Flickr_8k.testImages.txt``: the
  official split (6,000 / 1,000 / 1,000 images), one file name per line.

:func:`read_flickr8k` returns the three splits with each image's 5 captions (in the order of their
``#n``), each split sorted by file name; image ids are the 1-based ranks of the file names of all
listed images, so the same photos give the same ids whatever order the lists are in. The token
file also covers images in no list (the original has 8,092 names for 8,000 listed photos): they
are counted and left out.

Bad input is one :class:`~itrlab.errors.DataError` naming the file, raised before anything is
written: a missing file or folder, a malformed token line, a blank caption, an image in two lists,
a listed image without captions in the token file, a listed image outside the image folder (an absolute
path, ``..``, a link leading out: :mod:`itrlab.extract.image_paths`), a listed image missing from the
folder, or a listed image with a number of captions other than 5.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from itrlab.errors import DataError
from itrlab.extract.captions import CAPTIONS_PER_IMAGE, CaptionSelection, CocoImage, normalise_caption
from itrlab.extract.image_paths import check_inside
from itrlab.extract.readers.registry import Reader, SplitPlan, register_reader

IMAGES_DIR = "Flicker8k_Dataset"
TOKEN_FILE = "Flickr8k.token.txt"
SPLIT_FILES = {
    "train": "Flickr_8k.trainImages.txt",
    "dev": "Flickr_8k.devImages.txt",
    "test": "Flickr_8k.testImages.txt",
}
LAYOUT = f"a Flickr8K folder holds {IMAGES_DIR}/, {TOKEN_FILE} and {', '.join(SPLIT_FILES.values())}"
_SHOWN = 5  # how many offending names an error lists


@dataclass(frozen=True)
class Flickr8k:
    """A checked Flickr8K folder: its splits and what the reading left out."""

    root: Path
    splits: dict[str, list[CocoImage]]
    token_images: int  # images named in the token file
    token_lines: int

    @property
    def images_dir(self) -> Path:
        return self.root / IMAGES_DIR

    @property
    def token_path(self) -> Path:
        return self.root / TOKEN_FILE

    def report(self) -> dict[str, Any]:
        """The manifest's caption statistics, in the COCO reader's form."""
        listed = [image for images in self.splits.values() for image in images]
        return {
            "images_in_file": self.token_images,
            "annotations": self.token_lines,
            "blank_captions": 0,
            **CaptionSelection(listed, CAPTIONS_PER_IMAGE).to_json(),
            "unassigned_images": self.token_images - len(listed),
            "split": {"flickr8k": str(self.root.resolve()), "files": dict(SPLIT_FILES)},
        }


def _listing(names: list[str]) -> str:
    more = f" (first {_SHOWN} of {len(names)} shown)" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more


def _read_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise DataError(path, ("file not found" if not path.exists() else "not a regular file") + f"; {LAYOUT}")
    try:
        return path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(path, f"cannot read as UTF-8 text ({exc})") from None


def read_tokens(path: Path) -> tuple[dict[str, dict[int, str]], int]:
    """{file name: {n: caption}} from ``Flickr8k.token.txt``, and its number of caption lines."""
    captions: dict[str, dict[int, str]] = {}
    count = 0
    for number, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        key, tab, caption = line.partition("\t")
        name, hash_, index = key.strip().rpartition("#")
        if not (tab and hash_ and name and index.isdigit()):
            raise DataError(path, f"expected '<image>#<n><TAB><caption>', got {line!r:.80}", line=number)
        text = normalise_caption(caption)
        if not text:
            raise DataError(path, f"blank caption for {name}#{index}", line=number)
        per_image = captions.setdefault(name, {})
        if int(index) in per_image:
            raise DataError(path, f"{name}#{index} appears twice", line=number)
        per_image[int(index)] = text
        count += 1
    if not captions:
        raise DataError(path, "no caption lines ('<image>#<n><TAB><caption>')")
    return captions, count


def read_split_list(path: Path) -> list[tuple[str, int]]:
    """(file name, line) of each image a split list names."""
    names = [(line.strip(), number) for number, line in enumerate(_read_lines(path), start=1) if line.strip()]
    if not names:
        raise DataError(path, "names no image (one file name per line)")
    return names


def read_flickr8k(root: str | Path) -> Flickr8k:
    """Read and check a Flickr8K folder in its original form (no image is decoded)."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(root, ("folder not found" if not root.exists() else "not a folder") + f"; {LAYOUT}")
    tokens_path, images_dir = root / TOKEN_FILE, root / IMAGES_DIR
    tokens, token_lines = read_tokens(tokens_path)
    if not images_dir.is_dir():
        raise DataError(images_dir, f"image folder not found; {LAYOUT}")
    lists = {split: read_split_list(root / name) for split, name in SPLIT_FILES.items()}

    where: dict[str, str] = {}
    for split, names in lists.items():
        path = root / SPLIT_FILES[split]
        for name, line in names:
            if name in where:
                raise DataError(path, f"{name} is also listed in {SPLIT_FILES[where[name]]}", line=line)
            where[name] = split
        unknown = [(name, line) for name, line in names if name not in tokens]
        if unknown:
            raise DataError(
                path,
                f"{len(unknown)} listed image(s) have no caption in {TOKEN_FILE}: "
                f"{_listing([name for name, _ in unknown])}",
                line=unknown[0][1],
            )
    for split, names in lists.items():  # every listed photo inside the image folder
        check_inside(images_dir, names, root / SPLIT_FILES[split])
    missing = sorted(name for name in where if not (images_dir / name).is_file())
    if missing:
        raise DataError(
            images_dir / missing[0],
            f"image missing: {len(missing)} image(s) listed in the split "
            f"files are not in {IMAGES_DIR}/: {_listing(missing)}",
        )
    wrong = sorted(name for name in where if len(tokens[name]) != CAPTIONS_PER_IMAGE)
    if wrong:
        raise DataError(
            tokens_path,
            f"{len(wrong)} listed image(s) have a number of captions other than "
            f"{CAPTIONS_PER_IMAGE}: " + _listing([f"{name} ({len(tokens[name])})" for name in wrong]),
        )

    ids = {name: rank for rank, name in enumerate(sorted(where), start=1)}
    splits = {
        split: [
            CocoImage(ids[name], name, tuple(tokens[name][n] for n in sorted(tokens[name])))
            for name in sorted(name for name, _ in names)
        ]
        for split, names in lists.items()
    }
    return Flickr8k(root, splits, len(tokens), token_lines)


@register_reader("flickr8k")
class Flickr8kReader(Reader):
    """``--flickr8k DIR`` (``--format flickr8k --annotations DIR``): the folder as downloaded, its official split and
    its 5 captions per image as they are; the output defaults to the folder Flickr8K's data set config reads."""

    summary = (
        "a Flickr8K folder in its original form (Flicker8k_Dataset/, Flickr8k.token.txt, "
        "Flickr_8k.{train,dev,test}Images.txt), read with its official split"
    )
    images_inside = IMAGES_DIR
    reads = f"Flickr8K's official split and its {CAPTIONS_PER_IMAGE} captions per image"
    own_split = True
    fixed_captions = True
    default_out = Path("data/flickr8k_precomp")  # configs/datasets/flickr8k_precomp.yaml reads it
    shorthand = True

    def needs(self) -> str:
        return f"{self.flag()} needs the Flickr8K folder; {LAYOUT}"

    def read(self) -> SplitPlan:
        data = read_flickr8k(self.options.captions)
        report = data.report()
        messages = [
            f"Flickr8K: {data.token_lines} captions of {data.token_images} images in {data.token_path}; "
            + ", ".join(f"{split} {len(images)}" for split, images in data.splits.items())
            + " images"
        ]
        if report["unassigned_images"]:
            messages.append(
                f"{report['unassigned_images']} images of {TOKEN_FILE} are in no split list and are left out"
            )
        return data.splits, report, messages

    def source(self) -> dict[str, str]:
        root = Path(self.options.captions)
        return {
            "images": str(self.images_dir().resolve()),
            "captions": str((root / TOKEN_FILE).resolve()),
            "flickr8k": str(root.resolve()),
        }

    @classmethod
    def images_of(cls, source: dict[str, str]) -> list[CocoImage] | None:
        if not Path(source[cls.name]).is_dir():
            return None
        return [image for split in read_flickr8k(source[cls.name]).splits.values() for image in split]
