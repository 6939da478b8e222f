"""Proof that the Tune state a sweep resumes from is the state itrlab saved for this sweep, checked before
Ray starts, and bound to its sweep and version.

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
So every such file (the folder's own, and each trial folder's ``error.pkl``) must carry an HMAC-SHA256 that
this installation's key made over **the sweep's identity, the file's path and its bytes**
(:func:`identity`: the sweep's name, its invocation folder and its MLflow parent run, which a resume and a
move of the storage keep), listed in the sweep's manifest (:data:`MANIFEST`). The manifest itself is sealed
with the same key over that identity, its **generation** (raised at every change) and its digests; the
generation it held when an invocation ended is recorded on the parent run (:data:`GENERATION_TAG`, in
MLflow, which the storage's writers cannot write). A resume refuses, with one line (exit 2) before Ray
starts, and again just before ``Tuner.restore``:

- a file without a signature, or whose bytes changed;
- a file, or a manifest, copied from another sweep (its signature names another identity);
- a file rolled back to an older version of itself: a version stays valid only until the storage holds a
  newer one (Tune uploads its staging folder in the background: the version being uploaded, and those
  saved since, stay valid until the storage has them), so once an invocation ended only the newest is;
- a manifest rolled back with its files (a generation below the one its parent run recorded).

What is signed is the copy Tune wrote in the driver's own staging folder (Ray's temp folder, which no
trial and no other pod writes), right after Tune saved it (:class:`StateSigner`, a Tune callback that runs
in the driver after every save); ``tuner.pkl``, which Tune writes once straight into the storage, right
after the Tuner is built.

The manifest never lags the state it covers. Tune uploads its staging folder by overwriting each stored file
in place, which a full disk often still allows (the old file's space is reused), while the manifest is
replaced atomically (a new file beside the old one), which needs space the full disk lacks. So a version
whose signature could not be written is withheld from the upload that follows (:func:`withhold_unsigned`
takes it out of the staging folder, where Tune writes it anew at its next save): the storage keeps the
version signed last, and a ``--resume`` once space is freed verifies and continues from it. An upload Tune
started earlier and still runs then (Tune starts no new one meanwhile) may carry the newer version: a resume
refuses that one as changed.

The key (:func:`installation_key`) lives outside the storage: ``$ITRLAB_SECRET_FILE``, else
``~/.config/itrlab/secret`` (32 random bytes, created mode 0600 on first use); a key file that others can
read (any group or world bit) is refused, before anything starts. It protects against whoever can write the
sweep's storage but cannot run code in the Ray cluster: Ray trusts all code inside a cluster, so a trial can
read the key where the driver runs, and sign (docs/sweeps.md, docs/kubernetes.md). A trial's own
checkpoints are read weights-only and need no signature.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

from ray import tune

from itrlab.errors import UserInputError
from itrlab.files import atomic_write_json

KEY_ENV = "ITRLAB_SECRET_FILE"
DEFAULT_KEY = Path("~/.config/itrlab/secret")
MANIFEST = "itrlab_signatures.json"  # in the sweep's folder, beside tune/
MANIFEST_VERSION = 2  # 2: signatures bound to the sweep's identity, a sealed manifest with a generation
TUNE_DIR = "tune"
KEEP = 4  # versions of a file saved and not yet known to be in the storage that stay valid
SUPERSEDED = 8  # older versions remembered per file, so that a rolled-back file is named so
MANIFEST_LIMIT = 64 << 20  # bytes: a manifest larger than this was not written by itrlab
GENERATION_TAG = "itrlab.state_generation"  # on the parent run: the manifest's generation when an invocation ended


def key_path() -> Path:
    return Path(os.environ.get(KEY_ENV) or DEFAULT_KEY).expanduser()


def installation_key(create: bool = True) -> bytes:
    """This installation's signing key, created (0600, in a 0700 folder) on first use when ``create`` and the
    path is the default one; a key file named by ``$ITRLAB_SECRET_FILE`` is never created (a pod without its
    Secret mounted must not sign with a key of its own). A key that is not a file, that others can read or
    write (any group or world bit of its mode), or shorter than 32 bytes is a UserInputError, one line."""
    path = key_path()
    named = bool(os.environ.get(KEY_ENV))
    if not path.exists() and create and not named:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # two sweeps starting at once: the first one's key
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_hex(32) + "\n")
    where = f"{KEY_ENV} names it" if named else f"the default, {DEFAULT_KEY}, is created on first use"
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise UserInputError(f"the sweep signing key {path} is not a file ({where}); name the key file")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise UserInputError(
                f"the sweep signing key {path} has mode {mode:04o}: others can read or change it; "
                f"run `chmod 600 {path}` (nothing was started)"
            )
        key = path.read_bytes().strip()
    except FileNotFoundError:
        raise UserInputError(
            f"the sweep signing key {path} does not exist ({where}); on a cluster, mount the key "
            f"Secret where the driver runs (docs/kubernetes.md); nothing was started"
        ) from None
    except OSError as err:
        raise UserInputError(f"the sweep signing key {path} cannot be read: {err.strerror or err}") from None
    if len(key) < 32:
        raise UserInputError(
            f"the sweep signing key {path} holds {len(key)} bytes; it needs at least 32 "
            f"(e.g. `openssl rand -hex 32 > {path}`)"
        )
    return key


def identity(sweep_dir: Path, parent_run_id: str) -> str:
    """What a signature binds a file to: the sweep's name and invocation folder (``<sweep>/<folder>``, which
    ``--resume NAME`` names and a move of the storage keeps) and its MLflow parent run."""
    return f"{sweep_dir.parent.name}/{sweep_dir.name} (parent run {parent_run_id})"


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


def _mac(key: bytes, sweep: str, relative: str, data: bytes) -> str:
    return hmac.new(
        key, b"file\0" + sweep.encode() + b"\0" + relative.encode() + b"\0" + data, hashlib.sha256
    ).hexdigest()


def _relative(path: Path, folder: Path) -> str:
    return f"{TUNE_DIR}/{path.relative_to(folder).as_posix()}"


class Manifest:
    """The signatures of a sweep's Tune state (:data:`MANIFEST`): per file, the digests still valid (oldest
    first; the newest is what Tune saved last) and the versions they superseded; a generation raised at
    every change; the sweep it belongs to; a seal over all of it."""

    def __init__(
        self,
        sweep: str,
        generation: int = 0,
        files: dict[str, list[str]] | None = None,
        superseded: dict[str, list[str]] | None = None,
    ):
        self.sweep, self.generation = sweep, generation
        self.files, self.superseded = dict(files or {}), dict(superseded or {})

    def _body(self) -> bytes:
        return json.dumps(
            {
                "version": MANIFEST_VERSION,
                "sweep": self.sweep,
                "generation": self.generation,
                "files": self.files,
                "superseded": self.superseded,
            },
            sort_keys=True,
        ).encode()

    def seal(self, key: bytes) -> str:
        return hmac.new(key, b"manifest\0" + self._body(), hashlib.sha256).hexdigest()

    def write(self, sweep_dir: Path, key: bytes) -> None:
        atomic_write_json(
            sweep_dir / MANIFEST,
            {
                "version": MANIFEST_VERSION,
                "sweep": self.sweep,
                "generation": self.generation,
                "files": self.files,
                "superseded": self.superseded,
                "seal": self.seal(key),
            },
            indent=None,
        )

    @staticmethod
    def read_raw(sweep_dir: Path) -> dict[str, Any] | None:
        """The manifest's JSON as stored (None: absent, too large, or not JSON)."""
        path = sweep_dir / MANIFEST
        try:
            if path.stat().st_size > MANIFEST_LIMIT:
                return None
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    @classmethod
    def parse(cls, data: dict[str, Any], key: bytes) -> Manifest | None:
        """The manifest ``data`` holds when this key sealed it, else None (nothing of it is trusted)."""

        def lists(value: Any) -> dict[str, list[str]]:
            if not isinstance(value, dict):
                raise ValueError
            return {str(k): [d for d in v if isinstance(d, str)] for k, v in value.items() if isinstance(v, list)}

        try:
            found = cls(
                str(data["sweep"]), int(data["generation"]), lists(data["files"]), lists(data.get("superseded", {}))
            )
        except (KeyError, TypeError, ValueError):
            return None
        seal = data.get("seal")
        if (
            data.get("version") != MANIFEST_VERSION
            or not isinstance(seal, str)
            or not hmac.compare_digest(seal, found.seal(key))
        ):
            return None
        return found


