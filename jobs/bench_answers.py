"""How fast the commands answer bad input, --list and --dry-run, on this checkout and as on a fresh clone.

    python jobs/bench_answers.py                 # every answer, 3 repeats, warm and fresh
    python jobs/bench_answers.py --repeats 5 --state fresh --json runs/bench/answers.json

Each answer runs in a new process; the table gives its median wall and CPU seconds, its ratio to the bare
interpreter's start measured in the same run, and whether it is under the target (3 s on 2 quiet cores). Quote
the load average beside the times: on a busy machine they are upper bounds. Exit status 1 when an answer gave
the wrong exit status. See itrlab.bench.answers.
"""

from __future__ import annotations

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the job

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 3.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per answer and state (default 3)")
    parser.add_argument("--state", choices=("both", "warm", "fresh"), default="both")
    parser.add_argument("--json", type=Path, help="also write the timings here")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats: got {args.repeats}; at least 1")
    import mlflow

    from itrlab.bench.answers import answers, measure, table, to_dict

    with tempfile.TemporaryDirectory(prefix="itrlab_bench_answers_") as scratch:
        store = f"sqlite:///{Path(scratch) / 'mlflow.db'}"  # a real store holding one run, not the one asked for
        client = mlflow.MlflowClient(store)
        client.create_run(client.create_experiment("bench"))
        states = ("warm", "fresh") if args.state == "both" else (args.state,)
        before = os.getloadavg()
        timings = measure(lambda root: answers(root, store), REPO, args.repeats, states)
        after = os.getloadavg()
    print(table(timings, TARGET_SECONDS, (before, after)))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(to_dict(timings), indent=1))
    return 0 if all(t.right for t in timings) else 1


if __name__ == "__main__":
    sys.exit(main())
