"""The ``karpathy`` format: Karpathy's split files (``dataset_flickr8k.json``, ``dataset_flickr30k.json``,
``dataset_coco.json``), one JSON per data set, the layout most published Flickr30K and COCO splits come from::

    {"dataset": "flickr30k",
     "images": [{"filename": "1000092795.jpg", "split": "train", "imgid": 0,
                 "sentences": [{"raw": "Two young guys ...", "tokens": ["two", "young", ...]}, ...]}, ...]}

``dataset_coco.json`` adds ``filepath`` (``train2014``, ``val2014``: the photo's sub-folder) and ``cocoid``.
``--format karpathy --annotations FILE --images DIR`` reads it as:

- each photo is ``filepath/filename`` (``filename`` alone where there is no ``filepath``) inside ``--images``;
- its id is ``cocoid`` where the file has it (COCO's own image ids), else ``imgid``, else its position in the
  file (from 0); two images with one id, or one file named twice, are refused;
- its captions are its sentences' ``raw`` text (made one line), or their ``tokens`` joined by spaces where a
  sentence has no ``raw``, in the file's order; blank ones are counted and left out; ``--captions-per-image``
  and ``--pad-captions`` apply as to COCO captions (COCO's images have 5 to 7);
- its split is the file's: ``train`` and ``restval`` (COCO's validation images outside Karpathy's val and test,
  which the published COCO results train on) become ``train``, ``val`` becomes ``dev`` (the dataset configs'
  validation prefix), ``test`` stays ``test``; each split keeps the file's order. ``--split-file`` and
  ``--split-fractions`` do not apply.

Bad input is one :class:`~itrlab.errors.DataError` naming the file and the entry, before anything is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from itrlab.errors import DataError
from itrlab.extract.captions import CocoImage, normalise_caption
from itrlab.extract.readers.registry import Reader, SplitPlan, register_reader
from itrlab.files import read_json

SPLITS = {"train": "train", "restval": "train", "val": "dev", "test": "test"}  # Karpathy's name -> file prefix
LAYOUT = 'Karpathy\'s {"images": [{"filename", "split", "sentences": [{"raw", "tokens"}]}]}'


def _caption(sentence: Any) -> str | None:
    if not isinstance(sentence, dict):
        return None
    if isinstance(sentence.get("raw"), str):
        return normalise_caption(sentence["raw"])
    tokens = sentence.get("tokens")
    if isinstance(tokens, list) and all(isinstance(token, str) for token in tokens):
        return normalise_caption(" ".join(tokens))
    return None


def read_karpathy(path: str | Path) -> tuple[list[tuple[CocoImage, str]], dict[str, Any]]:
    """Each image of a Karpathy split file with its split as the file names it (file order), and what was read:
    ``dataset``, ``sentences``, ``blank_captions``. Nothing but the file is read."""
    path = Path(path)
    doc = read_json(path, "Karpathy split file")
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), list):
        raise DataError(path, f"expected {LAYOUT}")
    images: list[tuple[CocoImage, str]] = []
    ids: dict[int, int] = {}
    files: dict[str, int] = {}
    sentences = blank = 0
    for i, entry in enumerate(doc["images"]):
        if not isinstance(entry, dict):
            raise DataError(path, f"images[{i}] must be an object, got {entry!r:.60}")
        name, folder = entry.get("filename"), entry.get("filepath")
        if not isinstance(name, str) or not name.strip() or not isinstance(folder, (str, type(None))):
            raise DataError(
                path, f"images[{i}]: 'filename' must be a non-empty string (and 'filepath' a string), got {name!r:.60}"
            )
        file_name = f"{folder}/{name}" if folder else name
        split = entry.get("split")
        if split not in SPLITS:
            raise DataError(path, f"images[{i}] ({file_name}): split {split!r:.40}; allowed: {', '.join(SPLITS)}")
        image_id = next((entry[key] for key in ("cocoid", "imgid") if key in entry), i)
        if not isinstance(image_id, int) or isinstance(image_id, bool):
            raise DataError(path, f"images[{i}] ({file_name}): the image id must be an integer, got {image_id!r:.40}")
        if image_id in ids:
            raise DataError(path, f"images[{i}] ({file_name}): image id {image_id} is also images[{ids[image_id]}]'s")
        if file_name in files:
            raise DataError(path, f"images[{i}]: {file_name} is also images[{files[file_name]}]")
        ids[image_id], files[file_name] = i, i
        if not isinstance(entry.get("sentences"), list):
            raise DataError(path, f'images[{i}] ({file_name}): \'sentences\' must be a list of {{"raw", "tokens"}}')
        captions = []
        for j, sentence in enumerate(entry["sentences"]):
            text = _caption(sentence)
            if text is None:
                raise DataError(
                    path,
                    f"images[{i}] ({file_name}): sentences[{j}] has neither a 'raw' string nor "
                    f"a 'tokens' list of strings",
                )
            sentences += 1
            if text:
                captions.append(text)
            else:
                blank += 1
        images.append((CocoImage(image_id, file_name, tuple(captions)), SPLITS[split]))
    return images, {"dataset": doc.get("dataset"), "sentences": sentences, "blank_captions": blank}


@register_reader("karpathy")
class KarpathyReader(Reader):
    summary = "Karpathy's split file, dataset_{flickr8k,flickr30k,coco}.json"
    reads = "the split of its file (train and restval -> train, val -> dev, test)"
    own_split = True

    def read(self) -> SplitPlan:
        path = Path(self.options.captions)
        images, read = read_karpathy(path)
        messages = [
            f"Karpathy split file ({read['dataset'] or 'no dataset named'}): {len(images)} images, "
            f"{read['sentences']} sentences in {path}"
        ]
        if read["blank_captions"]:
            messages.append(f"{read['blank_captions']} blank captions left out")
        photos = self.cover([image for image, _ in images], path, messages)
        selection = self.select([image for image, _ in images], path, messages)
        chosen = {image.image_id: image for image in selection.images}
        splits: dict[str, list[CocoImage]] = {name: [] for name in dict.fromkeys(SPLITS.values())}
        for image, split in images:
            if image.image_id in chosen:
                splits[split].append(chosen[image.image_id])
        splits = {name: split_images for name, split_images in splits.items() if split_images}
        messages.append(
            "splits: "
            + ", ".join(f"{name} {len(split_images)}" for name, split_images in splits.items())
            + " images (train and restval -> train, val -> dev)"
        )
        report = {
            "images_in_file": len(images),
            "annotations": read["sentences"],
            "blank_captions": read["blank_captions"],
            **selection.to_json(),
            "unassigned_images": 0,
            "split": {"karpathy": str(path.resolve()), "dataset": read["dataset"], "names": SPLITS},
            "photos": photos,
        }
        return splits, report, messages

    @classmethod
    def images_of(cls, source: dict[str, str]) -> list[CocoImage] | None:
        if not Path(source[cls.name]).is_file():
            return None
        return [image for image, _ in read_karpathy(source[cls.name])[0]]
