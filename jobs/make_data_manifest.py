"""Write a data set's manifest from a reference copy: what ``itrlab data NAME --from ...`` verifies a copy against.

    python jobs/make_data_manifest.py FOLDER --name flickr8k --images images \\
        --captions captions_flickr8k.json --split-file splits.txt --pool 3x3,2x2,1x1
    # -> configs/datasets/manifests/flickr8k.json.gz

For maintainers: run it on the reference copy when the data set changes, and commit the manifest. It records
the sha256 of every image (by the split its split file gives), of the caption file and of the folder's other
files (optional in a copy), the official split lists, where the raw copy and the features go (``--raw``,
``--precomp``; default ``data/NAME`` and ``data/NAME_precomp``) and the extraction's ``--dtype``, ``--pool``
and ``--text`` (itrlab.acquire.manifest). The same folder gives the same bytes. A folder whose split file does
not list each of its images once is refused (one line, exit status 2).
"""

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the job

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from itrlab.acquire.manifest import SUFFIX, ExtractSettings, manifests_dir, write_manifest
from itrlab.errors import ItrlabError, report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="make_data_manifest", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the reference copy of the data set")
    parser.add_argument("--name", required=True, help="the data set's name: `itrlab data NAME`")
    parser.add_argument("--images", required=True, help="the image folder, inside FOLDER")
    parser.add_argument("--captions", required=True, help="the COCO-format caption file, inside FOLDER")
    parser.add_argument(
        "--split-file", required=True, help="the split file ('<file name> <split>' lines), inside FOLDER"
    )
    parser.add_argument("--raw", help="where `itrlab data` puts the raw copy (default: data/NAME)")
    parser.add_argument("--precomp", help="where it extracts the features (default: data/NAME_precomp)")
    parser.add_argument("--dtype", default="float16", help="the features' dtype (default: %(default)s)")
    parser.add_argument("--pool", default=None, help="the pooled layouts, as jobs/extract_features.py --pool")
    parser.add_argument("--text", default="tokens", help="the text features: tokens, sentence, both or none")
    parser.add_argument(
        "--out", type=Path, help=f"the manifest file (default: configs/datasets/manifests/NAME{SUFFIX})"
    )
    args = parser.parse_args(argv)
    out = args.out or manifests_dir() / f"{args.name}{SUFFIX}"
    try:
        extract = ExtractSettings(dtype=args.dtype, pool=args.pool, text=None if args.text == "none" else args.text)
        manifest = write_manifest(
            args.folder,
            out,
            name=args.name,
            images=args.images,
            captions=args.captions,
            split_file=args.split_file,
            raw=args.raw,
            precomp=args.precomp,
            extract=extract,
        )
    except ItrlabError as err:
        return report(err)
    except ValidationError as err:  # a setting ExtractSettings refuses
        print(f"make_data_manifest: error: {err.errors()[0]['msg']}", file=sys.stderr)
        return 2
    sizes = ", ".join(f"{split} {len(images):,}" for split, images in manifest.splits.items())
    print(
        f"{out}: {manifest.name}, {sum(len(i) for i in manifest.splits.values()):,} images ({sizes}), "
        f"{manifest.captions.path}, {len(manifest.optional)} optional file(s); {out.stat().st_size / 1e3:,.0f} kB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
