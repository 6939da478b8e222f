"""What the trained models answer (docs/models.md): ``itrlab evaluate`` (their tables, their ensemble's),
``itrlab retrieve`` (the top-k images of a caption, or captions of an image) and ``itrlab gallery`` (an HTML page
of what a model retrieves; with ``--against``, of where two models differ)."""

from __future__ import annotations

import argparse
from pathlib import Path

from itrlab.cli.arguments import TRACKING_URI_HELP
from itrlab.cli.guard import guarded
from itrlab.errors import UserInputError


@guarded
def evaluate_main(args: argparse.Namespace) -> int:
    """``itrlab evaluate MODEL [MODEL ...]``: every check first (models, data, protocol: exit 2), then the
    tables, printed, written (``--out``) and logged to one MLflow run tagged with its source runs."""
    from itrlab.tracking.probe import check_sources_in_store

    check_sources_in_store(args.models, args.tracking_uri)  # a run the store lacks: one line, before torch
    from itrlab.trained import evaluate_models, load_model, open_eval_split
    from itrlab.trained.sources import source_run

    out = output_file(args.out, "--out") if args.out else None
    models = [load_model(source, args.tracking_uri, args.embedding) for source in args.models]
    data = open_eval_split(models, args.data, args.split, args.protocol)
    tracker, runs = None, []
    if not args.no_tracking:
        from itrlab.tracking import MlflowTracker, check_tracking_store

        check_tracking_store(args.tracking_uri)
        runs = [source_run(m, args.tracking_uri, "the evaluation is not tagged with it") for m in models]
        tracker = MlflowTracker(args.experiment, args.tracking_uri)
    result = evaluate_models(models, data)
    print(result.format())
    if out is not None:
        from itrlab.files import atomic_write_json

        atomic_write_json(out, result.to_dict())
        print(f"written: {args.out}")
    if tracker is not None:
        from itrlab.trained.evaluation import log_evaluation

        run_id = log_evaluation(tracker, models, result, runs)
        print(f"MLflow: run {run_id} in experiment '{args.experiment}' at {tracker.tracking_uri}")
    return 0


@guarded
def retrieve_main(args: argparse.Namespace) -> int:
    """``itrlab retrieve MODEL --caption TEXT | --image ID``: the top-k images of a typed caption, or the top-k
    captions of an image of the split; every check (model, data, the caption, the id, k) before scoring."""
    from itrlab.tracking.probe import check_sources_in_store

    check_sources_in_store([args.model], args.tracking_uri)
    from itrlab.trained import load_model, open_eval_split
    from itrlab.trained.photos import split_images
    from itrlab.trained.retrieval import (
        captions_for_image,
        check_caption,
        check_k,
        format_captions,
        format_images,
        images_for_text,
    )

    if args.caption is not None:
        check_caption(args.caption)
    model = load_model(args.model, args.tracking_uri)
    split = open_eval_split([model], args.data, args.split, "all").split
    images = split_images(split)
    where = f"split {split.split} of {split.root}"
    if args.caption is not None:
        ranking = images_for_text(model, split, images, args.caption, args.k)
        print(format_images(ranking, f"{args.caption!r} ({where}, {split.n_images:,} images)"))
        return 0
    row = images.row_of(args.image)
    k = check_k(args.k, split.n_captions)
    photo = images.photo(row)
    ranking = captions_for_image(model.score_fn(split), split, images, row, k)
    print(format_captions(ranking, f"image {args.image}" + (f" ({photo})" if photo else "") + f" ({where})"))
    return 0


@guarded
def gallery_main(args: argparse.Namespace) -> int:
    """``itrlab gallery MODEL --out FILE``: the retrieval gallery of a split whose data came from photos, written
    to ``--out`` and (``--log``) to the MLflow run the model came from; a split without photos is one line."""
    from itrlab.tracking.probe import check_sources_in_store

    check_sources_in_store([args.model, *([args.against] if args.against is not None else [])], args.tracking_uri)
    from itrlab.files import atomic_write_text
    from itrlab.trained import load_model, open_eval_split
    from itrlab.trained.gallery import ARTIFACT, build_gallery, render
    from itrlab.trained.photos import split_images
    from itrlab.trained.sources import source_run

    if args.against is not None:
        return side_by_side_main(args)
    out = output_file(args.out, "--out")
    model = load_model(args.model, args.tracking_uri)
    if args.log:
        if model.info.run_id is None:
            raise UserInputError(f"--log: {args.model} names no MLflow run (a model folder without one); drop --log")
        source_run(model, args.tracking_uri, "--log writes only into the run a model came from", required=True)
    data = open_eval_split([model], args.data, args.split, "all")
    page = render(build_gallery(model, data, split_images(data.split), args.n, args.seed))
    atomic_write_text(out, page)
    print(f"gallery: {out}")
    if args.log:
        from itrlab.tracking import MlflowTracker

        MlflowTracker.for_reading(args.tracking_uri).log_gallery(page, ARTIFACT, model.info.run_id)
        print(f"MLflow: {ARTIFACT} of run {model.info.run_id}")
    return 0


