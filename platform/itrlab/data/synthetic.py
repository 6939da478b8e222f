"""Seeded synthetic image-text data in the SCAN precomp layout.

Images are built from latent concepts. Concept ``k`` has 2-3 synonym words and a random prototype direction in D dims;
colours and scenes have prototypes too. Concept popularity is Zipf-like (``p_k ~ (k + 1) ** -concept_sharing``), so
popular concepts are shared by many images and hard negatives exist. Each image draws ``concepts_per_image`` distinct
concepts; each becomes an object with a count (1-3, one region per instance), an optional colour (``attribute_rate``)
and a salience in [0.35, 1]. A region shows one instance (``salience * prototype + colour``) or the image's scene
background, plus Gaussian noise of norm about ``region_noise``.

Each caption mentions a random subset of its image's objects (about ``mention_fraction`` of them, at least one, salient
ones more often, faint ones sometimes) with varied templates, synonyms, counts, colours (sometimes omitted) and
uninformative adjectives: "a red dog next to two cars in the park". Captions thus say less than the image shows, and
sometimes name what it barely shows: the information asymmetry AsCL studies.

Besides the precomp files each split gets ``{split}_truth.npz`` (each image's concepts, each caption's mentioned
concepts) and the directory ``synthetic.json`` (the spec and generator version), written last: a directory without
it is an unfinished generation. Features stream to disk in 64 MB chunks, so "f30k-shape" (about 4.3 GB) never needs
to fit in memory; the same spec gives byte-identical files. The ``synthetic`` dataset kind
(:mod:`itrlab.data.kinds.synthetic`) wraps it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np

from itrlab.console_log import TO_STDERR
from itrlab.errors import ConfigError, DataError
from itrlab.files import atomic_write_text, file_lock, read_json

_log = logging.getLogger(__name__)

GENERATOR_VERSION = 1
MANIFEST = "synthetic.json"
PARTIAL = "synthetic.partial"
SPLITS = ("train", "dev", "test")

# Concept words: synonyms separated by spaces, concepts by "|". Popularity follows this order.
_CONCEPT_TABLE = (
    "man guy gentleman|woman lady|dog puppy hound|car automobile sedan|child kid youngster|"
    "tree oak|cat kitten kitty|bicycle bike|horse pony stallion|ball football|bird songbird|"
    "boat ship vessel|bus coach|building tower|chair stool|table desk|umbrella parasol|"
    "bench seat|truck lorry|flower blossom|hat cap|bag backpack purse|bottle flask|cup mug|"
    "phone cellphone smartphone|house cottage|train locomotive|airplane plane jet|kite|"
    "surfboard board|skateboard deck|motorcycle motorbike scooter|pizza|sandwich burger|"
    "cake dessert|apple|banana|book novel|laptop computer notebook|clock|lamp lantern|"
    "window|door gate|fence railing|sign placard|baby infant toddler|guitar|drum|camera|"
    "balloon|tent|rock stone boulder|mountain hill|river stream|wave swell|cloud|shirt top|"
    "dress gown|jacket coat|shoe sneaker boot|elephant|giraffe|zebra|bear|duck mallard|fish|"
    "cow calf|sheep lamb|basket hamper|box crate|toy doll|vase pot|bowl dish|knife blade|"
    "fork|spoon ladle|pillow cushion|bed mattress|sofa couch|television tv|oven stove|sink|"
    "statue sculpture|flag banner|candle|ladder"
)
_IRREGULAR_PLURALS = {
    "man": "men",
    "gentleman": "gentlemen",
    "woman": "women",
    "child": "children",
    "sheep": "sheep",
    "fish": "fish",
    "calf": "calves",
    "knife": "knives",
    "woods": "woods",
}
COLOURS = ("red", "blue", "green", "yellow", "black", "white", "brown", "orange", "pink", "grey")
SCENES = (
    ("in the", "park lawn"),
    ("on the", "street road"),
    ("at the", "beach shore"),
    ("in the", "kitchen"),
    ("in a", "field meadow"),
    ("in the", "room"),
    ("in the", "city town"),
    ("in the", "forest woods"),
    ("by the", "lake pond"),
    ("in the", "snow"),
    ("at the", "market bazaar"),
    ("in the", "office"),
)
_FILLER_ADJECTIVES = ("small", "large", "big", "little", "old", "young")
_RELATIONS = ("and", "next to", "near", "with", "beside", "behind", "in front of")
_PREFIXES = (
    "",
    "",
    "",
    "a photo of ",
    "a picture of ",
    "an image showing ",
    "we can see ",
    "this picture shows ",
    "there is ",
)
_NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five"}
_COUNT_P = (0.6, 0.3, 0.1)  # P(an object has 1, 2, 3 instances), before fitting into R regions
_SALIENCE = (0.35, 1.0)
_COLOUR_STRENGTH, _SCENE_STRENGTH, _SCENE_MENTION, _COLOUR_MENTION = 0.5, 0.6, 0.4, 0.7
_CHUNK_ELEMENTS = 1 << 24  # features per chunk (64 MB in float32)


def plural(word: str) -> str:
    if word in _IRREGULAR_PLURALS:
        return _IRREGULAR_PLURALS[word]
    if word.endswith(("s", "x", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def concept_words(n_concepts: int) -> list[tuple[str, ...]]:
    """Synonyms of each concept: the built-in words, then pronounceable made-up ones."""
    table = [tuple(c.split()) for c in _CONCEPT_TABLE.split("|")]
    used = {w for syns in table for w in syns} | {plural(w) for syns in table for w in syns}
    used |= {w for _, nouns in SCENES for w in nouns.split()} | set(COLOURS)
    words, counter = table[:n_concepts], 0
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    syllables = [c + v for c in consonants for v in vowels]
    while len(words) < n_concepts:
        synonyms = []
        while len(synonyms) < 2:
            n, word = counter, ""
            for _ in range(3):
                n, digit = divmod(n, len(syllables))
                word += syllables[digit]
            counter += 1
            if word not in used and plural(word) not in used:
                used |= {word, plural(word)}
                synonyms.append(word)
        words.append(tuple(synonyms))
    return words


class SpecError(ConfigError, ValueError):
    """A bad synthetic size or knob (a user-input error and a ValueError)."""


@dataclass(frozen=True)
class SyntheticSpec:
    """Everything that determines a synthetic dataset; equal specs give identical files."""

    n_train: int
    n_dev: int
    n_test: int
    n_regions: int
    feature_dim: int
    n_concepts: int
    concepts_per_image: int
    region_noise: float  # norm of the Gaussian noise of each region (prototypes: norm ~1)
    concept_sharing: float  # Zipf exponent of concept popularity (0 = uniform)
    mention_fraction: float  # expected fraction of an image's objects that a caption names
    captions_per_image: int = 5
    dtype: str = "float32"
    seed: int = 0
    attribute_rate: float = 0.5  # probability that an object has a colour

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, allowed: str) -> None:
            if not ok:
                raise SpecError(f"synthetic.{name}", getattr(self, name), allowed)

        for f in fields(self):
            value = getattr(self, f.name)
            kind = {"int": int, "float": (int, float), "str": str}[f.type]
            need(isinstance(value, kind) and not isinstance(value, bool), f.name, f"must be of type {f.type}")
            if f.type == "float":  # 1 and 1.0 give the same data: store one manifest for both
                object.__setattr__(self, f.name, float(value))
        for name in ("n_train", "n_dev", "n_test", "n_regions", "captions_per_image"):
            need(getattr(self, name) >= 1, name, "must be >= 1")
        need(self.feature_dim >= 2, "feature_dim", "must be >= 2")
        need(self.n_concepts >= 2, "n_concepts", "must be >= 2")
        need(
            1 <= self.concepts_per_image <= min(self.n_concepts, self.n_regions),
            "concepts_per_image",
            "must be between 1 and min(n_concepts, n_regions)",
        )
        need(0 <= self.region_noise < float("inf"), "region_noise", "must be >= 0")
        need(0 <= self.concept_sharing <= 5, "concept_sharing", "must be in [0, 5]")
        need(0 < self.mention_fraction <= 1, "mention_fraction", "must be in (0, 1]")
        need(0 <= self.attribute_rate <= 1, "attribute_rate", "must be in [0, 1]")
        need(self.dtype in ("float16", "float32"), "dtype", "allowed: 'float16', 'float32'")
        need(0 <= self.seed < 2**63, "seed", "must be in [0, 2**63)")

    def split_sizes(self) -> dict[str, int]:
        return {"train": self.n_train, "dev": self.n_dev, "test": self.n_test}


SIZES: dict[str, SyntheticSpec] = {
    # unit tests: well under a second
    "tiny": SyntheticSpec(
        n_train=200,
        n_dev=50,
        n_test=50,
        n_regions=6,
        feature_dim=32,
        n_concepts=24,
        concepts_per_image=3,
        region_noise=1.0,
        concept_sharing=0.8,
        mention_fraction=0.6,
    ),
    # the CPU demo: a dual encoder trains to a clearly non-trivial recall in minutes
    "small": SyntheticSpec(
        n_train=5000,
        n_dev=500,
        n_test=1000,
        n_regions=10,
        feature_dim=64,
        n_concepts=80,
        concepts_per_image=4,
        region_noise=1.0,
        concept_sharing=0.9,
        mention_fraction=0.5,
    ),
    # the papers' feature shape at a small image count (36 x 2048 regions, about 16 MB; captions of
    # 12.5 words on average, Flickr30K's about 12.3): a paper profile's models, encoders and stages
    # train end to end on a CPU in seconds
    "paper-shape": SyntheticSpec(
        n_train=128,
        n_dev=32,
        n_test=32,
        n_regions=36,
        feature_dim=2048,
        n_concepts=60,
        concepts_per_image=6,
        region_noise=1.5,
        concept_sharing=0.9,
        mention_fraction=0.5,
        dtype="float16",
    ),
    # Flickr30K's shape: 29,000 / 1,014 / 1,000 images of 36 x 2048 regions (about 4.3 GB)
    "f30k-shape": SyntheticSpec(
        n_train=29000,
        n_dev=1014,
        n_test=1000,
        n_regions=36,
        feature_dim=2048,
        n_concepts=300,
        concepts_per_image=6,
        region_noise=1.5,
        concept_sharing=0.9,
        mention_fraction=0.4,
        dtype="float16",
    ),
}


def synthetic_spec(size: str, **knobs) -> SyntheticSpec:
    """The spec of a named size with some knobs overridden (``seed=3, region_noise=2.0``)."""
    if size not in SIZES:
        raise SpecError("synthetic.size", size, f"allowed: {', '.join(SIZES)}")
    allowed = [f.name for f in fields(SyntheticSpec)]
    for name in knobs:
        if name not in allowed:
            raise SpecError(f"synthetic.{name}", knobs[name], f"unknown knob; allowed: {', '.join(allowed)}")
    return replace(SIZES[size], **knobs)


def _rng(spec: SyntheticSpec, *stream: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([spec.seed, *stream]))


@dataclass
class _Images:
    """Latent structure of a split's images; object slots are indexed 0..c-1."""

    concepts: np.ndarray  # (N, c) int, distinct concept ids
    salience: np.ndarray  # (N, c) float
    counts: np.ndarray  # (N, c) int >= 1, regions (instances) of each object
    colours: np.ndarray  # (N, c) int, -1 = no colour
    scenes: np.ndarray  # (N,) int
    layout: np.ndarray  # (N, R) int, object slot shown by each region, -1 = background


