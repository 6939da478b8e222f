"""Benchmark: the size of each paper profile's trained model as a run logs it (docs/models.md#model-sizes).

For every profile (budget, paper, flickr8k) of each preset, the model of each distinct method is built from the
profile's config and its state dict's bytes counted: what ``weights.pt`` of ``runs:/<id>/model`` holds
(itrlab.bench.model_size). Nothing is trained. Prints a Markdown table.

    python jobs/bench_model_size.py                         # VSE++ and each paper's main table
    python jobs/bench_model_size.py --preset dbl_table2     # one preset
"""

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the job

import argparse
import sys

from itrlab.errors import ItrlabError, report

# the sweeps whose profiles are measured by default: VSE++ (ConVSE's Table III), then each paper's main table
PRESETS = ["convse_table3", "convse_table2", "dbl_table2", "coder_table2", "ascl_table2"]


def main(argv=None) -> int:
    from itrlab.bench.model_size import preset_sizes, table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", action="append", help=f"a preset (repeatable; default: {', '.join(PRESETS)})")
    args = parser.parse_args(argv)
    try:
        sizes = [size for preset in args.preset or PRESETS for size in preset_sizes(preset)]
    except ItrlabError as err:
        return report(err)
    print(table(sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
