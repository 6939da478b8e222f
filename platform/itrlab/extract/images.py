"""Image loading for feature extraction: decode, RGB, resize, centre crop; bad images found cheaply.

Each image is converted to RGB (no EXIF rotation, like the COCO annotations), resized so that its
short side is 256 pixels (PIL bilinear, antialiased) and centre-cropped to 224x224. Missing,
unreadable or corrupt images are described in words (:func:`check_image` decodes at 1/8 scale for
JPEG, before the model loads); their features are never replaced by zeros or noise.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from itrlab.errors import DataError
from itrlab.extract.captions import CocoImage

RESIZE_SHORT_SIDE = 256
CROP_SIZE = 224

PREPROCESSING = {
    "color": "RGB (no EXIF rotation)",
    "resize_short_side": RESIZE_SHORT_SIDE,
    "interpolation": "bilinear (PIL, antialiased)",
    "center_crop": CROP_SIZE,
    "normalize": "(x - 127) / 128 (TF-Lite convention), x in 0..255",
}


class BadImagesError(DataError):
    """Images that are missing, unreadable or corrupt; ``bad`` lists (file name, problem)."""

    def __init__(self, images_dir: str | Path, bad: Sequence[tuple[str, str]]):
        self.bad = list(bad)
        shown = "; ".join(f"{name} ({problem})" for name, problem in self.bad[:20])
        more = f"; ... {len(self.bad) - 20} more" if len(self.bad) > 20 else ""
        super().__init__(
            images_dir,
            f"{len(self.bad)} bad image(s) (missing, unreadable or corrupt): "
            f"{shown}{more}. Fix or remove them, or pass --skip-bad to leave them out",
        )


@dataclass(frozen=True)
class ImageSource:
    """Where one image comes from: a path, or its bytes (Ray tasks on other nodes)."""

    file_name: str
    path: str
    data: bytes | None = None
    problem: str | None = None  # known before decoding (e.g. the driver could not read the file)


def _describe(exc: BaseException, formats: Sequence[str] | None = None) -> str:
    from PIL import UnidentifiedImageError

    if isinstance(exc, FileNotFoundError):
        return "file not found"
    if isinstance(exc, IsADirectoryError):
        return "not a regular file"
    if isinstance(exc, PermissionError):
        return "permission denied"
    if isinstance(exc, UnidentifiedImageError):
        return f"not a {' or '.join(formats)} image" if formats else "not an image (cannot identify the format)"
    text = str(exc).strip() or type(exc).__name__
    return f"corrupt image ({text[:120]})"


def _open(source: ImageSource, formats: Sequence[str] | None = None):
    from PIL import Image

    if source.problem is not None:
        raise _KnownProblem(source.problem)
    return Image.open(io.BytesIO(source.data) if source.data is not None else source.path, formats=formats)


class _KnownProblem(Exception):
    pass


def load_image(source: ImageSource | str | Path, formats: Sequence[str] | None = None) -> np.ndarray:
    """Decode, RGB, short side 256 (bilinear), centre crop 224 -> (224, 224, 3) uint8; ``formats``: the image
    formats (PIL's names, "JPEG", "PNG") decoded, None: any that PIL reads."""
    from PIL import Image

    if not isinstance(source, ImageSource):
        source = ImageSource(Path(source).name, str(source))
    with _open(source, formats) as image:
        image = image.convert("RGB")
        width, height = image.size
        scale = RESIZE_SHORT_SIDE / min(width, height)
        size = (max(RESIZE_SHORT_SIDE, round(width * scale)), max(RESIZE_SHORT_SIDE, round(height * scale)))
        image = image.resize(size, Image.Resampling.BILINEAR)
        left, top = (size[0] - CROP_SIZE) // 2, (size[1] - CROP_SIZE) // 2
        image = image.crop((left, top, left + CROP_SIZE, top + CROP_SIZE))
        return np.asarray(image, dtype=np.uint8)


def try_load_image(source: ImageSource, formats: Sequence[str] | None = None) -> tuple[np.ndarray | None, str | None]:
    """(pixels, None), or (None, the problem) for a missing, unreadable or corrupt image, or (``formats``) one of
    another format."""
    try:
        return load_image(source, formats), None
    except _KnownProblem as exc:
        return None, str(exc)
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - PIL raises many types for broken files
        return None, _describe(exc, formats)


def check_image(path: str | Path) -> str | None:
    """A cheap decode (1/8 scale for JPEG): None if the image reads, else the problem."""
    try:
        from PIL import Image

        with Image.open(path) as image:
            image.draft("RGB", (max(1, image.width // 8), max(1, image.height // 8)))
            image.load()
        return None
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001
        return _describe(exc)


def read_source(images_dir: Path, image: CocoImage) -> ImageSource:
    """The image's bytes, read here (for tasks that may run on another node)."""
    path = images_dir / image.file_name
    try:
        return ImageSource(image.file_name, str(path), data=path.read_bytes())
    except OSError as exc:
        return ImageSource(image.file_name, str(path), problem=_describe(exc))


def path_source(images_dir: Path, image: CocoImage) -> ImageSource:
    return ImageSource(image.file_name, str(images_dir / image.file_name))