_generations: dict[tuple[str, str], int] = {}  # the newest generation this process wrote, per folder and sweep


def sign(sweep_dir: Path, source: Path, sweep: str, only: set[str] | None = None) -> None:
    """Sign the files Tune may unpickle as they are under ``source`` (the driver's staging copy of the
    sweep's ``tune/`` folder, or ``tune/`` itself for ``tuner.pkl``), ``only`` those relative paths if given,
    for the sweep ``sweep`` (:func:`identity`); then drop the versions the storage has outgrown
    (:func:`_settle`). A manifest this key did not seal for this sweep is started anew."""
    key = installation_key()
    raw = Manifest.read_raw(sweep_dir)
    manifest = Manifest.parse(raw, key) if raw is not None else None
    written = (str(Path(sweep_dir).resolve()), sweep)
    if manifest is None or manifest.sweep != sweep:  # never counts down: a damaged manifest is no rollback
        manifest = Manifest(sweep, _generations.get(written, 0))
    changed = False
    for path in signed_files(Path(source)):
        relative = _relative(path, Path(source))
        if only is not None and relative not in only:
            continue
        try:
            digest = _mac(key, sweep, relative, path.read_bytes())
        except OSError:  # removed meanwhile (Tune replaces its files atomically)
            continue
        kept = manifest.files.get(relative, [])
        if digest not in kept:
            manifest.files[relative] = [*kept, digest][-KEEP:]
            changed = True
    changed = _settle(manifest, sweep_dir, key) or changed
    if changed:
        manifest.generation = max(manifest.generation, _generations.get(written, 0)) + 1
        manifest.write(sweep_dir, key)
        _generations[written] = manifest.generation


