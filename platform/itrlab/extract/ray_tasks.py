"""Feature extraction across a Ray cluster when there is one, in this process otherwise, and its command line
(``python jobs/extract_features.py --help``; docs/data.md gives examples).

The job of :mod:`itrlab.extract.job` (same plan, chunks, shards, resume and assembly) with the pending chunks
computed by Ray tasks: the driver reads each chunk's image bytes (the workers need no access to the image folder),
a task encodes them with EfficientNet-Lite0 (loaded once per worker) on ``cpus_per_task`` threads, and the driver
writes each shard as its task finishes. At most two tasks per worker slot are in flight, so the driver holds only
a few chunks of bytes. Ray is used with ``--ray`` or a set ``RAY_ADDRESS`` (``--no-ray`` overrides both), imported
only then. The command line reports what the caption file covers of the image folder (:mod:`itrlab.extract.coverage`)
and, for a folder of photos, writes its data set config and prints the command that trains on it
(:mod:`itrlab.extract.dataset_config`).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from itrlab.console_log import TO_STDERR
from itrlab.errors import ItrlabError, UserInputError, report
from itrlab.extract import (
    job,
    text,  # noqa: F401  the import list of the steps after the images: each registers itself
)
from itrlab.extract.captions import CAPTIONS_PER_IMAGE, DEFAULT_SPLIT_NAMES
from itrlab.extract.dataset_config import config_name, write_dataset_config
from itrlab.extract.image_encoder import ImageEncoder
from itrlab.extract.images import ImageSource, read_source
from itrlab.extract.job import RunStats
from itrlab.extract.plan import DTYPES, MANIFEST, WORK_DIR, ExtractOptions, Plan
from itrlab.extract.readers import DEFAULT_FORMAT, READERS, Reader, format_names, reader_of
from itrlab.extract.shards import Chunk, ChunkResult, encode_chunk
from itrlab.extract.steps import STEPS, Step

_log = logging.getLogger(__name__)

_WORKER_ENCODER: dict[str, Any] = {}  # one encoder per Ray worker process, by device


def ray_requested(flag: bool | None) -> bool:
    """``--ray`` (True), ``--no-ray`` (False), or None: use Ray when ``RAY_ADDRESS`` is set."""
    if flag is not None:
        return flag
    return bool(os.environ.get("RAY_ADDRESS"))


def _chunk_task(
    chunk: Chunk, sources: list[ImageSource], batch_size: int, dtype: str, threads: int, device: str
) -> tuple[ChunkResult, float]:
    """A Ray task: encode one chunk; returns the result and the seconds spent loading the model."""
    import torch

    torch.set_num_threads(threads)
    load = 0.0
    encoder = _WORKER_ENCODER.get(device)
    if encoder is None:
        start = time.perf_counter()
        encoder = _WORKER_ENCODER[device] = ImageEncoder(device)
        load = time.perf_counter() - start
    return encode_chunk(chunk, sources, encoder, batch_size, dtype), load


def run_ray(plan: Plan, cpus_per_task: int = 1) -> RunStats:
    """Compute the pending chunks as Ray tasks and write their shards here, as they finish."""
    try:
        import ray
    except ImportError:
        raise UserInputError("--ray: ray is not installed (pip install 'ray[default]')") from None

    options = plan.options
    started_ray = False
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS") or None
        try:  # "local": a Ray of its own, even where `ray start --head` runs on this machine
            ray.init(address=address or "local", logging_level="WARNING", log_to_driver=True)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ItrlabError(
                f"cannot connect to the Ray cluster at {address or '(a new local instance)'}: {exc}"
            ) from None
        started_ray = True
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        slots = max(1, cpus // cpus_per_task)
        stats = RunStats("ray", min(slots, max(1, len(plan.pending))), cpus_per_task)
        if not plan.pending:
            return stats
        gpus = 1 if options.device.startswith("cuda") else 0
        task = ray.remote(num_cpus=cpus_per_task, num_gpus=gpus, max_retries=2)(_chunk_task)
        queue = list(plan.pending)
        in_flight: dict[Any, Chunk] = {}
        start = time.perf_counter()
        try:
            with job.progress_bar(plan) as bar:
                while queue or in_flight:
                    while queue and len(in_flight) < 2 * slots:
                        chunk = queue.pop(0)
                        sources = [read_source(plan.images_dir, image) for image in chunk.images]
                        ref = task.remote(
                            chunk, sources, options.batch_size, options.dtype, cpus_per_task, options.device
                        )
                        in_flight[ref] = chunk
                    done, _ = ray.wait(list(in_flight), num_returns=1)
                    chunk = in_flight.pop(done[0])
                    try:
                        result, load = ray.get(done[0])
                    except ray.exceptions.RayError as exc:
                        raise ItrlabError(f"Ray task for chunk {chunk.name} failed: {exc}") from None
                    job.store_result(plan, chunk, result)
                    stats.load_seconds = max(stats.load_seconds, load)
                    stats.images += len(chunk.images)
                    bar.update(len(chunk.images))
        finally:
            for ref in in_flight:
                ray.cancel(ref)
        stats.encode_seconds = time.perf_counter() - start
        return stats
    finally:
        if started_ray:
            ray.shutdown()


def extract_dataset(
    options: ExtractOptions, use_ray: bool | None = None, cpus_per_task: int = 1, log=lambda s: None
) -> dict[str, Any]:
    """The extraction job, on Ray when :func:`ray_requested` says so, in this process otherwise.

    Returns the manifest written to ``{out}/extract.json``.
    """
    if cpus_per_task < 1:
        raise UserInputError(f"--cpus-per-task: got {cpus_per_task}; must be >= 1")
    if ray_requested(use_ray):
        return job.extract_dataset(options, runner=lambda plan: run_ray(plan, cpus_per_task), log=log)
    return job.extract_dataset(options, runner=job.run_local, log=log)


# ---------------------------------------------------------------------------------------------
# Command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="extract_features",
        description="Turn a data set's photos and captions (a folder of images and a COCO caption file, a Flickr8K "
        "folder as downloaded, or another --format) into the precomp layout with EfficientNet-Lite0 grid "
        "features (49 regions x 1280 per image). Resumable: re-run the same command after an "
        "interruption; a finished folder is reused while its images and settings are unchanged.",
    )
    io_group = parser.add_argument_group("input and output")
    io_group.add_argument(
        "--format",
        default=None,
        help=f"the data set's format: what --annotations names and which options apply "
        f"(default: {DEFAULT_FORMAT}; docs/data.md#formats; choices: {', '.join(format_names())})",
    )
    io_group.add_argument("--images", type=Path, default=None, help="image folder (file names as in the caption file)")
    io_group.add_argument(
        "--annotations",
        "--captions",
        dest="captions",
        type=Path,
        default=None,
        metavar="PATH",
        help="what the format reads the captions from; with the default format the COCO-format "
        "caption JSON (images: id, file_name; annotations: image_id, caption)",
    )
    for name, reader in READERS.items():
        if reader.shorthand:
            io_group.add_argument(
                f"--{name}",
                dest=_shorthand(name),
                type=Path,
                default=None,
                metavar="PATH",
                help=f"instead of --images/--captions: --format {name} --annotations PATH, {reader.summary}",
            )
    io_group.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (required unless the format has a default, such as "
        + "; ".join(
            f"{reader.flag()}: {reader.default_out}" for reader in READERS.values() if reader.default_out is not None
        )
        + "), the `root` of the data set config that reads it",
    )
    io_group.add_argument(
        "--name",
        default=None,
        help="the data set's name: the data set config written beside the features, OUT/NAME.yaml, and the "
        "experiment of the training command printed (default: the name of the --out folder; not a shipped "
        "data set's)",
    )
    io_group.add_argument("--overwrite", action="store_true", help="replace an extraction with other settings in --out")
    io_group.add_argument("--keep-shards", action="store_true", help="keep the per-chunk shards after assembly")

    split = parser.add_argument_group("splits and captions")
    choice = split.add_mutually_exclusive_group()
    choice.add_argument(
        "--split-fractions", default=None, help="comma-separated fractions, one per split name (default: 0.6,0.2,0.2)"
    )
    choice.add_argument(
        "--split-file",
        type=Path,
        default=None,
        help='split file: JSON {"train": [file names or ids], ...}, JSON {"name or id": "split"}, '
        "Karpathy's dataset_coco.json, or text lines '<file name or id> <split>'",
    )
    split.add_argument(
        "--split-names",
        default=",".join(DEFAULT_SPLIT_NAMES),
        help="split names for --split-fractions (default: %(default)s)",
    )
    split.add_argument("--seed", type=int, default=0, help="seed of the fraction split (default: %(default)s)")
    split.add_argument(
        "--captions-per-image",
        type=int,
        default=CAPTIONS_PER_IMAGE,
        help="captions kept per image (default: %(default)s); images with more keep their first ones",
    )
    split.add_argument(
        "--pad-captions",
        action="store_true",
        help="pad images with fewer captions by repeating theirs (default: exclude them)",
    )

    run = parser.add_argument_group("extraction")
    run.add_argument("--dtype", choices=DTYPES, default="float32", help="storage dtype (default: %(default)s)")
    run.add_argument(
        "--skip-bad",
        action="store_true",
        help="leave out missing, unreadable or corrupt images (listed) instead of stopping",
    )
    run.add_argument("--batch-size", type=int, default=16, help="images per forward pass (default: %(default)s)")
    run.add_argument(
        "--chunk-size",
        type=int,
        default=256,
        help="images per shard / Ray task; the unit of resuming (default: %(default)s)",
    )
    run.add_argument(
        "--threads", type=int, default=None, help="torch threads in-process (default: the CPUs this process may use)"
    )
    run.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default: %(default)s)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument(
        "--pool",
        default=None,
        help="also write layouts pooled from the stored 7x7 grid, each a precomp folder "
        "OUT/pool{G}x{G}/: e.g. 3x3,2x2,1x1 (1x1 = one vector per image); no second pass "
        "over the images",
    )
    ray_group = run.add_mutually_exclusive_group()
    ray_group.add_argument(
        "--ray",
        dest="ray",
        action="store_true",
        default=None,
        help="run the chunks as Ray tasks (default when RAY_ADDRESS is set)",
    )
    ray_group.add_argument(
        "--no-ray", dest="ray", action="store_false", help="run in this process even if RAY_ADDRESS is set"
    )
    run.add_argument(
        "--cpus-per-task", type=int, default=1, help="CPUs (and torch threads) per Ray task (default: %(default)s)"
    )

    for step in STEPS.values():
        step.add_arguments(parser)
    return parser


def _shorthand(name: str) -> str:
    return f"format_{name}"  # the argparse destination of a format's own flag (--flickr8k DIR)


def chosen_format(args: argparse.Namespace) -> tuple[type[Reader], Path | None]:
    """The reader the command line asks for (``--format``, or a format's own flag) and what it reads the captions
    from; a UserInputError for an unknown format or a flag that contradicts another."""
    flags = [(READERS[name], value) for name in READERS if (value := getattr(args, _shorthand(name), None)) is not None]
    if not flags:
        return reader_of(args.format or DEFAULT_FORMAT), args.captions
    reader, path = flags[0]
    given = [
        option
        for option, value in (
            ("--images", args.images),
            ("--captions", args.captions),
            ("--format", args.format),
            *((f"--{r.name}", v) for r, v in flags[1:]),
        )
        if value is not None
    ]
    if given:
        raise UserInputError(
            f"{reader.flag()} reads the images and captions of its folder; {', '.join(given)} does not apply"
        )
    return reader, path


def options_from_args(args: argparse.Namespace) -> ExtractOptions:
    names = tuple(n.strip() for n in args.split_names.split(",") if n.strip())
    fractions = args.split_fractions
    reader, captions = chosen_format(args)
    if not reader.own_split and fractions is None and args.split_file is None:
        fractions = "0.6,0.2,0.2" if len(names) == 3 else None
    return ExtractOptions(
        images=args.images,
        captions=captions,
        format=reader.name,
        out=output_folder(args),
        split_fractions=fractions,
        pool=args.pool,
        split_names=names,
        split_file=args.split_file,
        seed=args.seed,
        dtype=args.dtype,
        skip_bad=args.skip_bad,
        pad_captions=args.pad_captions,
        captions_per_image=args.captions_per_image,
        batch_size=args.batch_size,
        chunk_size=args.chunk_size,
        threads=args.threads,
        device=args.device,
        overwrite=args.overwrite,
        keep_shards=args.keep_shards,
        progress=not args.no_progress,
    )


def dataset_roots() -> list[str]:
    """The precomp folders the data set configs read (``root`` of ``configs/datasets/*.yaml``, those of a kind
    that generates its data left out): where an extraction's ``--out`` must point for an experiment to find it."""
    import yaml

    from itrlab.config.loader import config_dir
    from itrlab.data.kinds import DATASET_KINDS

    roots = []
    for path in sorted((config_dir() / "datasets").glob("*.yaml")):
        try:
            tree = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        kind = DATASET_KINDS.get(tree.get("kind", "precomp")) if isinstance(tree, dict) else None
        if kind is not None and not kind.generates and isinstance(tree.get("root"), str):
            root = Path(tree["root"])
            pooled = re.fullmatch(r"pool(\d+x\d+)", root.name)  # a pooled layout of the grid: --out its parent
            roots.append(
                f"{root.parent} with --pool {pooled.group(1)} ({path.stem})" if pooled else f"{root} ({path.stem})"
            )
    return roots


def output_folder(args: argparse.Namespace) -> Path:
    """``--out``; with a format that has one (``--flickr8k``) it defaults to the folder its data set config reads.
    ``--images`` names no data set, and no default folder fits every set of photos: without ``--out`` it is refused,
    with the folders the data set configs read."""
    if args.out is not None:
        return args.out
    reader, _ = chosen_format(args)
    if reader.default_out is not None:
        return reader.default_out
    asked = f"--format {args.format}" if args.format else "--images"
    raise UserInputError(
        f"{asked} needs --out: the precomp folder to write, the `root` of the data set config "
        f"that will read it: {', '.join(dataset_roots()) or 'configs/datasets/*.yaml'}"
    )


def input_flags(args: argparse.Namespace) -> list[str]:
    """The flags given that name the photos and captions to read."""
    return [
        flag
        for flag, value in (
            ("--images", args.images),
            ("--captions", args.captions),
            ("--format", args.format),
            *((f"--{name}", getattr(args, _shorthand(name), None)) for name in READERS),
        )
        if value is not None
    ]


def step_options(args: argparse.Namespace) -> tuple[list[tuple[type[Step], Any]], bool]:
    """The steps after the images that the flags ask for (:mod:`itrlab.extract.steps`: ``--text``), each with its
    options, checked before any work; and whether one runs alone (``--text-only``: no image is extracted)."""
    alone = [said for step in STEPS.values() if (said := step.only(args)) is not None]
    if alone and input_flags(args):
        raise UserInputError(f"{alone[0]}; {', '.join(input_flags(args))} does not apply")
    chosen = [(step, step.options(args, lambda: output_folder(args))) for step in STEPS.values()]
    return [(step, options) for step, options in chosen if options is not None], bool(alone)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: prints the report and images/s, and for a folder of photos the data set config it wrote
    and the command that trains on it; bad input exits with status 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)

    def log(message: str) -> None:
        _log.info(f"extract: {message}", extra=TO_STDERR)

    started = time.perf_counter()
    lines: list[str] = []
    steps: list[tuple[type[Step], Any]] = []
    alone = False
    written = None
    try:
        alone = any(step.only(args) for step in STEPS.values())  # no photos extracted: no data set config
        name = config_name(args.name, None if alone else chosen_format(args)[0], lambda: output_folder(args))
        steps, alone = step_options(args)
        manifest = None
        if not alone:
            options = options_from_args(args)
            manifest = extract_dataset(options, use_ray=args.ray, cpus_per_task=args.cpus_per_task, log=log)
            lines += job.summary_lines(manifest)
        for step, chosen in steps:
            lines += step.run(chosen, log)
        if name is not None and manifest is not None:
            made_by = shlex.join(["python", "jobs/extract_features.py", *argv])
            written = write_dataset_config(output_folder(args), name, manifest, made_by)
            if written is None:
                lines.append(
                    f"no data set config written: the splits {', '.join(manifest['splits'])} are not a training, a "
                    f"validation and a test split (docs/data.md#your-own-photos)"
                )
    except ItrlabError as err:
        return report(err)
    except KeyboardInterrupt:
        work = steps[0][0].work_dir(steps[0][1]) if alone and steps else output_folder(args) / WORK_DIR
        _log.warning(f"\nitrlab: interrupted; finished chunks are kept in {work}: re-run the same command to resume")
        return 130
    for line in lines:
        _log.info(line)
    outputs = ", ".join(
        [
            *([] if alone else [f"{output_folder(args)} ({MANIFEST})"]),
            *(step.written(options) for step, options in steps),
        ]
    )
    _log.info(f"output: {outputs}; total {time.perf_counter() - started:.1f} s")
    for line in written.lines if written is not None else []:
        _log.info(line)
    return 0
