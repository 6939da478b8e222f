r"""A Ray cluster of a head and worker nodes on this machine, PostgreSQL-backed MLflow beside it (docs/cluster.md).

    python jobs/local_cluster.py up                   # PostgreSQL, MLflow, a head and 2 worker nodes
    python jobs/local_cluster.py status               # addresses, nodes and their Ray node ids
    python jobs/local_cluster.py down                 # stop every process it started (no `ray stop`)
    python jobs/local_cluster.py up --root /tmp/c --workers 3 --cpus-per-worker 1
    ray job submit ... -- python jobs/local_cluster.py ddp --storage <root>/shared/ddp \
        dataset.root=<root>/shared/data/synthetic/tiny   # one DDP trial on two nodes and on one

Each node runs in a PID and mount namespace of its own (`unshare`; root, or unprivileged user
namespaces) and sees only its own temp and working folders plus `<root>/shared`, the storage
every node shares (the RWX volume of k8s/). `up` prints the `ray job submit` line for a sweep.
Needs PostgreSQL's server programs (Debian: apt-get install postgresql) unless --no-mlflow.
Ctrl-C or SIGTERM (what `timeout`, CI and systemd send) during `up` stops everything it had started.
Exit status: 0 done, 1 the cluster could not start (or no cluster under --root), 130 (Ctrl-C) or 143
(SIGTERM) when interrupted. The cluster is a test bench: its code is the package ``cluster_harness`` beside the
tests (tests/cluster_harness/), which this job puts on the path.
"""

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the job

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"  # where the harness lives, beside the tests that use it


def main() -> int:
    sys.path.insert(0, str(TESTS))
    from cluster_harness.commands import main as run_command

    return run_command()


if __name__ == "__main__":
    sys.exit(main())
