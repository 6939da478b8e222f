"""A retrieval gallery: what a model retrieves, for a split whose data came from photos: ``n`` sampled captions with
their top-5 images (the true image framed) and ``n`` sampled images with their top-5 captions (their own marked), ranked
by the function of the run's test table (:mod:`itrlab.trained.retrieval`).

The page is one self-contained HTML file, each thumbnail a small JPEG (at most 112 px a side) embedded as a
``data:`` URI: the MLflow UI shows an HTML artifact from a copy fetched through ``get-artifact?path=...``, against
which a relative link would not resolve. The template autoescapes (:mod:`itrlab.report.pages`).
"""

from __future__ import annotations

import base64
import io
import random
from dataclasses import dataclass
from pathlib import Path

from itrlab.errors import UserInputError
from itrlab.report.pages import render as render_page
from itrlab.trained.evaluation import EvalData
from itrlab.trained.model import TrainedModel
from itrlab.trained.photos import SplitImages
from itrlab.trained.retrieval import Hit, Ranking, captions_for_image, images_for_caption

ARTIFACT = "gallery.html"  # the run's artifact
THUMB = 112  # pixels, the longer side
TOP = 5


@dataclass(frozen=True)
class Gallery:
    """The sampled queries' rankings, ready to render."""

    title: str
    about: list[str]
    by_caption: list[tuple[str, Ranking]]  # a caption and its top images
    by_image: list[tuple[Hit, Ranking]]  # an image (as a hit: id, photo) and its top captions


def require_photos(images: SplitImages, model: TrainedModel, data: EvalData) -> None:
    """UserInputError (one line, before anything is scored) when the split has no photos to show."""
    if images.photos is None or not any(images.photos):
        raise UserInputError(
            f"gallery: {model.source} on {data.dataset} split {data.split.split}: its data has no "
            f"photos (a gallery needs data extracted from photos by jobs/extract_features.py, whose "
            f"extract.json names the photo folder, and that folder); itrlab retrieve lists ids"
        )


def sample(total: int, n: int, seed: int) -> list[int]:
    """``n`` of ``range(total)`` drawn with ``seed``, in order."""
    return sorted(random.Random(seed).sample(range(total), min(n, total)))


def build_gallery(model: TrainedModel, data: EvalData, images: SplitImages, n: int = 8, seed: int = 0) -> Gallery:
    """The rankings of ``n`` sampled captions and ``n`` sampled images of ``data``'s split."""
    if not 1 <= n <= 100:
        raise UserInputError(f"-n {n}: a gallery shows 1 to 100 captions and as many images")
    require_photos(images, model, data)
    split = data.split
    score = model.score_fn(split)  # the split encoded once, as for its test table
    captions = [
        (split.captions[j], images_for_caption(score, split, images, j, TOP)) for j in sample(split.n_captions, n, seed)
    ]
    queried = [
        (Hit(0, 0.0, images.ids[row], images.photo(row), True), captions_for_image(score, split, images, row, TOP))
        for row in sample(split.n_images, n, seed + 1)
    ]
    about = [
        f"model {model.source} ({model.info.method}, trained on {model.info.dataset})",
        f"data {data.dataset}, split {split.split}: {split.n_images:,} images, {split.n_captions:,} captions",
        f"{n} captions and {n} images sampled with seed {seed}; scores as the run's test table ranks them",
    ]
    return Gallery(f"What {model.info.method} retrieves: {data.dataset} {split.split}", about, captions, queried)


def thumbnail(photo: Path | None, cache: dict[Path, str | None]) -> str | None:
    """``photo`` as a small JPEG ``data:`` URI (None when it is missing or unreadable)."""
    if photo is None:
        return None
    if photo not in cache:
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(photo) as image:
                image = image.convert("RGB")
                image.thumbnail((THUMB, THUMB))
                out = io.BytesIO()
                image.save(out, "JPEG", quality=80)
            cache[photo] = "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode()
        except (OSError, UnidentifiedImageError, ValueError):
            cache[photo] = None
    return cache[photo]


def render_with_photos(template: str, **context: object) -> str:
    """A page of ``templates/`` that shows photos as embedded thumbnails, each photo read once."""
    cache: dict[Path, str | None] = {}
    return render_page(template, thumb=THUMB, thumbnail=lambda photo: thumbnail(photo, cache), **context)


def render(gallery: Gallery) -> str:
    """The gallery as one self-contained HTML page (``templates/gallery.html.j2``)."""
    return render_with_photos(
        "gallery.html.j2",
        title=gallery.title,
        about=gallery.about,
        by_caption=gallery.by_caption,
        by_image=gallery.by_image,
        top=TOP,
    )


def bundle_gallery(folder: Path, source: str | None = None, n: int = 8, seed: int = 0) -> str | None:
    """The gallery page of the model folder ``folder`` on its own test split, naming the model ``source`` (its URI: the
    folder is a training's scratch copy); None, with nothing opened, when that data did not come from photos or its
    photos are gone."""
    from itrlab.assembly import load_experiment
    from itrlab.trained.bundle import CONFIG
    from itrlab.trained.evaluation import open_eval_split
    from itrlab.trained.model import open_bundle
    from itrlab.trained.photos import manifest_of, split_images

    if manifest_of(Path(load_experiment(Path(folder) / CONFIG).dataset.root)) is None:
        return None
    model = open_bundle(folder, source)
    data = open_eval_split([model])
    images = split_images(data.split)
    if images.photos is None or not any(images.photos):
        return None
    return render(build_gallery(model, data, images, n, seed))
