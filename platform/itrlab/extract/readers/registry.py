"""Raw data-set formats by name, the values of the extraction's ``--format``: a *reader* turns what a data set ships
(an image folder and a caption file, or a folder as downloaded) into splits of
:class:`~itrlab.extract.captions.CocoImage` before anything is written; everything after is the same for every
format. Each reader's module registers its class with ``@register_reader("name")`` (:mod:`itrlab.extract.readers`
imports them; ``docs/adding-a-dataset.md`` is the guide). The registry is an instance of the one registry class,
:class:`itrlab.registry.Registry`, as are those of the other named parts in their layers' ``registry.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from itrlab.errors import DataError, UserInputError
from itrlab.extract.captions import CAPTIONS_PER_IMAGE, CaptionSelection, CocoImage, select_captions
from itrlab.extract.coverage import coverage
from itrlab.extract.image_paths import check_inside
from itrlab.registry import Registry

DEFAULT_FORMAT = "coco"  # --format when none is given (and the format of a manifest whose source names none)
# a reader's plan: {split: images in their order}, the manifest's caption statistics, the lines it reports
SplitPlan = tuple[dict[str, list[CocoImage]], dict[str, Any], list[str]]


class Reader:
    """One raw format, bound to the extraction's options (``self.options``: an ``ExtractOptions``).

    ``options.captions`` is what the format reads its captions from (``--annotations``, alias ``--captions``): a
    file, or the data set's folder. Class attributes say which options apply:

    - ``summary``: that path in words (``--help``, errors);
    - ``images_inside``: the image folder inside that folder (a format read from one folder): ``--images`` does
      not apply; None: the photos are in ``--images``;
    - ``reads``: what the format fixes itself, in words (its split, its captions); with ``own_split``,
      ``--split-file``/``--split-fractions`` do not apply, with ``fixed_captions``, ``--captions-per-image``/
      ``--pad-captions`` do not;
    - ``default_out``: ``--out`` when none is given (None: ``--out`` is required);
    - ``shorthand``: ``--<name> PATH`` stands for ``--format <name> --annotations PATH`` (a flag of its own).
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    images_inside: ClassVar[str | None] = None
    reads: ClassVar[str] = ""
    own_split: ClassVar[bool] = False
    fixed_captions: ClassVar[bool] = False
    default_out: ClassVar[Path | None] = None
    shorthand: ClassVar[bool] = False

    def __init__(self, options: Any):
        self.options = options

    @classmethod
    def flag(cls) -> str:
        """How the command line names this format in messages."""
        return f"--{cls.name}" if cls.shorthand else f"--format {cls.name}"

    def needs(self) -> str:
        """The input options this format reads, for the error that says one is missing."""
        if self.images_inside is not None:
            return f"{self.flag()} needs {self.summary}"
        return f"{self.flag()} needs --images and --annotations ({self.summary})"

    def check(self) -> None:
        """Option errors, before anything is read (a UserInputError of one line)."""
        options = self.options
        given = []
        if self.own_split:
            given += [
                flag
                for flag, value in (
                    ("--split-file", options.split_file),
                    ("--split-fractions", options.split_fractions),
                )
                if value is not None
            ]
        if self.fixed_captions:
            given += ["--pad-captions"] if options.pad_captions else []
            given += ["--captions-per-image"] if options.captions_per_image != CAPTIONS_PER_IMAGE else []
        if given:
            raise UserInputError(f"{self.flag()} reads {self.reads}; {', '.join(given)} does not apply")
        if self.images_inside is not None and options.images is not None:
            raise UserInputError(f"{self.flag()} reads the images and captions of its folder; --images does not apply")
        if options.captions is None or (self.images_inside is None and options.images is None):
            raise UserInputError(self.needs())
        if not self.own_split:
            if options.split_file is not None and options.split_fractions is not None:
                raise UserInputError("--split-file and --split-fractions exclude each other; pass one")
            if options.split_file is None and options.split_fractions is None:
                raise UserInputError("pass --split-fractions (e.g. 0.6,0.2,0.2) or --split-file")
        if self.images_inside is None:
            images = Path(options.images)
            if not images.is_dir():
                raise DataError(images, "image folder not found" if not images.exists() else "not a folder")

    def images_dir(self) -> Path:
        """The folder the images' file names are relative to."""
        if self.images_inside is not None:
            return Path(self.options.captions) / self.images_inside
        return Path(self.options.images)

    def read(self) -> SplitPlan:
        """Read and check the captions (and the split), choose each split's images: nothing is written, no
        image is decoded; every problem a DataError naming the file."""
        raise NotImplementedError

    def source(self) -> dict[str, str]:
        """The manifest's ``source``: the image folder, the caption file, and the format by a key of its own
        (its name, naming the path it read: :func:`reader_of_source` finds the format by it)."""
        path = str(Path(self.options.captions).resolve())
        return {"images": str(self.images_dir().resolve()), "captions": path, self.name: path}

    @classmethod
    def images_of(cls, source: dict[str, str]) -> list[CocoImage] | None:
        """Every image an extraction with this manifest ``source`` read (ids and file names), read again from
        its caption source; None when that is gone. For a trained model's photos (:mod:`itrlab.trained.photos`)."""
        raise NotImplementedError

    # --- steps that formats share ---------------------------------------------------------------------

    def select(self, images: Sequence[CocoImage], path: Path, messages: list[str]) -> CaptionSelection:
        """``--captions-per-image`` captions for each image (``--pad-captions``), what it changed appended to
        ``messages``; a DataError naming ``path`` when no image is left."""
        options = self.options
        selection = select_captions(images, options.captions_per_image, pad=options.pad_captions)
        messages += selection.summary()
        if not selection.images:
            raise DataError(
                path,
                f"no image has {options.captions_per_image} captions"
                + ("" if options.pad_captions else " (--pad-captions pads images with fewer)"),
            )
        return selection

    def cover(self, images: Sequence[CocoImage], listing: Path, messages: list[str]) -> dict[str, Any]:
        """What the caption file ``listing`` covers of the image folder (:mod:`itrlab.extract.coverage`: photos it
        does not list, photos it lists that the folder lacks), its lines appended to ``messages``; the report's
        ``photos``. A DataError when one of its names leads outside the folder (:mod:`itrlab.extract.image_paths`),
        the folder holds no photo or the file lists none of them: before a split is chosen."""
        check_inside(self.images_dir(), ((image.file_name, None) for image in images), listing)
        found = coverage(self.images_dir(), (image.file_name for image in images), listing)
        messages += found.lines(self.images_dir())
        return found.to_json()


READERS: Registry[type[Reader]] = Registry("format")
register_reader = READERS.register


def reader_of(name: str) -> type[Reader]:
    """The reader of format ``name``; a UserInputError naming the known formats (and the closest) otherwise."""
    return READERS.lookup(name, lambda text: UserInputError(f"--format: {text}"))


def format_names() -> list[str]:
    """The registered formats, for ``--help``."""
    return sorted(READERS)


def reader_of_source(source: dict[str, str]) -> type[Reader]:
    """The reader that wrote an extraction manifest's ``source``: the format whose name is one of its keys, else
    the default (manifests of COCO-format captions name none)."""
    return next((cls for name, cls in READERS.items() if name in source), READERS[DEFAULT_FORMAT])


__all__ = [
    "DEFAULT_FORMAT",
    "READERS",
    "Reader",
    "SplitPlan",
    "format_names",
    "reader_of",
    "reader_of_source",
    "register_reader",
]
