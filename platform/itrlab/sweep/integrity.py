"""Proof that the Tune state a sweep resumes from is the state itrlab saved, checked before Ray starts.

``Tuner.restore`` unpickles files of the sweep's storage, and unpickling runs whatever code a file names.
In Ray 2.60 (``ray/tune``) these are, all under ``<sweep>/tune/``:

- ``tuner.pkl``: ``pickle.loads`` (``TunerInternal._restore_from_path_or_uri``);
- ``experiment_state-*.json``: JSON that embeds cloudpickled controller and trial state
  (``_loads_with_cloudpickle`` in ``TuneController.resume`` and ``ExperimentAnalysis``);
- the searcher's and callbacks' state, ``basic-variant-state-*.json`` (a cloudpickle despite its name),
  ``search_gen_state-*.json``, ``searcher-state-*.pkl`` (Optuna's: ``pickle.load``),
  ``callback-states-*.pkl`` (``_load_newest_checkpoint``: the greatest name wins);
- ``<trial>/error.pkl``: ``cloudpickle.loads`` (``Trial.get_pickled_error``) for the results of failed
  trials (``params.pkl`` beside it is written, never read back).

Tune copies every ``*.json`` and ``*.pkl`` of the experiment folder to the driver before it reads them.
So every such file (the folder's own, and each trial folder's ``error.pkl``) must carry an HMAC-SHA256
that this installation's key made over its path and bytes (:data:`MANIFEST`); a file without one, or
whose bytes changed, is refused with one line (exit 2) before Ray starts, and again just before
``Tuner.restore``. What is signed is the copy Tune wrote in the driver's own staging folder (Ray's temp
folder, which no trial and no other pod writes), right after Tune saved it (:class:`StateSigner`, a Tune
callback that runs in the driver after every save); ``tuner.pkl``, which Tune writes once straight into the
storage, right after the Tuner is built. The last few versions of each file stay valid, since Tune copies
its staging folder to the storage in the background.

The key (:func:`installation_key`) lives outside the storage: ``$ITRLAB_SECRET_FILE``, else
``~/.config/itrlab/secret`` (32 random bytes, created mode 0600 on first use). On Kubernetes a Secret
mounted into the Ray head, where the driver runs, and not into the workers, which run the trials
(docs/kubernetes.md). A trial's own checkpoints are read weights-only and need no signature.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

from ray import tune

from itrlab.errors import UserInputError
from itrlab.files import atomic_write_json

KEY_ENV = "ITRLAB_SECRET_FILE"
DEFAULT_KEY = Path("~/.config/itrlab/secret")
MANIFEST = "itrlab_signatures.json"  # in the sweep's folder, beside tune/
TUNE_DIR = "tune"
KEEP = 4  # versions of a file that stay valid (Tune uploads its staging folder in the background)
MANIFEST_LIMIT = 64 << 20  # bytes: a manifest larger than this was not written by itrlab


def key_path() -> Path:
    return Path(os.environ.get(KEY_ENV) or DEFAULT_KEY).expanduser()


def installation_key(create: bool = True) -> bytes:
    """This installation's signing key, created (0600, in a 0700 folder) on first use when ``create`` and the
    path is the default one; a key file named by ``$ITRLAB_SECRET_FILE`` is never created (a pod without its
    Secret mounted must not sign with a key of its own)."""
    path = key_path()
    if not path.exists() and create and not os.environ.get(KEY_ENV):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # two sweeps starting at once: the first one's key
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_hex(32) + "\n")
    try:
        key = path.read_bytes().strip()
    except FileNotFoundError:
        raise UserInputError(f"the sweep signing key {path} does not exist ({KEY_ENV} names it, or it is created at "
                             f"{DEFAULT_KEY} on first use); on a cluster, mount the key Secret into the Ray head "
                             f"(docs/kubernetes.md)") from None
    except OSError as err:
        raise UserInputError(f"the sweep signing key {path} cannot be read: {err.strerror or err}") from None
    if len(key) < 32:
        raise UserInputError(f"the sweep signing key {path} holds {len(key)} bytes; it needs at least 32 "
                             f"(e.g. `openssl rand -hex 32 > {path}`)")
    return key


def signed_files(tune_dir: Path) -> list[Path]:
    """Every file of ``tune_dir`` that Tune may unpickle when it restores: its own ``*.json`` and ``*.pkl``
    (hidden ones too: Tune copies them all to the driver) and each trial folder's ``error.pkl``."""
    if not tune_dir.is_dir():
        return []
    found = []
    for entry in tune_dir.iterdir():
        if entry.is_dir():  # a trial's folder (a link to one too: Tune would read through it)
            found += [entry / "error.pkl"] if (entry / "error.pkl").exists() else []
        elif entry.suffix in (".json", ".pkl"):
            found.append(entry)
    return sorted(found)


def _mac(key: bytes, relative: str, data: bytes) -> str:
    return hmac.new(key, relative.encode() + b"\0" + data, hashlib.sha256).hexdigest()