def _draw_images(spec: SyntheticSpec, n: int, rng: np.random.Generator) -> _Images:
    c, r, k = spec.concepts_per_image, spec.n_regions, spec.n_concepts
    log_pop = -spec.concept_sharing * np.log(np.arange(1, k + 1))
    concepts = np.empty((n, c), dtype=np.int64)
    for lo in range(0, n, 4096):  # Gumbel top-c = sampling without replacement by popularity
        keys = log_pop + rng.gumbel(size=(min(n, lo + 4096) - lo, k))
        concepts[lo : lo + len(keys)] = np.sort(np.argsort(-keys, axis=1)[:, :c], axis=1)
    salience = rng.uniform(*_SALIENCE, size=(n, c))
    counts = rng.choice(np.arange(1, len(_COUNT_P) + 1), p=_COUNT_P, size=(n, c))
    while (over := counts.sum(axis=1) > r).any():  # fit instances into the R regions
        rows = np.flatnonzero(over)
        counts[rows, np.argmax(counts[rows], axis=1)] -= 1
    colours = np.where(rng.random((n, c)) < spec.attribute_rate, rng.integers(0, len(COLOURS), size=(n, c)), -1)
    scenes = rng.integers(0, len(SCENES), size=n)
    ends = np.cumsum(counts, axis=1)
    slots = (np.arange(r)[None, :, None] >= ends[:, None, :]).sum(axis=2)  # (N, R)
    slots[slots >= c] = -1
    layout = np.take_along_axis(slots, np.argsort(rng.random((n, r)), axis=1), axis=1)
    return _Images(concepts, salience, counts, colours, scenes, layout)