def withhold_unsigned(sweep_dir: Path, staging: Path, sweep: str) -> list[str]:
    """Take out of ``staging`` (the driver's staging copy of ``tune/``) every file Tune may unpickle whose version
    the stored manifest does not sign for ``sweep``: its signature could not be written (a full disk), so Tune's
    next upload must leave the storage's signed version in place. Tune writes the state files anew at its next
    save, and a trial's ``error.pkl`` withheld leaves its error to ``error.txt``. The relative paths taken out."""
    raw = Manifest.read_raw(sweep_dir)
    key = installation_key(create=False)
    manifest = Manifest.parse(raw, key) if raw is not None else None
    signed = manifest.files if manifest is not None and manifest.sweep == sweep else {}
    withheld = []
    for path in signed_files(Path(staging)):
        relative = _relative(path, Path(staging))
        try:
            if _mac(key, sweep, relative, path.read_bytes()) in signed.get(relative, []):
                continue
            path.unlink()
        except FileNotFoundError:
            continue
        withheld.append(relative)
    return withheld


def _settle(manifest: Manifest, sweep_dir: Path, key: bytes) -> bool:
    """Drop, per file, the versions older than the one the storage holds now (they can no longer come back
    legitimately: Tune uploads newer versions only); whether anything changed."""
    changed = False
    for relative, digests in manifest.files.items():
        if len(digests) < 2:
            continue
        try:
            stored = _mac(key, manifest.sweep, relative, (sweep_dir / relative).read_bytes())
        except OSError:
            continue
        if stored in digests[1:]:
            at = digests.index(stored)
            manifest.superseded[relative] = [*manifest.superseded.get(relative, []), *digests[:at]][-SUPERSEDED:]
            manifest.files[relative] = digests[at:]
            changed = True
    return changed


def verify(sweep_dir: Path, sweep: str, at_least: int = 0) -> int:
    """Every file of ``<sweep_dir>/tune`` that Tune would unpickle carries this installation's signature for
    this sweep (``sweep``, :func:`identity`) over its bytes, in its newest valid version, in a manifest sealed
    for this sweep whose generation is at least ``at_least``; else a UserInputError names the first file
    that does not (nothing is unpickled here). Returns the manifest's generation."""
    tune_dir = sweep_dir / TUNE_DIR
    files = signed_files(tune_dir)
    if not files:
        if at_least:  # its parent run recorded a saved state: a folder emptied is no fresh start
            raise UserInputError(
                f"--resume: {tune_dir} holds none of the Tune state its parent run recorded "
                f"(generation {at_least}); nothing was started: restore it, or start the sweep anew"
            )
        return 0
    key = installation_key(create=False)
    path = sweep_dir / MANIFEST
    refused = (
        "Ray Tune would unpickle it, which can run code: refused, nothing was started. A sweep saved "
        f"elsewhere needs that installation's key ({KEY_ENV}); else start it anew"
    )
    raw = Manifest.read_raw(sweep_dir)
    if raw is None:
        raise UserInputError(
            f"--resume: {files[0]} was not saved by itrlab here (no valid signature of this "
            f"installation's key {key_path()}: {path} is missing or unreadable); {refused}"
        )
    if raw.get("version") != MANIFEST_VERSION:
        raise UserInputError(
            f"--resume: {path} was written by an itrlab whose signatures did not name their sweep; "
            f"its state is not trusted: start the sweep anew (nothing was started)"
        )
    if raw.get("sweep") != sweep:
        raise UserInputError(
            f"--resume: the signatures in {path} are those of the sweep {raw.get('sweep')!r:.200}, "
            f"not of this one ({sweep}): Tune state copied from another sweep is refused; "
            f"{refused}"
        )
    manifest = Manifest.parse(raw, key)
    if manifest is None:
        raise UserInputError(
            f"--resume: {path} was changed after itrlab wrote it, or sealed with another key than "
            f"this installation's ({key_path()}); {refused}"
        )
    if manifest.generation < at_least:
        raise UserInputError(
            f"--resume: {path} is an older state of this sweep (generation {manifest.generation}; "
            f"its parent run recorded {at_least} when an invocation last ended): a sweep folder "
            f"rolled back is refused, nothing was started"
        )
    for file in files:
        relative = _relative(file, tune_dir)
        try:
            digest = _mac(key, sweep, relative, file.read_bytes())
        except OSError as err:
            raise UserInputError(f"--resume: cannot read {file} ({err.strerror or err}); nothing was run") from None
        if any(hmac.compare_digest(digest, known) for known in manifest.files.get(relative, [])):
            continue
        if any(hmac.compare_digest(digest, old) for old in manifest.superseded.get(relative, [])):
            why = "is an older version of the file itrlab saved last (rolled back)"
        elif relative in manifest.files:
            why = "was changed after itrlab saved it"
        else:
            why = "was not saved by itrlab here"
        raise UserInputError(
            f"--resume: {file} {why} (no valid signature of this installation's key {key_path()} "
            f"for this sweep in {path}); {refused}"
        )
    return manifest.generation


