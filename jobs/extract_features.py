"""Extract EfficientNet-Lite0 features from real images into the precomp layout.

    python jobs/extract_features.py          # coco_mini beside the checkout -> data/coco_mini_precomp
    python jobs/extract_features.py --images ../shared/data/coco_mini/train2017 \\
        --captions ../shared/data/coco_mini/annotations/captions_train2017.json \\
        --out data/coco_mini_precomp --split-fractions 0.6,0.2,0.2 --seed 0 [--dtype float16] [--ray]

Re-running the same command resumes an interrupted job. See ``--help`` and
``itrlab.data.extract`` for the output files and options.
"""

import sys
from pathlib import Path

from itrlab.data.extract_distributed import main

COCO_MINI = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "coco_mini"

if __name__ == "__main__":
    sys.exit(main(default_images=COCO_MINI / "train2017",
                  default_captions=COCO_MINI / "annotations" / "captions_train2017.json"))
