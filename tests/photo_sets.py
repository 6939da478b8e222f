"""A small set of generated photos (JPEG and PNG, of several sizes and aspect ratios) with their captions in the
COCO caption format, extracted by the real feature extraction and trained on in this process: a model whose data
came from photos, for the tests of photos given to a model (tests/test_model_photos.py, tests/test_model_serve.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from trained_runs import train

N_PHOTOS = 15
COLOURS = {"red": (200, 40, 30), "green": (40, 160, 60), "blue": (30, 60, 200), "yellow": (230, 210, 40)}
SHAPES = ("square", "ball", "stripe")


def _photo(rng: np.random.Generator, colour: tuple[int, int, int], shape: str, size: tuple[int, int]):
    """A photo-like picture: a noisy gradient background and one coloured shape."""
    from PIL import Image, ImageDraw

    width, height = size
    ramp = np.linspace(0, 1, width)[None, :, None] * rng.uniform(40, 200, 3) + rng.uniform(0, 50, 3)
    pixels = np.broadcast_to(ramp, (height, width, 3)) + rng.normal(0, 12, (height, width, 3))
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    x, y = int(rng.integers(0, width // 2)), int(rng.integers(0, height // 2))
    box = (x, y, x + width // 3, y + height // 3)
    if shape == "ball":
        draw.ellipse(box, fill=colour)
    elif shape == "square":
        draw.rectangle(box, fill=colour)
    else:
        draw.rectangle((0, y, width, y + height // 8), fill=colour)
    return image


def write_photo_set(folder: Path, n: int = N_PHOTOS, seed: int = 0) -> tuple[Path, Path]:
    """``n`` generated photos under ``folder/images`` (every third a PNG, the rest JPEG) and their captions,
    five per photo, in ``folder/captions.json``; (the photo folder, the caption file)."""
    rng = np.random.default_rng(seed)
    images_dir = folder / "images"
    images_dir.mkdir(parents=True)
    images, annotations = [], []
    for i in range(n):
        colour, shape = list(COLOURS)[i % len(COLOURS)], SHAPES[i % len(SHAPES)]
        size = ((320, 240), (240, 320), (500, 375), (256, 256))[i % 4]
        name = f"photo_{i:03d}.{'png' if i % 3 == 0 else 'jpg'}"
        picture = _photo(rng, COLOURS[colour], shape, size)
        picture.save(images_dir / name, **({"quality": 90} if name.endswith(".jpg") else {}))
        images.append({"id": 100 + i, "file_name": name, "width": size[0], "height": size[1]})
        for k, caption in enumerate(
            (
                f"a {colour} {shape} on a plain background",
                f"one {colour} {shape} in the picture",
                f"a picture of a {shape} that is {colour}",
                f"the {shape} is {colour}",
                f"a {colour} {shape} near the {('left', 'middle', 'right')[i % 3]}",
            )
        ):
            annotations.append({"id": 1000 + 5 * i + k, "image_id": 100 + i, "caption": caption})
    captions = folder / "captions.json"
    captions.write_text(json.dumps({"images": images, "annotations": annotations}), encoding="utf-8")
    return images_dir, captions


def extract_photos(images: Path, captions: Path, out: Path, pool: str = "1x1") -> Path:
    """The real feature extraction of ``images`` with ``captions`` into ``out`` (splits 0.6/0.2/0.2, float16,
    the 7x7 grid and the ``pool`` layouts); ``out``."""
    from itrlab.extract.job import extract_dataset
    from itrlab.extract.plan import ExtractOptions

    options = ExtractOptions(
        out=out,
        images=images,
        captions=captions,
        split_fractions="0.6,0.2,0.2",
        dtype="float16",
        pool=pool,
        progress=False,
        batch_size=8,
    )
    extract_dataset(options)
    return out


def photo_model(folder: Path, layout: str = "pool3x3") -> tuple[str, Path, Path]:
    """The generated photo set of :func:`write_photo_set` under ``folder``, extracted (float16, the 7x7 grid and
    its 3x3 and 1x1 pooled layouts) and trained on (``layout``: ``pool3x3``, ``pool1x1`` or ``.``, the grid) in this
    process, its run logged to the MLflow store ``MLFLOW_TRACKING_URI`` names; (the run id, the extraction's
    folder, the photo folder)."""
    images, captions = write_photo_set(folder)
    out = extract_photos(images, captions, folder / "precomp", "3x3,1x1")
    run_id = train(
        "vsepp_synthetic_tiny",
        folder / "runs" / "photos",
        "dataset.kind=precomp",
        f"dataset.root={(out / layout).resolve()}",
        "train.batch_size=9",
    )
    return run_id, out, images
