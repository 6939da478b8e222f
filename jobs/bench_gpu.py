"""The GPU check in one call: paper-dimension training (VSE++, xattn, CODER, AsCL; fp32 and bf16), grouped
training at G = 1, 3, 9, 27, evaluation, and 100 steps of each paper recipe, within 8 minutes, on
synthetic data of the papers' shape generated on the spot; a dated page and the throughput records that
`jobs/sweep.py --dry-run` reads. See itrlab.bench.gpu and docs/speed.md.

    python jobs/bench_gpu.py                         # on a CUDA machine: docs/results/<date>-gpu-check.md
    python jobs/bench_gpu.py --out /tmp/check        # everything under one folder
    python jobs/bench_gpu.py --device cpu --quick    # every section at small sizes, about a minute
"""

import sys

from itrlab.bench.gpu import bench_gpu_cli  # importing itrlab sets OpenMP's wait policy first (itrlab.threads)

if __name__ == "__main__":
    sys.exit(bench_gpu_cli())
