"""The ``coco`` format (the default): an image folder (``--images``) and a COCO-format caption file
(``--captions``/``--annotations``: ``images`` with ``id`` and ``file_name``, ``annotations`` with ``image_id`` and
``caption``; :mod:`itrlab.extract.captions` reads and checks it), split by ``--split-fractions`` and ``--seed``
or by ``--split-file``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from itrlab.extract.captions import (
    CocoImage,
    assign_fractions,
    assign_from_file,
    check_split_names,
    load_coco_captions,
    parse_fractions,
)
from itrlab.extract.readers.registry import Reader, SplitPlan, register_reader


@register_reader("coco")
class CocoReader(Reader):
    summary = "a COCO caption file"

    def needs(self) -> str:
        return "pass --images and --captions (a COCO caption file), or --flickr8k DIR"

    def read(self) -> SplitPlan:
        options = self.options
        coco = load_coco_captions(options.captions)
        messages = [f"captions: {len(coco.images)} images, {coco.n_annotations} annotations in {coco.path}"]
        if coco.blank_captions:
            messages.append(f"{coco.blank_captions} blank captions left out")
        photos = self.cover(coco.images, coco.path, messages)
        selection = self.select(coco.images, coco.path, messages)
        unassigned = 0
        if options.split_file is not None:
            splits, unassigned = assign_from_file(selection.images, options.split_file, coco.images)
            if unassigned:
                messages.append(
                    f"{unassigned} images with captions are in no split of {options.split_file} and are left out"
                )
            split_source: dict[str, Any] = {"file": str(Path(options.split_file).resolve())}
        else:
            names = check_split_names(options.split_names)
            fractions = parse_fractions(options.split_fractions, names)
            splits = assign_fractions(selection.images, fractions, names, options.seed)
            split_source = {"fractions": dict(zip(names, fractions)), "seed": options.seed}
        report = {
            "images_in_file": len(coco.images),
            "annotations": coco.n_annotations,
            "blank_captions": coco.blank_captions,
            **selection.to_json(),
            "unassigned_images": unassigned,
            "split": split_source,
            "photos": photos,
        }
        return splits, report, messages

    def source(self) -> dict[str, str]:  # names no format: the default, as manifests written before formats had names
        return {"images": str(self.images_dir().resolve()), "captions": str(Path(self.options.captions).resolve())}

    @classmethod
    def images_of(cls, source: dict[str, str]) -> list[CocoImage] | None:
        if not source.get("captions") or not Path(source["captions"]).is_file():
            return None
        return list(load_coco_captions(source["captions"]).images)
