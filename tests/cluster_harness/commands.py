"""``jobs/local_cluster.py``: ``up``, ``down``, ``status`` and ``ddp`` (the DDP check, run as a Ray job)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path

from cluster_harness.ddp_check import DEFAULT_EXPERIMENT
from cluster_harness.lifecycle import STATE_FILE, LocalCluster
from cluster_harness.processes import ClusterError
from itrlab.interrupts import interruption, sigterm_as_sigint

DESCRIPTION = "A multi-node Ray cluster on one machine, to check here what a KubeRay cluster does (docs/cluster.md)."


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jobs/local_cluster.py", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start PostgreSQL, MLflow, a Ray head and worker nodes under --root")
    down = sub.add_parser("down", help="stop every process of the cluster under --root")
    status = sub.add_parser("status", help="the cluster's addresses and nodes")
    for command in (up, down, status):
        command.add_argument(
            "--root",
            default="runs/local_cluster",
            help="the cluster's folder: its state, logs and shared storage (default: %(default)s)",
        )
    up.add_argument("--workers", type=int, default=2, help="worker nodes (default: %(default)s)")
    up.add_argument(
        "--cpus-per-worker", type=float, default=2, help="logical CPUs of each worker node (default: %(default)s)"
    )
    up.add_argument("--no-mlflow", action="store_true", help="no PostgreSQL and MLflow server")
    ddp = sub.add_parser("ddp", help="(as a Ray job on the cluster) the same tiny DDP trial on two nodes and on one")
    ddp.add_argument("--storage", required=True, help="the shared storage folder")
    ddp.add_argument(
        "--experiment", default=DEFAULT_EXPERIMENT, help="the experiment the trial trains (default: %(default)s)"
    )
    ddp.add_argument("overrides", nargs="*", metavar="key=value")
    return parser


def up(args: argparse.Namespace) -> None:
    """Start the cluster (stopped again if the start fails or is interrupted) and say how to use it."""
    cluster = LocalCluster.start(
        Path(args.root), workers=args.workers, cpus_per_worker=args.cpus_per_worker, mlflow=not args.no_mlflow
    )
    token = f"$(python -c \"import json; print(json.load(open('{cluster.root / STATE_FILE}'))['token'])\")"
    print(cluster.describe())
    print(
        f"\nsubmit a sweep:\n  RAY_AUTH_MODE=token RAY_AUTH_TOKEN={token} \\\n"
        f"  ray job submit --address {cluster.dashboard_url} --working-dir . -- python jobs/sweep_dbl.py "
        f"--preset smoke --storage {cluster.shared / 'sweeps'} "
        f"dataset.root={cluster.shared / 'data' / 'synthetic' / 'smoke'}\n"
        f"stop it: jobs/local_cluster.py down --root {args.root}"
    )


def status(args: argparse.Namespace) -> None:
    cluster = LocalCluster.load(Path(args.root))
    print(cluster.describe())
    with contextlib.suppress(Exception):
        alive = cluster.ray_nodes()
        print(f"  Ray lists {len(alive)} live node(s): {', '.join(n['node_name'] for n in alive)}")


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status: 0 done; 1 the cluster could not start (or no cluster under --root); 130 (Ctrl-C) or
    143 (SIGTERM) when ``up`` was interrupted, after stopping what it had started."""
    args = parser().parse_args(argv)
    sigterm_as_sigint()  # timeout, CI and systemd stop `up` with SIGTERM: it cleans up as Ctrl-C does
    try:
        if args.command == "up":
            up(args)
        elif args.command == "down":
            LocalCluster.load(Path(args.root)).stop()
            print(f"stopped the local cluster under {Path(args.root).resolve()}")
        elif args.command == "status":
            status(args)
        else:
            from cluster_harness.ddp_check import ddp_check

            ddp_check(Path(args.storage), args.overrides, args.experiment)
    except ClusterError as err:
        print(f"itrlab: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        reason, code = interruption()
        print(
            f"itrlab: local cluster {args.command}: {reason}"
            + ("; stopped every process it had started" if args.command == "up" else ""),
            file=sys.stderr,
        )
        return code
    return 0
