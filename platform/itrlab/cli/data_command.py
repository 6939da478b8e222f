"""``itrlab data NAME --from PATH_OR_URL``: a data set from a folder, an archive or a URL, verified against its
shipped manifest, put in place, and its image and text features extracted (:mod:`itrlab.acquire`)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from itrlab.cli.guard import guarded, interrupted, say_where_it_writes


def _names() -> list[str]:
    from itrlab.acquire import manifest_names

    return manifest_names()


@guarded
def data_main(args: argparse.Namespace) -> int:
    """Run the steps, then print one line per step with its time, the extraction's report, and where the features
    are; bad input and a copy that differs from the manifest are one line and exit status 2."""
    from itrlab.acquire import find_manifest, install, read_manifest
    from itrlab.errors import UserInputError

    if not args.timeout > 0:
        raise UserInputError(f"--timeout: got {args.timeout:g}; give the seconds to wait for a server, > 0")
    if args.threads is not None and args.threads < 1:
        raise UserInputError(f"--threads: got {args.threads}; must be >= 1")
    manifest = read_manifest(find_manifest(args.name))
    say_where_it_writes(
        [("the raw copy", manifest.raw), *([] if args.no_features else [("the features", manifest.precomp)])],
        tracking=False,
    )
    started = time.perf_counter()
    try:
        done = install(
            manifest,
            args.source,
            timeout=args.timeout,
            features=not args.no_features,
            threads=args.threads,
            device=args.device,
            text_model=args.text_model,
            progress=not args.no_progress,
        )
    except KeyboardInterrupt:
        return interrupted("interrupted; the same command resumes: what was downloaded, verified and extracted is kept")
    for line in done.lines:
        print(line)
    width = max(len(step.name) for step in done.steps)
    for step in done.steps:
        print(f"{step.name:<{width}}  {_duration(step.seconds):>9}  {step.what}")
    where = f"{done.raw} (raw copy, verified)"
    if not args.no_features:
        where += f", {done.precomp} (features)"
    print(f"{manifest.name}: ready in {where}; {_duration(time.perf_counter() - started)} in all")
    return 0


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


def add_data_parser(sub) -> None:
    """``data`` on the ``itrlab`` parser's subcommands ``sub``."""
    from itrlab.config.choices import list_choices

    data = sub.add_parser(
        "data",
        help="get a data set from a folder, an archive or a URL, verified against its shipped manifest, and "
        "extract its features (docs/data.md#flickr8k)",
        description="Take a data set as you found it (its folder, a zip or tar archive of the folder, or an "
        "http(s) URL of the archive), verify every file against the manifest shipped in "
        "configs/datasets/manifests/, put the raw copy in place and extract its image and text features. "
        "Each step's time is printed. Run the same command again to resume after an interruption.",
    )
    list_choices(
        data.add_argument("name", metavar="NAME", help="the data set: a shipped manifest's name, or a manifest file"),
        _names,
    )
    data.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="PATH_OR_URL",
        help="the data set's folder, a zip or tar archive of it, or an http(s) URL of such an archive",
    )
    data.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds to wait for a server to answer or send more (default: %(default)g)",
    )
    data.add_argument(
        "--no-features", action="store_true", help="stop once the raw copy is verified and in place: extract nothing"
    )
    data.add_argument(
        "--threads", type=int, default=None, help="torch threads of the extraction (default: the CPUs it may use)"
    )
    data.add_argument("--device", default="cpu", help="the extraction's device: cpu, cuda, cuda:N or auto")
    data.add_argument(
        "--text-model",
        type=Path,
        default=None,
        help="the text features' model: a local Hugging Face folder (default: the packaged all-MiniLM-L6-v2)",
    )
    data.add_argument("--no-progress", action="store_true", help="no progress bars")
    data.set_defaults(func=data_main)
