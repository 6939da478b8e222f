"""Reading and validating the SCAN "precomp" layout: a split ``{split}`` under ``root`` is ``{split}_ims.npy``, region
features (N, R, D) in float32 or float16, and ``{split}_caps.txt``, UTF-8, ``captions_per_image`` (cpi) consecutive
lines per image, so that caption ``j`` belongs to image ``j // cpi``.

Features are memory-mapped and never read whole: COCO's training features are about 33 GB, and concurrent trials
on one node share the page cache of one map. A :class:`PrecompSplit` pickles as its paths, so that worker processes
re-open the map. Reading a map past the end of a file that shrank kills the process with SIGBUS, so every read first
checks the file's size (:meth:`PrecompSplit.check_intact`, one ``fstat``) and a truncated file is a DataError.
Every problem is a :class:`~itrlab.errors.DataError` naming the file (and the 1-based line of a caption). The
``precomp`` dataset kind (:mod:`itrlab.data.kinds.precomp`) wraps it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from itrlab.errors import DataError


def features_path(root: str | Path, split: str) -> Path:
    """Path of a split's region-feature file."""
    return Path(root) / f"{split}_ims.npy"


def captions_path(root: str | Path, split: str) -> Path:
    """Path of a split's caption file."""
    return Path(root) / f"{split}_caps.txt"


@dataclass(frozen=True)
class SplitInfo:
    """What a cheap header check learns about a split without reading its features."""

    root: Path
    split: str
    features_path: Path
    captions_path: Path
    n_images: int
    n_regions: int
    feature_dim: int
    dtype: str
    n_captions: int
    captions_per_image: int | None  # None when inspected without a per-image count


def _read_npy_header(path: Path) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """Return (shape, fortran_order, dtype, data offset) from an .npy header."""
    if not path.is_file():
        raise DataError(path, "file not found" if not path.exists() else "not a regular file")
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                header = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                header = np.lib.format.read_array_header_2_0(f)
            else:  # version 3.0 only differs in the header's text encoding
                header = np.lib.format._read_array_header(f, version)  # noqa: SLF001
            offset = f.tell()
    except PermissionError as exc:
        raise DataError(path, f"cannot read file: {exc.strerror}") from None
    except (OSError, ValueError) as exc:
        raise DataError(path, f"not a valid .npy file ({exc})") from None
    shape, fortran_order, dtype = header
    return tuple(int(s) for s in shape), bool(fortran_order), dtype, offset


def _check_features_header(path: Path) -> tuple[tuple[int, int, int], str]:
    shape, fortran_order, dtype, offset = _read_npy_header(path)
    if len(shape) != 3:
        raise DataError(path, f"expected a 3-D array (images, regions, dim), got shape {shape}")
    if dtype.kind != "f" or dtype.itemsize not in (2, 4):
        raise DataError(path, f"expected dtype float16 or float32, got {dtype}")
    if fortran_order:
        raise DataError(
            path, "array is stored in Fortran order; re-save it C-contiguous (np.save(path, np.ascontiguousarray(a)))"
        )
    if shape[0] == 0 or shape[1] == 0 or shape[2] == 0:
        raise DataError(path, f"array is empty (shape {shape})")
    expected = offset + int(np.prod(shape)) * dtype.itemsize
    actual = path.stat().st_size
    if actual < expected:
        raise DataError(path, f"file is truncated: shape {shape} needs {expected} bytes, found {actual}")
    return (shape[0], shape[1], shape[2]), str(np.dtype(dtype.str.replace(">", "<")))


def _read_caption_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise DataError(path, "file not found" if not path.exists() else "not a regular file")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise DataError(path, f"cannot read file: {exc.strerror or exc}") from None


def _split_lines(data: bytes) -> list[bytes]:
    """Lines of a file; a final newline does not start an extra line."""
    if not data:
        return []
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    return lines


def _check_count(path: Path, n_captions: int, n_images: int, cpi: int) -> None:
    if n_captions != cpi * n_images:
        raise DataError(
            path,
            f"found {n_captions} caption lines, expected {cpi * n_images} "
            f"({cpi} per image x {n_images} images in the feature file)",
        )


def inspect_precomp(root: str | Path, split: str, captions_per_image: int | None = 5) -> SplitInfo:
    """Check a split cheaply (npy header, file size, caption line count) without opening it, for config checks before
    training; with ``captions_per_image=None`` the caption count is reported, not checked. Content checks are
    :func:`open_precomp`'s."""
    if captions_per_image is not None and captions_per_image < 1:
        raise ValueError(f"captions_per_image must be >= 1, got {captions_per_image}")
    fpath, cpath = features_path(root, split), captions_path(root, split)
    (n, r, d), dtype = _check_features_header(fpath)
    n_captions = len(_split_lines(_read_caption_bytes(cpath)))
    if captions_per_image is not None:
        _check_count(cpath, n_captions, n, captions_per_image)
    return SplitInfo(Path(root), split, fpath, cpath, n, r, d, dtype, n_captions, captions_per_image)


def _parse_captions(path: Path, data: bytes) -> list[str]:
    if data.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark is not part of caption 1
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DataError(path, f"invalid UTF-8 byte {data[exc.start]:#04x}", line=line) from None
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    captions = []
    for number, line in enumerate(lines, start=1):
        caption = line.rstrip("\r")
        if not caption.strip():
            raise DataError(path, "empty caption line", line=number)
        captions.append(caption)
    return captions