def generation(sweep_dir: Path, sweep: str) -> int | None:
    """The generation of the sweep's manifest as stored, when this key sealed it for this sweep (None
    otherwise): what the parent run records when an invocation ends."""
    raw = Manifest.read_raw(sweep_dir)
    manifest = Manifest.parse(raw, installation_key(create=False)) if raw is not None else None
    return manifest.generation if manifest is not None and manifest.sweep == sweep else None


def generation_tag(sweep_dir: Path) -> dict[str, str]:
    """The generation of the running sweep's signed state as this invocation leaves it, as the parent run's tag
    (:data:`GENERATION_TAG`): a later --resume refuses an older state. Empty when there is none to record
    (nothing saved yet, or no manifest this key sealed for this sweep)."""
    found = None
    if StateSigner.sweep is not None:
        with contextlib.suppress(UserInputError, OSError):
            found = generation(sweep_dir, StateSigner.sweep)
    return {GENERATION_TAG: str(found)} if found else {}


def recorded_generation(tags: dict[str, str]) -> int:
    """The generation a parent run's tags record (0 when none: no invocation ended since signatures counted)."""
    value = tags.get(GENERATION_TAG, "")
    return int(value) if value.isdigit() else 0


class StateSigner(tune.Callback):
    """Signs Tune's saved state in the driver as Tune saves it: Tune asks its callbacks for their state
    (:meth:`get_state`) right after it wrote the experiment's and the searcher's state to the driver's staging
    folder and before it copies that folder to the storage, so the signature exists before the copy does.
    Also after every controller step (what else changed), a trial's failure (its ``error.pkl``) and the
    experiment's end. Holds no state of its own that matters across a restore: its folders come from the
    trials' storage context, the sweep's identity from the runner (``StateSigner.sweep``)."""

    staging: Path | None = None  # the driver's staging folder of the running sweep (class-wide, in the driver)
    tune_dir: Path | None = None  # and the sweep's tune/ folder in the storage
    sweep: str | None = None  # the running sweep's identity (identity()), set by the runner

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
        staging, tune_dir, sweep = StateSigner.staging, StateSigner.tune_dir, StateSigner.sweep
        if staging is None or tune_dir is None or sweep is None or not staging.is_dir():
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
                sign(tune_dir.parent, staging, sweep)
            except OSError:  # a storage that can no longer be written: the sweep's storage check stops it on one
                # line; the storage keeps the state signed last, which a --resume continues from
                with contextlib.suppress(OSError):
                    withhold_unsigned(tune_dir.parent, staging, sweep)

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
    """Once ``Tuner.fit`` returned or raised (Tune waited for its last upload): everything Tune saved last,
    from the driver's staging folder, and the older versions the storage outgrew dropped."""
    staging, tune_dir, sweep = StateSigner.staging, StateSigner.tune_dir, StateSigner.sweep
    if (
        staging is not None
        and staging.is_dir()
        and tune_dir is not None
        and tune_dir.parent == sweep_dir
        and sweep is not None
    ):
        sign(sweep_dir, staging, sweep)
