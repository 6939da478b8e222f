"""Two models side by side (``itrlab gallery A --against B``): the win and loss sets against a plain loop on
constructed ranks, their counts against the two models' recall tables on real data, the bad inputs, and the page
rendered by headless Chromium.

The data: 40 generated photos (a coloured shape on a coloured ground, each made here), five captions each, one
caption of each photo carrying markup (a caption is user data: it must read as text), through the real feature
extraction (pooled to one region); two short trainings in process (VSE++ and VSE, on the same data) and one on the
synthetic data (no photos, another data set).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from browser import CHROMIUM, NEEDS_CHROMIUM, browser_dom
from itrlab.trained.side_by_side import contrast
from photo_sets import extract_photos
from trained_runs import itrlab, train, work_in

MARKUP = '<img src=x onerror="document.body.dataset.pwned=1"> & <b>bold</b>'
COLOURS = {"red": (200, 30, 30), "green": (40, 160, 60), "blue": (30, 60, 200), "yellow": (230, 210, 40)}
SHAPES = ("square", "disc")
N_PHOTOS = 40


def plain_contrast(ranks_a, ranks_b, k):
    """The sets of :func:`contrast`, by a loop over the queries."""
    a_only, b_only, both, neither = [], [], 0, 0
    for query, (a, b) in enumerate(zip(ranks_a, ranks_b)):
        if a < k and b >= k:
            a_only.append(query)
        elif b < k and a >= k:
            b_only.append(query)
        elif a < k:
            both += 1
        else:
            neither += 1
    return tuple(a_only), tuple(b_only), both, neither


@pytest.mark.parametrize("k", [1, 5, 10])
def test_the_win_and_loss_sets_are_the_queries_one_model_finds_within_k_and_the_other_does_not(k):
    rng = np.random.default_rng(k)
    ranks_a, ranks_b = rng.integers(0, 30, 500), rng.integers(0, 30, 500)
    ranks_b[:20] = ranks_a[:20]  # ties between the models: in both sets' complement
    found = contrast(ranks_a, ranks_b, k, "text to image")
    assert (found.a_only, found.b_only, found.both, found.neither) == plain_contrast(ranks_a, ranks_b, k)
    assert found.queries == 500 and not set(found.a_only) & set(found.b_only)
    # R@k of A minus R@k of B, in percent: what the two recall tables say of these ranks
    recall = lambda ranks: 100 * np.mean(ranks < k)  # noqa: E731
    assert 100 * (len(found.a_only) - len(found.b_only)) / 500 == pytest.approx(recall(ranks_a) - recall(ranks_b))
    edge = contrast(np.array([0, k - 1, k, k]), np.array([k, k, k - 1, k]), k, "image to text")
    assert (edge.a_only, edge.b_only, edge.both, edge.neither) == ((0, 1), (2,), 0, 1)
    with pytest.raises(ValueError, match="one query each"):
        contrast(ranks_a, ranks_b[:-1], k, "text to image")


def photo_set(folder: Path) -> tuple[Path, Path]:
    """40 photos, each a coloured shape on a coloured ground, and five captions each (the first ending in MARKUP)."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(0)
    (folder / "images").mkdir()
    images, annotations = [], []
    names = list(COLOURS)
    for i in range(N_PHOTOS):
        shape, colour, ground = SHAPES[i % 2], names[(i // 2) % 4], names[(i // 8 + 1 + (i // 2) % 4) % 4]
        picture = Image.new("RGB", (160, 120), COLOURS[ground])
        box = [int(v) for v in (*rng.integers(10, 50, 2), *rng.integers(90, 115, 2))]
        draw = ImageDraw.Draw(picture)
        (draw.rectangle if shape == "square" else draw.ellipse)(box, fill=COLOURS[colour])
        name = f"{i:06d}.jpg"
        picture.save(folder / "images" / name, quality=90)
        images.append({"id": 1000 + i, "file_name": name})
        said = [
            f"a {colour} {shape} on {ground}",
            f"{ground} ground with a {colour} {shape}",
            f"the {shape} is {colour}",
            f"one {colour} {shape}",
            f"a {shape} in {colour} over {ground}",
        ]
        said[0] += f" {MARKUP}"
        annotations += [{"image_id": 1000 + i, "id": 10 * i + k, "caption": text} for k, text in enumerate(said)]
    captions = folder / "captions.json"
    captions.write_text(json.dumps({"images": images, "annotations": annotations}), encoding="utf-8")
    return folder / "images", captions


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    """VSE++ and VSE trained on features of the photos (their runs log their models), a VSE++ model on synthetic
    data (no photos, another data set); the folder and store they share."""
    folder = tmp_path_factory.mktemp("side_by_side")
    images, captions = photo_set(folder)
    extract_photos(images, captions, folder / "precomp")
    data = [
        "dataset.kind=precomp",
        f"dataset.root={folder / 'precomp' / 'pool1x1'}",
        "train.batch_size=16",
        "output.log_model=best",
    ]
    with pytest.MonkeyPatch.context() as patch:
        work_in(patch, folder)
        a = train("vsepp_synthetic_tiny", folder / "runs" / "a", *data)
        b = train("vsepp_synthetic_tiny", folder / "runs" / "b", *data, "loss.name=vse", "seed=1")
        train("vsepp_synthetic_tiny", folder / "runs" / "synthetic", f"dataset.root={folder / 'tiny'}")
    return folder, f"runs:/{a}/model", f"runs:/{b}/model"


@pytest.fixture
def inside(two_models, monkeypatch):
    work_in(monkeypatch, two_models[0])
    return two_models


@pytest.mark.slow
def test_the_counts_are_the_difference_of_the_two_recall_tables(inside, capsys, tmp_path):
    """The printed counts of both directions at k = 1 and 5 give R@k of A minus R@k of B exactly as ``itrlab
    evaluate`` tabulates each model on the same split (protocol all: the whole split, as the page ranks it)."""
    folder, a, b = inside
    root = folder / "precomp" / "pool1x1"
    tables = tmp_path / "tables.json"
    argv = ["evaluate", a, b, "--data", root, "--split", "test", "--protocol", "all", "--out", tables]
    assert itrlab(*argv, "--no-tracking") == 0
    members = json.loads(tables.read_text())["members"]
    capsys.readouterr()
    for k in (1, 5):
        assert itrlab("gallery", a, "--against", b, "--k", k, "--out", tmp_path / f"k{k}.html", "-n", 2) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        for line, key in zip(lines[:2], ("i2t", "t2i")):
            got = re.fullmatch(
                rf"(image to text|text to image), top {k}: A only (\d+), B only (\d+), both (\d+), neither (\d+) "
                r"of (\d+) queries",
                line,
            )
            assert got, line
            a_only, b_only, both, neither, queries = map(int, got.groups()[1:])
            assert queries == a_only + b_only + both + neither == (8 if key == "i2t" else 40)
            assert 100 * (both + a_only) / queries == pytest.approx(members[a][f"{key}_r{k}"])
            assert 100 * (both + b_only) / queries == pytest.approx(members[b][f"{key}_r{k}"])
        assert lines[2] == f"gallery: {tmp_path / f'k{k}.html'}"


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv, says",
    [
        (["{a}", "--against", "{synthetic}"], "gallery --against: {a} trained on "),
        (["{a}", "--against", "{a_folder}"], "are one model (the same weights"),
        (["{a}", "--against", "{b}", "--k", "0"], "--k 0: a side-by-side gallery compares the top 1 to 10"),
        (["{a}", "--against", "{b}", "-n", "0"], "-n 0: a side-by-side gallery shows 1 to 100"),
        (["{a}", "--against", "{b}", "--log"], "--log with --against: a side-by-side page belongs to no one run"),
        (["{a}", "--against", "models:/no-such-model/1"], "holds no model named 'no-such-model'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(inside, capsys, argv, says):
    folder, a, b = inside
    values = {"a": a, "b": b, "synthetic": folder / "runs" / "synthetic", "a_folder": folder / "runs" / "a"}
    argv = [arg.format(**values) for arg in argv]
    assert itrlab("gallery", *argv, "--out", "g.html") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says.format(**values) in err[0], err
    assert not (folder / "g.html").exists()


@pytest.mark.e2e
@pytest.mark.skipif(CHROMIUM is None, reason=NEEDS_CHROMIUM)
def test_the_side_by_side_page_renders_both_ways_in_a_browser(inside, capsys):
    """``itrlab gallery A --against B`` at k = 1 over the whole test split, loaded by headless Chromium: the counts
    table says what the command printed, each one-sided set shows its queries (every one when there are at most
    40), each with both models' top 5 and the winner's true match among them, every thumbnail decoded, no
    caption's markup run."""
    folder, a, b = inside
    out = folder / "out" / "versus.html"
    assert itrlab("gallery", a, "--against", b, "--out", out, "-n", 40) == 0
    printed = capsys.readouterr().out
    counts = {
        (direction, side): int(count)
        for direction, rest in re.findall(r"^(image to text|text to image), top 1: (.*)$", printed, re.M)
        for side, count in re.findall(r"([AB]) only (\d+)", rest)
    }
    assert sum(counts.values()) > 0, printed  # two models of 1 epoch on 8 images differ somewhere
    probe = out.with_name("probe.html")
    probe.write_text(
        out.read_text(encoding="utf-8").replace(
            "</body>",
            """<script>
const images = [...document.images];
document.body.setAttribute("data-total", images.length);
document.body.setAttribute("data-loaded", images.filter(i => i.complete && i.naturalWidth > 0).length);
for (const row of document.querySelectorAll("table.counts tr[class]")) {
  document.body.setAttribute(`data-${row.className}-a`, row.querySelector("td.a-only").textContent);
  document.body.setAttribute(`data-${row.className}-b`, row.querySelector("td.b-only").textContent);
}
for (const heading of document.querySelectorAll("h2[id]")) {
  let shown = 0, winners = 0, next = heading.nextElementSibling;
  for (; next && next.tagName === "SECTION"; next = next.nextElementSibling) {
    shown += 1;
    const wins = next.querySelector("div.side.wins");
    if (wins.querySelector("figure.truth img, li.truth")) winners += 1;
  }
  document.body.setAttribute(`data-shown-${heading.id}`, shown);
  document.body.setAttribute(`data-won-${heading.id}`, winners);
}
</script></body>""",
        ),
        encoding="utf-8",
    )
    dom = browser_dom(probe.as_uri(), width=1400, budget_ms=5000, timeout=120)
    found = {key: int(float(value)) for key, value in re.findall(r'data-([\w-]+)="([\d.]+)"', dom)}
    assert found["total"] > 0 and found["loaded"] == found["total"], found
    for direction in ("image to text", "text to image"):
        slug = direction.replace(" ", "-")
        for side in "ab":
            count = counts[(direction, side.upper())]
            assert found[f"{slug}-{side}"] == count, found
            assert found[f"shown-{slug}-{side}-only"] == found[f"won-{slug}-{side}-only"] == min(count, 40), found
    assert "data-pwned" not in dom and "&lt;b&gt;bold&lt;/b&gt;" in dom
