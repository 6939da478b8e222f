"""A retrieval gallery: what a model retrieves, for a split whose data came from photos.

``n`` sampled captions of the split, each with its top-5 images as thumbnails (the ground-truth image framed),
and ``n`` sampled images, each with its top-5 captions (its own captions marked), ranked by the function the
run's test table was computed with (:mod:`itrlab.trained.retrieval`).

The page is one self-contained HTML file: every thumbnail is a small JPEG (at most 112 px a side, about 3 kB)
embedded as a ``data:`` URI. The MLflow UI shows an HTML artifact inside a sandboxed frame from a copy of the file
it fetched through ``get-artifact?path=...``: a relative link (``thumbs/1.jpg``) would resolve against that
address, not against the artifact's folder, and show a broken image; an embedded thumbnail shows wherever the file
is opened (the UI, a downloaded copy, a mail). Every caption is user data and escaped
(:func:`~itrlab.report.escape.html_text`): a caption holding ``<script>`` reads as text.
"""

from __future__ import annotations

import base64
import io
import random
from dataclasses import dataclass
from pathlib import Path

from itrlab.errors import UserInputError
from itrlab.report.escape import html_text as esc
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


def figure(hit: Hit, cache: dict[Path, str | None], label: str) -> str:
    """An image hit as a thumbnail (framed when it is the query's truth) with its ``label`` beneath."""
    uri = thumbnail(hit.photo, cache)
    picture = (
        f'<img src="{uri}" alt="image {hit.image_id}">'
        if uri
        else f'<span class="missing">image {hit.image_id}: no photo</span>'
    )
    return f'<figure class="{"truth" if hit.truth else "hit"}">{picture}<figcaption>{esc(label)}</figcaption></figure>'


def caption_item(hit: Hit) -> str:
    """A caption hit as a list item (its image's own caption marked ✓) with its score."""
    return (
        f'<li class="{"truth" if hit.truth else "hit"}">{"✓ " if hit.truth else ""}{esc(hit.caption)} '
        f'<span class="score">{hit.score:.3f}</span></li>'
    )


STYLE = f"""
body {{ font-family: system-ui, sans-serif; font-size: 14px; margin: 1em; color: #222; }}
h1 {{ font-size: 1.3em; }} h2 {{ font-size: 1.1em; margin-top: 1.5em; }}
section.query {{ margin: 0.8em 0; padding-bottom: 0.6em; border-bottom: 1px solid #ddd; }}
p.caption {{ margin: 0 0 0.3em; font-weight: 600; }}
div.row {{ display: flex; flex-wrap: wrap; gap: 6px; }}
figure {{ margin: 0; text-align: center; font-size: 12px; color: #555; }}
figure img {{ display: block; max-width: {THUMB}px; max-height: {THUMB}px; border: 3px solid transparent; }}
figure.truth img {{ border-color: #2a9d3a; }} figure.truth figcaption {{ color: #2a9d3a; font-weight: 600; }}
span.missing {{ display: block; width: {THUMB}px; height: {THUMB // 2}px; background: #eee; }}
section.image {{ display: flex; gap: 1em; align-items: flex-start; }}
section.image figure img {{ border-color: #888; }} ol {{ margin: 0; }}
li.truth {{ color: #2a9d3a; font-weight: 600; }} span.score, p.note {{ color: #777; font-size: 12px; }}
"""  # the gallery's look, which the side-by-side page (itrlab.trained.side_by_side) shares


def html_page(title: str, style: str, body: str) -> str:
    """One self-contained HTML page: ``title`` (escaped here), ``style`` and ``body`` (HTML, escaped by its
    writer)."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>{style}</style></head><body>
<h1>{esc(title)}</h1>
{body}
</body></html>
"""


def _truth_note(ranking: Ranking, what: str) -> str:
    if ranking.truth_rank is None or ranking.truth_rank <= len(ranking.hits):
        return ""
    return f'<p class="note">{esc(what)} ranks {ranking.truth_rank}</p>'


def render(gallery: Gallery) -> str:
    """The gallery as one self-contained HTML page."""
    cache: dict[Path, str | None] = {}
    by_caption = "\n".join(
        f'<section class="query"><p class="caption">{esc(caption)}</p><div class="row">'
        + "".join(
            figure(hit, cache, f"{hit.rank}. {hit.score:.3f}" + (" (true)" if hit.truth else ""))
            for hit in ranking.hits
        )
        + f"</div>{_truth_note(ranking, 'the true image')}</section>"
        for caption, ranking in gallery.by_caption
    )
    by_image = "\n".join(
        f'<section class="query image">{figure(image, cache, f"image {image.image_id}")}<ol>'
        + "".join(caption_item(hit) for hit in ranking.hits)
        + f"</ol>{_truth_note(ranking, 'its first own caption')}</section>"
        for image, ranking in gallery.by_image
    )
    body = f"""<ul>{"".join(f"<li>{esc(line)}</li>" for line in gallery.about)}</ul>
<h2>Captions and their top {TOP} images (the true image framed in green)</h2>
{by_caption}
<h2>Images and their top {TOP} captions (✓: the image's own caption)</h2>
{by_image}"""
    return html_page(gallery.title, STYLE, body)


def bundle_gallery(folder: Path, source: str | None = None, n: int = 8, seed: int = 0) -> str | None:
    """The gallery page of the model folder ``folder`` on its own test split (what a training run logs beside its
    model), naming the model ``source`` (its URI, ``runs:/<id>/model``: the folder is a training's scratch copy);
    None, with nothing opened, when that data was not extracted from photos or its photos are gone."""
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
