"""``itrlab ray-stop DIR``: the Ray head that ``ray start --head --temp-dir DIR`` started on this machine, stopped
alone (:mod:`itrlab.ray_head`), where ``ray stop`` would end every Ray of the user's (a running sweep's too)."""

from __future__ import annotations

import argparse

from itrlab.cli.guard import guarded


@guarded
def ray_stop_main(args: argparse.Namespace) -> int:
    """Stop the head, and say in one line what was stopped; a folder that is not a Ray temp folder is one line
    and exit status 2."""
    from itrlab.errors import UserInputError
    from itrlab.ray_head import stop_head

    if not args.grace >= 0:
        raise UserInputError(f"--grace: got {args.grace:g}; give the seconds to wait for each stage, >= 0")
    head, count = stop_head(args.temp_dir, args.grace)
    at = f" (GCS {head.address})" if head.address else ""
    if count:
        print(f"itrlab: stopped the Ray head of {head.temp_dir}{at}: {count} processes")
    else:
        print(f"itrlab: no process of the Ray head of {head.temp_dir}{at} runs; nothing to stop")
    return 0


def add_ray_stop_parser(sub) -> None:
    """``ray-stop`` on the ``itrlab`` parser's subcommands ``sub``."""
    from itrlab.ray_head import GRACE_S

    stop = sub.add_parser(
        "ray-stop",
        help="stop the Ray head started with `ray start --head --temp-dir DIR`, and only it "
        "(docs/sweeps.md#running-on-a-ray-cluster)",
        description="Stop the Ray head that `ray start --head --temp-dir DIR` started on this machine: its "
        "processes (those naming DIR or the head's GCS address) and every process they started, the jobs' "
        "drivers and trials included. Other Rays on the machine (a sweep's own, another head) keep running, "
        "where `ray stop` would end every Ray process of yours. SIGTERM first (raylets, the rest, the GCS server), "
        "SIGKILL to what still runs after the grace period.",
    )
    stop.add_argument("temp_dir", metavar="DIR", help="the head's temp folder: the --temp-dir of `ray start --head`")
    stop.add_argument(
        "--grace",
        type=float,
        default=GRACE_S,
        help="seconds each stage of processes gets to end after SIGTERM before SIGKILL (default: %(default)g)",
    )
    stop.set_defaults(func=ray_stop_main)