def read_captions(root: str | Path, split: str) -> list[str]:
    """A split's caption lines, checked as :func:`open_precomp` checks them (UTF-8, none empty)."""
    path = captions_path(root, split)
    return _parse_captions(path, _read_caption_bytes(path))


def _check_finite(path: Path, features: np.ndarray, check_samples: int, seed: int) -> None:
    """Look for NaN/inf in ``check_samples`` images chosen with ``seed`` (all if fewer)."""
    n = features.shape[0]
    if check_samples <= 0:
        return
    if check_samples >= n:
        indices = np.arange(n)
    else:
        indices = np.sort(np.random.default_rng(seed).choice(n, check_samples, replace=False))
    per_chunk = max(1, (64 << 20) // max(1, features[0].nbytes))  # ~64 MB per read
    for start in range(0, len(indices), per_chunk):
        chunk = indices[start : start + per_chunk]
        finite = np.isfinite(features[chunk]).reshape(len(chunk), -1).all(axis=1)
        if not finite.all():
            bad = int(chunk[np.argmin(finite)])
            raise DataError(path, f"image {bad} (0-based) has NaN or infinite features")


@dataclass
class PrecompSplit:
    """One split: memory-mapped features plus its captions (caption j -> image j // cpi)."""

    root: Path
    split: str
    features: np.ndarray  # np.memmap opened read-only; index it, never read it whole
    captions: list[str]
    captions_per_image: int
    opened_bytes: int = 0  # the feature file's size when it was mapped (0: an array, not a map)

    def __post_init__(self) -> None:
        if not self.opened_bytes:
            self.opened_bytes = _mapped_bytes(self.features)

    @property
    def n_images(self) -> int:
        return int(self.features.shape[0])

    @property
    def n_regions(self) -> int:
        return int(self.features.shape[1])

    @property
    def feature_dim(self) -> int:
        return int(self.features.shape[2])

    @property
    def n_captions(self) -> int:
        return len(self.captions)

    @property
    def features_path(self) -> Path:
        return features_path(self.root, self.split)

    def image_of(self, caption_index: int) -> int:
        """Index of the image that caption ``caption_index`` describes."""
        return caption_index // self.captions_per_image

    def image_features(self, image_index: int) -> np.ndarray:
        """Region features of one image as float32 (R, D), read from the memory map."""
        self.check_intact()
        return np.array(self.features[image_index], dtype=np.float32)

    def check_intact(self) -> None:
        """DataError when the mapped feature file is shorter than when it was opened (truncated or rewritten
        in place while a run reads it): reading the map past the file's end would kill the process."""
        now = _mapped_bytes(self.features)
        if now < self.opened_bytes:
            raise DataError(
                self.features_path,
                f"the file shrank from {self.opened_bytes:,} to {now:,} bytes while "
                f"this run read it (truncated or rewritten in place); restore it "
                f"and resume the run",
            )

    def __getstate__(self) -> dict:
        # Pickle the path, not the data: workers re-open the memory map and share the cache.
        state = self.__dict__.copy()
        state["features"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.features = _open_features(self.features_path)
        self.check_intact()


def _mapped_bytes(features: np.ndarray) -> int:
    """The current size of the file a memory map maps (its own descriptor's ``fstat``); 0 for an array."""
    mapped = getattr(features, "_mmap", None)
    try:
        return mapped.size() if mapped is not None else 0
    except (OSError, ValueError):  # a closed map
        return 0


def _open_features(path: Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataError(path, f"cannot memory-map features ({exc})") from None


def open_precomp(
    root: str | Path, split: str, captions_per_image: int = 5, check_samples: int = 256, seed: int = 0
) -> PrecompSplit:
    """Open and validate a split, its features memory-mapped: the npy header (3-D, float16/float32, whole), exactly
    ``captions_per_image`` non-empty UTF-8 lines per image, and only finite values in ``check_samples`` images drawn
    with ``seed``."""
    if captions_per_image is None or captions_per_image < 1:
        raise ValueError(f"captions_per_image must be >= 1, got {captions_per_image}")
    info = inspect_precomp(root, split, captions_per_image)
    captions = _parse_captions(info.captions_path, _read_caption_bytes(info.captions_path))
    _check_count(info.captions_path, len(captions), info.n_images, captions_per_image)
    features = _open_features(info.features_path)
    _check_finite(info.features_path, features, check_samples, seed)
    return PrecompSplit(Path(root), split, features, captions, captions_per_image)


FINGERPRINT_BYTES = 1 << 20  # of each file, at its start and its end


def fingerprint(root: str | Path, splits: tuple[str, ...] = ("train", "dev", "test")) -> str:
    """A digest of a precomp folder (its runs' MLflow dataset input): the name, size, first and last
    MiB of every split file. Cheap on the largest features (no full read), and it changes when a
    file is regenerated, truncated or replaced."""
    import hashlib

    digest = hashlib.sha256()
    for split in splits:
        for path in (features_path(root, split), captions_path(root, split)):
            if not path.is_file():
                continue
            size = path.stat().st_size
            digest.update(f"{path.name}:{size}:".encode())
            with path.open("rb") as handle:
                digest.update(handle.read(FINGERPRINT_BYTES))
                if size > 2 * FINGERPRINT_BYTES:
                    handle.seek(size - FINGERPRINT_BYTES)
                    digest.update(handle.read(FINGERPRINT_BYTES))
    return digest.hexdigest()[:16]