def _read_manifest(sweep_dir: Path) -> dict[str, list[str]]:
    path = sweep_dir / MANIFEST
    try:
        if path.stat().st_size > MANIFEST_LIMIT:
            return {}
        files = json.loads(path.read_text(encoding="utf-8")).get("files", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return {k: [m for m in v if isinstance(m, str)] for k, v in files.items() if isinstance(v, list)} \
        if isinstance(files, dict) else {}


def sign(sweep_dir: Path, source: Path, only: set[str] | None = None) -> None:
    """Sign the files Tune may unpickle as they are under ``source`` (the driver's staging copy of the
    sweep's ``tune/`` folder, or ``tune/`` itself for ``tuner.pkl``), ``only`` those relative paths if given."""
    key = installation_key()
    manifest = _read_manifest(sweep_dir)
    changed = False
    for path in signed_files(Path(source)):
        relative = f"{TUNE_DIR}/{path.relative_to(source).as_posix()}"
        if only is not None and relative not in only:
            continue
        try:
            digest = _mac(key, relative, path.read_bytes())
        except OSError:  # removed meanwhile (Tune replaces its files atomically)
            continue
        kept = manifest.get(relative, [])
        if digest not in kept:
            manifest[relative] = [*kept, digest][-KEEP:]
            changed = True
    if changed:
        atomic_write_json(sweep_dir / MANIFEST, {"files": manifest}, indent=None)


def verify(sweep_dir: Path) -> None:
    """Every file of ``<sweep_dir>/tune`` that Tune would unpickle carries this installation's signature over
    its bytes, or a UserInputError names the first that does not (nothing is unpickled here)."""
    tune_dir = sweep_dir / TUNE_DIR
    files = signed_files(tune_dir)
    if not files:
        return
    key = installation_key(create=False)
    manifest = _read_manifest(sweep_dir)
    for path in files:
        relative = f"{TUNE_DIR}/{path.relative_to(tune_dir).as_posix()}"
        try:
            digest = _mac(key, relative, path.read_bytes())
        except OSError as err:
            raise UserInputError(f"--resume: cannot read {path} ({err.strerror or err}); nothing was run") from None
        if not any(hmac.compare_digest(digest, known) for known in manifest.get(relative, [])):
            why = "was changed after itrlab saved it" if relative in manifest else "was not saved by itrlab here"
            raise UserInputError(
                f"--resume: {path} {why} (no valid signature of this installation's key {key_path()} in "
                f"{sweep_dir / MANIFEST}); Ray Tune would unpickle it, which can run code: refused, nothing was "
                f"started. A sweep saved elsewhere needs that installation's key ({KEY_ENV}); else start it anew")


class StateSigner(tune.Callback):
    """Signs Tune's saved state in the driver as Tune saves it: Tune asks its callbacks for their state
    (:meth:`get_state`) right after it wrote the experiment's and the searcher's state to the driver's staging
    folder and before it copies that folder to the storage, so the signature exists before the copy does.
    Also after every controller step (what else changed), a trial's failure (its ``error.pkl``) and the
    experiment's end. Holds no state of its own that matters across a restore: its folders come from the
    trials' storage context."""

    staging: Path | None = None  # the driver's staging folder of the running sweep (class-wide, in the driver)
    tune_dir: Path | None = None  # and the sweep's tune/ folder in the storage

    def __init__(self):
        self._seen: dict[str, tuple[int, int]] = {}

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self._seen = {}

    @staticmethod
    def _folders(trials: list) -> None:
        if trials:
            storage = trials[0].storage
            StateSigner.staging = Path(storage.experiment_driver_staging_path)
            StateSigner.tune_dir = Path(storage.experiment_fs_path)

    def _sign(self, everything: bool) -> None:
        staging, tune_dir = StateSigner.staging, StateSigner.tune_dir
        if staging is None or tune_dir is None or not staging.is_dir():
            return
        files = signed_files(staging) if everything else [p for p in staging.iterdir() if p.suffix in (".json", ".pkl")]
        stamps = {}
        for path in files:
            with contextlib.suppress(OSError):
                info = path.stat()
                stamps[str(path)] = (info.st_mtime_ns, info.st_size)
        if everything or any(self._seen.get(name) != stamp for name, stamp in stamps.items()):
            self._seen.update(stamps)
            try:
                sign(tune_dir.parent, staging)
            except OSError:  # a storage that can no longer be written: the sweep's storage check stops it on one
                return      # line; the state left unsigned is refused by a --resume, never unpickled

    def on_trial_add(self, iteration: int, trials: list, trial, **info) -> None:
        self._folders([trial])

    def get_state(self) -> None:
        self._sign(everything=False)  # Tune saved its state to staging just now and uploads it next
        return None

    def on_step_end(self, iteration: int, trials: list, **info) -> None:
        self._folders(trials)
        self._sign(everything=False)

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        self._folders(trials)
        self._sign(everything=True)  # Tune wrote the trial's error.pkl just before

    def on_experiment_end(self, trials: list, **info) -> None:
        self._folders(trials)
        self._sign(everything=True)


def sign_after_fit(sweep_dir: Path) -> None:
    """Once ``Tuner.fit`` returned or raised: everything Tune saved last, from the driver's staging folder."""
    staging, tune_dir = StateSigner.staging, StateSigner.tune_dir
    if staging is not None and staging.is_dir() and tune_dir is not None and tune_dir.parent == sweep_dir:
        sign(sweep_dir, staging)