def side_by_side_main(args: argparse.Namespace) -> int:
    """``itrlab gallery A --against B --out FILE``: the queries where one model ranks the true match in its top k
    and the other does not, both ways, with their counts (:mod:`itrlab.trained.side_by_side`); every check (the
    flags, both models, that they trained on one data set and split, the data, its photos) before scoring."""
    from itrlab.files import atomic_write_text
    from itrlab.trained import load_model, open_eval_split
    from itrlab.trained.photos import split_images
    from itrlab.trained.side_by_side import build_side_by_side, check_options, check_pair, render_side_by_side

    if args.log:
        raise UserInputError("--log with --against: a side-by-side page belongs to no one run; drop --log")
    check_options(args.k, args.n)
    out = output_file(args.out, "--out")
    a, b = (load_model(source, args.tracking_uri) for source in (args.model, args.against))
    check_pair(a, b)
    data = open_eval_split([a, b], args.data, args.split, "all")
    page = build_side_by_side(a, b, data, split_images(data.split), args.k, args.n, args.seed)
    atomic_write_text(out, render_side_by_side(page))
    for found in page.contrasts:
        print(
            f"{found.direction}, top {found.k}: A only {len(found.a_only)}, B only {len(found.b_only)}, both "
            f"{found.both}, neither {found.neither} of {found.queries} queries"
        )
    print(f"gallery: {out}")
    return 0


def output_file(path: str, flag: str) -> Path:
    """``path`` as a file to write after the work: its folder created (or UserInputError when it cannot be), and
    UserInputError when ``path`` is a folder or another file that is not a regular one; before anything is
    scored."""
    from itrlab.files import check_writable_dir

    out = Path(path).expanduser()
    if out.is_dir():
        raise UserInputError(f"{flag}: {out} is a folder; name the file to write (e.g. {out / 'gallery.html'})")
    if out.exists() and not out.is_file():
        raise UserInputError(f"{flag}: {out} exists and is not a regular file; name a file to write")
    check_writable_dir(out.parent, flag)
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


def add_model_parsers(sub) -> None:
    """``evaluate``, ``retrieve`` and ``gallery`` on the ``itrlab`` parser's subcommands ``sub``."""
    from itrlab.config.choices import literal_values
    from itrlab.config.schema import EvalConfig

    split_help = "the split's file prefix (default: the model's test split; with --data: test)"
    evaluate = sub.add_parser(
        "evaluate",
        help="evaluate trained models (or their ensemble) on a data set, split and protocol (docs/models.md)",
    )
    evaluate.add_argument(
        "models",
        nargs="+",
        metavar="MODEL",
        help="runs:/<run id>/model, models:/<name>/<version>, a run id, a run folder or a model folder; two or more: "
        "their ensemble (the mean of their similarities) too",
    )
    evaluate.add_argument("--data", help="a precomp data folder (default: the first model's own data set)")
    evaluate.add_argument("--split", help=split_help)
    evaluate.add_argument(
        "--protocol",
        help="f30k_1k, f8k_1k, coco_5k, coco_1k (5 folds), 5fold, all (default: the "
        "model's test protocol on its own test split, else all)",
    )
    evaluate.add_argument(
        "--embedding",
        choices=literal_values(EvalConfig, "embedding"),
        help="the embedding each model's scores read: output (through its projection head) or prehead (before "
        "it: the base network's, SimCLR's reading); default: the one its run tested (eval.embedding)",
    )
    evaluate.add_argument("--out", help="write the tables as JSON to this file")
    evaluate.add_argument(
        "--experiment", default="evaluate", help="MLflow experiment of the run (default: %(default)s)"
    )
    evaluate.add_argument("--tracking-uri", help=TRACKING_URI_HELP)
    evaluate.add_argument("--no-tracking", action="store_true", help="log no MLflow run")
    evaluate.set_defaults(func=evaluate_main)

    model_help = "runs:/<run id>/model, models:/<name>/<version>, a run id, a run folder or a model folder"
    data_help = "a precomp data folder (default: the model's own data set)"
    retrieve = sub.add_parser(
        "retrieve", help="the top-k images of a typed caption, or the top-k captions of an image (docs/models.md)"
    )
    retrieve.add_argument("model", metavar="MODEL", help=model_help)
    query = retrieve.add_mutually_exclusive_group(required=True)
    query.add_argument("--caption", help="text to search the split's images for")
    query.add_argument(
        "--image",
        type=int,
        metavar="ID",
        help="an image id of the split (its _ids.txt; without one: its row) whose captions to rank",
    )
    retrieve.add_argument("-k", type=int, default=5, help="how many results (default: %(default)s)")
    retrieve.add_argument("--data", help=data_help)
    retrieve.add_argument("--split", help=split_help)
    retrieve.add_argument("--tracking-uri", help=TRACKING_URI_HELP)
    retrieve.set_defaults(func=retrieve_main)

    gallery = sub.add_parser(
        "gallery",
        help="an HTML page of what a model retrieves, with thumbnails, for data extracted from photos (docs/models.md)",
    )
    gallery.add_argument("model", metavar="MODEL", help=model_help)
    gallery.add_argument("--out", required=True, help="the HTML file to write")
    gallery.add_argument("-n", type=int, default=8, help="captions, and images, to sample (default: %(default)s)")
    gallery.add_argument("--seed", type=int, default=0, help="the sample's seed (default: %(default)s)")
    gallery.add_argument("--data", help=data_help)
    gallery.add_argument("--split", help=split_help)
    gallery.add_argument("--log", action="store_true", help="also log it as gallery.html of the model's MLflow run")
    gallery.add_argument(
        "--against",
        metavar="MODEL",
        help="a second model trained on the same data set and split: the page shows the queries where one ranks "
        "the true match in its top k and the other does not, both ways, with counts",
    )
    gallery.add_argument(
        "-k", "--k", type=int, default=1, help="with --against: the top k a match counts within (default: %(default)s)"
    )
    gallery.add_argument("--tracking-uri", help=TRACKING_URI_HELP)
    gallery.set_defaults(func=gallery_main)
