"""Extract EfficientNet-Lite0 features from real images into the precomp layout.

    python jobs/extract_features.py --images PHOTOS_DIR --captions captions.json \\
        --out data/coco_mini_precomp --split-fractions 0.6,0.2,0.2 --seed 0 [--dtype float16] [--ray]

A folder of photos also gets its data set config beside the features, and the command that trains on it is
printed last (docs/data.md#your-own-photos). Re-running the same command resumes an interrupted job. See ``--help`` and
``itrlab.extract.job`` for the output files and options (docs/data.md).
"""

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the job

import sys

from itrlab.extract.ray_tasks import main

if __name__ == "__main__":
    sys.exit(main())