def _prototypes(spec: SyntheticSpec) -> dict[str, np.ndarray]:
    """Unit-norm-ish directions shared by all splits."""
    rng = _rng(spec, 0)
    d = spec.feature_dim
    draw = lambda m: (rng.standard_normal((m, d)) / np.sqrt(d)).astype(np.float32)  # noqa: E731
    return {"concepts": draw(spec.n_concepts), "colours": draw(len(COLOURS)), "scenes": draw(len(SCENES))}


def _feature_chunks(
    spec: SyntheticSpec, images: _Images, protos: dict[str, np.ndarray], split_no: int
) -> Iterator[tuple[int, np.ndarray]]:
    n, r, d = len(images.scenes), spec.n_regions, spec.feature_dim
    per_chunk = max(1, _CHUNK_ELEMENTS // (r * d))
    noise_scale = np.float32(spec.region_noise / np.sqrt(d))
    for chunk_no, lo in enumerate(range(0, n, per_chunk)):
        hi = min(n, lo + per_chunk)
        layout = images.layout[lo:hi]
        is_object = (layout >= 0)[..., None]
        slot = np.maximum(layout, 0)

        def pick(a: np.ndarray, rows: slice = slice(lo, hi), slot: np.ndarray = slot) -> np.ndarray:
            """This chunk's rows of ``a``, at each region's slot of the layout."""
            return np.take_along_axis(a[rows], slot, axis=1)

        colour = pick(images.colours)
        salience = pick(images.salience).astype(np.float32)[..., None]
        feats = protos["concepts"][pick(images.concepts)] * salience
        feats += np.where((colour >= 0)[..., None], _COLOUR_STRENGTH * protos["colours"][np.maximum(colour, 0)], 0)
        background = _SCENE_STRENGTH * protos["scenes"][images.scenes[lo:hi]][:, None, :]
        feats = np.where(is_object, feats, background).astype(np.float32)
        noise = _rng(spec, split_no, 2, chunk_no).standard_normal(feats.shape, dtype=np.float32)
        feats += noise * noise_scale
        yield lo, feats.astype(spec.dtype)


def _phrase(rr: random.Random, synonyms: tuple[str, ...], count: int, colour: int) -> str:
    words = []
    if colour >= 0 and rr.random() < _COLOUR_MENTION:
        words.append(COLOURS[colour])
    elif rr.random() < 0.15:
        words.append(rr.choice(_FILLER_ADJECTIVES))
    noun = rr.choice(synonyms)
    words.append(noun if count == 1 else plural(noun))
    if count > 1:
        det = _NUMBERS[count] if rr.random() < 0.6 else rr.choice(("some", "several", "a few"))
    else:
        det = rr.choices(("a", "one", "the"), weights=(0.75, 0.1, 0.15))[0]
        if det == "a" and words[0][0] in "aeiou":
            det = "an"
    return f"{det} {' '.join(words)}"


def _caption(
    rr: random.Random, spec: SyntheticSpec, images: _Images, i: int, words: list[tuple[str, ...]]
) -> tuple[str, list[int]]:
    c = spec.concepts_per_image
    m = max(1, sum(rr.random() < spec.mention_fraction for _ in range(c)))
    sal = images.salience[i]
    # salience-weighted sampling without replacement (Efraimidis-Spirakis keys)
    chosen = sorted(range(c), key=lambda s: -(rr.random() ** (1.0 / sal[s])))[:m]
    phrases = [
        _phrase(rr, words[images.concepts[i, s]], int(images.counts[i, s]), int(images.colours[i, s])) for s in chosen
    ]
    text = phrases[0]
    if len(phrases) > 1:
        text += f" {rr.choice(_RELATIONS)} {phrases[1]}"
    for number, extra in enumerate(phrases[2:], start=3):
        text += f" and {extra}" if number == len(phrases) else f", {extra}"
    if rr.random() < _SCENE_MENTION:
        prep, nouns = SCENES[images.scenes[i]]
        text += f" {prep} {rr.choice(nouns.split())}"
    prefix = rr.choice(_PREFIXES)
    if prefix == "there is " and images.counts[i, chosen[0]] > 1:
        prefix = "there are "
    text = prefix + text
    if rr.random() < 0.5:
        text = text[0].upper() + text[1:] + "."
    return text, [int(images.concepts[i, s]) for s in chosen]


def _save_npz(path: Path, **arrays: np.ndarray) -> None:
    """Like ``np.savez_compressed`` but byte-reproducible (fixed member timestamps)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with zf.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.ascontiguousarray(array))


def _write_split(
    out: Path, spec: SyntheticSpec, split: str, protos: dict[str, np.ndarray], words: list[tuple[str, ...]]
) -> None:
    split_no = SPLITS.index(split) + 1
    n, cpi = spec.split_sizes()[split], spec.captions_per_image
    images = _draw_images(spec, n, _rng(spec, split_no, 1))
    ims_tmp, caps_tmp, truth_tmp = (
        out / f"{split}_ims.npy.tmp",
        out / f"{split}_caps.txt.tmp",
        out / f"{split}_truth.npz.tmp",
    )
    # Plain writes after an .npy header (what np.save writes): memory stays at one chunk, where
    # a writable memmap would hold the whole file in dirty, resident pages until it is closed.
    header = {
        "descr": np.lib.format.dtype_to_descr(np.dtype(spec.dtype)),
        "fortran_order": False,
        "shape": (n, spec.n_regions, spec.feature_dim),
    }
    with open(ims_tmp, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        for _, chunk in _feature_chunks(spec, images, protos, split_no):
            f.write(np.ascontiguousarray(chunk).data)
    rr = random.Random(int(np.random.SeedSequence([spec.seed, split_no, 3]).generate_state(1)[0]))
    mentions = np.zeros((n * cpi, spec.n_concepts), dtype=bool)
    with open(caps_tmp, "w", encoding="utf-8", newline="\n") as f:
        for i in range(n):
            for j in range(cpi):
                text, said = _caption(rr, spec, images, i, words)
                mentions[i * cpi + j, said] = True
                f.write(text + "\n")
    _save_npz(
        truth_tmp,
        image_concepts=images.concepts,
        image_counts=images.counts,
        image_colours=images.colours,
        image_scenes=images.scenes,
        caption_mentions=np.packbits(mentions, axis=1),
    )
    for tmp in (ims_tmp, caps_tmp, truth_tmp):
        os.replace(tmp, tmp.with_suffix(""))


def _manifest(spec: SyntheticSpec) -> dict:
    return {
        "generator": "itrlab.data.synthetic",
        "version": GENERATOR_VERSION,
        "spec": asdict(spec),
        "splits": list(SPLITS),
    }


def generate_synthetic(out_dir: str | Path, spec: SyntheticSpec, progress: Callable[[str], None] | None = None) -> Path:
    """Write splits train/dev/test of ``spec`` into ``out_dir`` and return it; a directory already holding this spec
    returns at once, one holding another spec or precomp files this generator did not start is a :class:`DataError`."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(out, f"cannot create output directory: {exc.strerror or exc}") from None
    wanted = _manifest(spec)
    with file_lock(out / ".synthetic.lock"):  # concurrent generations into one directory (trials)
        manifest_path = out / MANIFEST
        if manifest_path.exists():
            found = read_json(manifest_path, "manifest")
            if found == wanted:
                return out
            old = found.get("spec", {}) if isinstance(found, dict) else {}
            diff = [f"{k}: {old.get(k)!r} there, {v!r} requested" for k, v in wanted["spec"].items() if old.get(k) != v]
            if isinstance(found, dict) and found.get("version") != GENERATOR_VERSION:
                diff.append(f"generator version {found.get('version')!r} there, {GENERATOR_VERSION} now")
            raise DataError(
                manifest_path,
                "directory holds synthetic data of a different spec ("
                + "; ".join(diff)
                + "); pick another output directory",
            )
        ours = {f"{s}_{kind}" for s in SPLITS for kind in ("ims.npy", "caps.txt", "truth.npz")}
        foreign = sorted(p.name for p in out.iterdir() if p.name in ours or p.name.endswith(("_ims.npy", "_caps.txt")))
        if foreign and not (out / PARTIAL).exists():
            raise DataError(
                out,
                f"directory already holds data files ({', '.join(foreign)}) "
                "not written by the synthetic generator; pick another directory",
            )
        (out / PARTIAL).write_text(json.dumps(wanted, indent=1) + "\n", encoding="utf-8")
        protos, words = _prototypes(spec), concept_words(spec.n_concepts)
        for split in SPLITS:
            _write_split(out, spec, split, protos, words)
            if progress:
                progress(f"wrote {split}: {spec.split_sizes()[split]} images")
        atomic_write_text(manifest_path, json.dumps(wanted, indent=1) + "\n")
        (out / PARTIAL).unlink()
    return out


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The generator's command-line arguments (``--size``, ``--out`` and one flag per knob), shared by
    ``python -m itrlab.data.synthetic`` and ``itrlab make-synthetic`` so the two cannot drift."""
    parser.add_argument("--size", default="small", choices=list(SIZES), help="named size (default: %(default)s)")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    for f in fields(SyntheticSpec):
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            default=None,
            type={"int": int, "float": float, "str": str}[f.type],
            help="override (default of {size}: see SIZES)",
        )
    return parser


def run(args: dict) -> int:
    """Generate the data set ``args`` (parsed by :func:`add_arguments`) describe; prints where it is."""
    args = {k: v for k, v in args.items() if k == "size" or k == "out" or k in {f.name for f in fields(SyntheticSpec)}}
    size, out = args.pop("size"), args.pop("out")
    spec = synthetic_spec(size, **{k: v for k, v in args.items() if v is not None})
    start = time.perf_counter()
    generate_synthetic(out, spec, progress=lambda msg: _log.info(msg, extra=TO_STDERR))
    _log.info(f"synthetic '{size}' (seed {spec.seed}) ready in {out} ({time.perf_counter() - start:.1f} s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m itrlab.data.synthetic --size small --out DIR [--seed N] [--region-noise X ...]``."""
    parser = add_arguments(
        argparse.ArgumentParser(
            prog="itrlab make-synthetic",
            description="Generate a seeded synthetic ITR dataset in the SCAN precomp layout.",
        )
    )
    return run(vars(parser.parse_args(argv)))


if __name__ == "__main__":
    from itrlab.console_log import configure
    from itrlab.errors import UserInputError

    configure()  # the command line's console (itrlab.console_log)
    try:
        sys.exit(main())
    except UserInputError as exc:
        _log.error(f"itrlab: error: {exc}")
        sys.exit(exc.exit_code)
