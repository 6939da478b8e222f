"""``itrlab data NAME --from PATH_OR_URL``: a data set taken as a user finds it (a folder, a zip or tar archive, a
URL), verified against its manifest, put in place, its features extracted; a copy with a file missing, extra or
altered refused on one line; a download resumed after a dropped connection, from a real HTTP server on loopback.

The tests build a tiny data set (six generated JPEGs, COCO captions, a split file) and its manifest with the
function the maintainers' script uses; the last tests hold the shipped Flickr8K manifest against the real copy
in ../shared/data/flickr8k, where it exists.
"""

from __future__ import annotations

import gzip
import http.server
import json
import os
import re
import shutil
import socket
import tarfile
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import REPO, SHARED
from itrlab.acquire.manifest import (
    STATE,
    SUFFIX,
    ExtractSettings,
    find_manifest,
    manifest_bytes,
    read_manifest,
    write_manifest,
)
from itrlab.cli import main
from itrlab.errors import DataError
from itrlab.extract import digests

SPLITS = {"train": 4, "dev": 1, "test": 1}
FLICKR8K = SHARED / "data" / "flickr8k"


def write_reference(root: Path) -> None:
    """A tiny data set laid out as the Flickr8K copy: images/, a COCO caption file, a split file, a README."""
    from PIL import Image

    (root / "images").mkdir(parents=True)
    names = [f"{1000 + i}_{i:04x}.jpg" for i in range(sum(SPLITS.values()))]
    for i, name in enumerate(names):
        pixels = np.random.default_rng(i).integers(0, 256, (48, 64, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / "images" / name, quality=90)
    doc = {
        "images": [{"id": i + 1, "file_name": name} for i, name in enumerate(names)],
        "annotations": [
            {"id": 5 * i + n + 1, "image_id": i + 1, "caption": f"photo {i} , caption {n} ."}
            for i in range(len(names))
            for n in range(5)
        ],
    }
    (root / "captions.json").write_text(json.dumps(doc), encoding="utf-8")
    split_of = [split for split, n in SPLITS.items() for _ in range(n)]
    (root / "splits.txt").write_text("".join(f"{n} {s}\n" for n, s in zip(names, split_of)), encoding="utf-8")
    (root / "README.md").write_text("A tiny data set for tests.\n", encoding="utf-8")


@pytest.fixture
def tiny(tmp_path, monkeypatch) -> dict:
    """The reference copy (tmp_path/reference/tiny), its manifest, and a working folder to run the command in."""
    reference = tmp_path / "reference" / "tiny"
    write_reference(reference)
    manifest = tmp_path / f"tiny{SUFFIX}"
    write_manifest(
        reference,
        manifest,
        name="tiny",
        images="images",
        captions="captions.json",
        split_file="splits.txt",
        extract=ExtractSettings(dtype="float16", pool="1x1", text="tokens"),
    )
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return {"reference": reference, "manifest": manifest, "work": work}


def data(tiny: dict, source: str | Path, *args: str) -> int:
    return main(["data", str(tiny["manifest"]), "--from", str(source), "--no-progress", *args])


def one_error_line(capsys, progress: int = 0) -> str:
    """The one line of a refusal (after ``progress`` lines of the command's progress)."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == progress + 1, err
    assert err[-1].startswith("itrlab: error: "), err
    return err[-1]


def same_files(a: Path, b: Path) -> bool:
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file() and p.name != STATE)
    return files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file() and p.name != STATE) and all(
        (a / f).read_bytes() == (b / f).read_bytes() for f in files
    )


def nothing_in_place(tiny: dict) -> bool:
    data_dir = tiny["work"] / "data"
    return not (data_dir / "tiny").exists() and not (data_dir / "tiny_precomp").exists()


def zip_of(folder: Path, out: Path, top: str | None = "tiny") -> Path:
    with zipfile.ZipFile(out, "w") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                rel = path.relative_to(folder).as_posix()
                archive.write(path, f"{top}/{rel}" if top else rel)
    return out


def tar_of(folder: Path, out: Path) -> Path:
    with tarfile.open(out, "w:gz") as archive:
        archive.add(folder, arcname=folder.name)
    return out


# --- the manifest ----------------------------------------------------------------------------------------


def test_the_manifest_records_every_file_and_the_split_and_is_the_same_bytes_each_time(tiny, tmp_path):
    manifest = read_manifest(tiny["manifest"])
    assert manifest.format_version == 1 and manifest.name == "tiny"
    assert {split: len(images) for split, images in manifest.splits.items()} == SPLITS
    assert set(manifest.checked_files()) == {f"images/{p.name}" for p in (tiny["reference"] / "images").iterdir()} | {
        "captions.json"
    }
    assert set(manifest.optional) == {"README.md"} and manifest.split_file == "splits.txt"
    assert (manifest.raw, manifest.precomp) == ("data/tiny", "data/tiny_precomp")
    again = tmp_path / "again.json.gz"
    write_manifest(
        tiny["reference"],
        again,
        name="tiny",
        images="images",
        captions="captions.json",
        split_file="splits.txt",
        extract=ExtractSettings(dtype="float16", pool="1x1", text="tokens"),
    )
    assert again.read_bytes() == tiny["manifest"].read_bytes() == manifest_bytes(manifest)


def test_a_reference_copy_whose_split_file_leaves_out_an_image_makes_no_manifest(tiny, tmp_path):
    split_file = tiny["reference"] / "splits.txt"
    split_file.write_text("".join(split_file.read_text().splitlines(keepends=True)[1:]))
    out = tmp_path / "broken.json.gz"
    with pytest.raises(DataError, match="leaves out 1 of its images"):
        write_manifest(
            tiny["reference"], out, name="x", images="images", captions="captions.json", split_file="splits.txt"
        )
    assert not out.exists()


def test_a_manifest_of_another_format_version_is_refused(tmp_path):
    path = tmp_path / "future.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"format_version": 2, "name": "x"}).encode()))
    with pytest.raises(DataError, match="format version 2; this itrlab reads version 1"):
        read_manifest(path)


# --- a folder or an archive ------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["folder", "zip", "tar.gz", "zip of the contents"])
def test_a_copy_as_found_is_verified_and_put_in_place(tiny, tmp_path, capsys, form):
    source = {
        "folder": lambda: tiny["reference"],
        "zip": lambda: zip_of(tiny["reference"], tmp_path / "tiny.zip"),
        "tar.gz": lambda: tar_of(tiny["reference"], tmp_path / "tiny.tar.gz"),
        "zip of the contents": lambda: zip_of(tiny["reference"], tmp_path / "flat.zip", top=None),
    }[form]()
    assert data(tiny, source, "--no-features") == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert re.search(r"^(copy|unpack) +\d+\.\d s +9 files", printed, re.M), printed
    assert re.search(r"^verify +\d+\.\d s +6 images, captions.json and splits.txt, as recorded", printed, re.M)
    assert same_files(tiny["reference"], tiny["work"] / "data" / "tiny")
    assert not (tiny["work"] / "data" / ".tiny.partial").exists()


def _alter_an_image(root: Path) -> str:
    path = sorted((root / "images").iterdir())[2]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return f"images/{path.name} altered"


def _drop_a_caption_line(root: Path) -> str:
    doc = json.loads((root / "captions.json").read_text())
    doc["annotations"].pop(7)
    (root / "captions.json").write_text(json.dumps(doc))
    return "captions.json altered"


def _add_a_file(root: Path) -> str:
    shutil.copyfile(sorted((root / "images").iterdir())[0], root / "images" / "stray.jpg")
    return "images/stray.jpg extra"


def _remove_an_image(root: Path) -> str:
    path = sorted((root / "images").iterdir())[-1]
    path.unlink()
    return f"images/{path.name} missing"


def _move_an_image_to_another_split(root: Path) -> str:
    lines = (root / "splits.txt").read_text().splitlines()
    name = lines[0].split()[0]
    lines[0] = f"{name} test"
    (root / "splits.txt").write_text("\n".join(lines) + "\n")
    return f"splits.txt puts {name} in test, officially train"


BREAKS = {
    "an altered image": _alter_an_image,
    "a missing caption line": _drop_a_caption_line,
    "an extra file": _add_a_file,
    "a missing image": _remove_an_image,
    "an image in another split": _move_an_image_to_another_split,
}


@pytest.mark.parametrize("form", ["folder", "zip", "tar.gz"])
@pytest.mark.parametrize("broken", list(BREAKS))
def test_a_copy_that_differs_from_the_manifest_is_one_line_and_exit_2(tiny, tmp_path, capsys, form, broken):
    copy = tmp_path / "found" / "tiny"
    shutil.copytree(tiny["reference"], copy)
    said = BREAKS[broken](copy)
    source = {"folder": copy, "zip": zip_of(copy, tmp_path / "t.zip"), "tar.gz": tar_of(copy, tmp_path / "t.tgz")}[form]
    assert data(tiny, source) == 2
    line = one_error_line(capsys)
    assert "does not match the tiny manifest: 1 " in line and said in line, line
    assert nothing_in_place(tiny)


def test_many_problems_name_the_first_few_and_their_count(tiny, tmp_path, capsys):
    copy = tmp_path / "found" / "tiny"
    shutil.copytree(tiny["reference"], copy)
    for path in (copy / "images").iterdir():
        path.write_bytes(path.read_bytes() + b"\0")
    (copy / "notes.txt").write_text("mine\n")
    assert data(tiny, copy) == 2
    line = one_error_line(capsys)
    assert "6 altered, 1 extra:" in line and line.endswith("and 3 more; nothing was put in data/tiny"), line


def test_a_refused_copy_resumes_from_what_it_verified(tiny, tmp_path, capsys):
    """The files the refused run verified are kept in the staging folder: the next run copies only the rest."""
    copy = tmp_path / "found" / "tiny"
    shutil.copytree(tiny["reference"], copy)
    _alter_an_image(copy)
    assert data(tiny, copy, "--no-features") == 2
    capsys.readouterr()
    shutil.copytree(tiny["reference"], copy, dirs_exist_ok=True)
    assert data(tiny, copy, "--no-features") == 0
    printed = capsys.readouterr().out
    # the repaired image and the split file (checked by content, so always copied); 7 verified before
    assert re.search(r"^copy +\d+\.\d s +2 files .*; 7 verified before, kept$", printed, re.M), printed
    assert same_files(tiny["reference"], tiny["work"] / "data" / "tiny")


def test_a_verified_copy_is_not_read_again(tiny, capsys, monkeypatch):
    assert data(tiny, tiny["reference"], "--no-features") == 0
    read = []
    real = digests.sha256_file
    monkeypatch.setattr(digests, "sha256_file", lambda path: read.append(path.name) or real(path))
    assert data(tiny, "/no/such/folder/is/read/now", "--no-features") == 2  # --from is checked first
    assert data(tiny, tiny["reference"], "--no-features") == 0
    assert read == []
    assert re.search(r"^verify +\d+\.\d s +data/tiny: 6 images", capsys.readouterr().out, re.M)
    raw = tiny["work"] / "data" / "tiny"
    os.utime(raw / "captions.json")  # touched, unchanged: read again, and still verified
    assert data(tiny, tiny["reference"], "--no-features") == 0
    assert read == ["captions.json"]


def test_a_raw_copy_altered_after_it_was_put_in_place_is_refused(tiny, capsys):
    assert data(tiny, tiny["reference"], "--no-features") == 0
    raw = tiny["work"] / "data" / "tiny"
    said = _alter_an_image(raw)
    capsys.readouterr()
    assert data(tiny, tiny["reference"], "--no-features") == 2
    line = one_error_line(capsys)
    assert said in line and "move it away and run the same command" in line


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("/no/such/thing", "no such folder or file"),
        ("ftp://example.org/tiny.zip", "only http(s) URLs are downloaded"),
        ("captions.json", "neither a zip nor a tar archive"),
    ],
)
def test_a_from_that_is_neither_folder_file_nor_url_is_one_line(tiny, capsys, given, said):
    if given == "captions.json":
        given = str(tiny["reference"] / given)
    assert data(tiny, given) == 2
    assert said in one_error_line(capsys)
    assert nothing_in_place(tiny)


def test_a_truncated_archive_is_one_line(tiny, tmp_path, capsys):
    whole = tar_of(tiny["reference"], tmp_path / "tiny.tar.gz").read_bytes()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    assert data(tiny, cut) == 2
    assert f"{cut}: cannot read the archive" in one_error_line(capsys)
    assert nothing_in_place(tiny)


# --- a URL -----------------------------------------------------------------------------------------------


class ArchiveServer:
    """A real HTTP server on loopback (a thread) serving one archive at ``/tiny.tar.gz``, with Range requests.

    ``drop_after``: the first request gets the headers of the whole file, that many bytes, and a closed
    connection; ``after_drop``: what the requests after that get (``ok``: the file, honouring Range; or a status
    such as 503); ``status``: every request gets it (404); ``stall``: the server accepts and sends nothing until
    the test ends; ``ranges=False``: a server that answers a Range request with the whole file."""

    def __init__(self, body: bytes, drop_after=None, after_drop="ok", status=None, stall=False, ranges=True):
        self.body, self.drop_after, self.after_drop = body, drop_after, after_drop
        self.status, self.stall, self.honours_ranges = status, stall, ranges
        self.dropped = False
        self.ranges: list[str | None] = []
        self.release = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.ranges.append(self.headers.get("Range"))
                if server.stall:
                    server.release.wait()
                    return
                if server.status is not None or (server.dropped and server.after_drop != "ok"):
                    self.send_error(server.status or server.after_drop)
                    return
                asked = self.headers.get("Range") if server.honours_ranges else None
                start = int(asked.split("=")[1].rstrip("-")) if asked else 0
                body = server.body[start:]
                self.send_response(206 if start else 200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", '"tiny-1"')
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(server.body) - 1}/{len(server.body)}")
                self.end_headers()
                if server.drop_after is not None and not server.dropped:
                    server.dropped = True
                    self.wfile.write(body[: server.drop_after])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/tiny.tar.gz"

    def __enter__(self) -> ArchiveServer:
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def archive(tiny, tmp_path) -> bytes:
    return tar_of(tiny["reference"], tmp_path / "tiny.tar.gz").read_bytes()


def test_a_download_resumes_after_the_server_drops_the_connection(tiny, archive, capsys):
    cut = len(archive) // 3
    with ArchiveServer(archive, drop_after=cut) as server:
        assert data(tiny, server.url, "--no-features") == 0, capsys.readouterr().err
    assert server.ranges == [None, f"bytes={cut}-"]
    printed, err = capsys.readouterr()
    assert f"the connection ended at {cut:,} bytes of {len(archive):,} bytes; asking for the rest" in err
    assert re.search(
        rf"^download +\d+\.\d s +{len(archive):,} bytes of {len(archive):,} bytes in 2 request", printed, re.M
    )
    assert same_files(tiny["reference"], tiny["work"] / "data" / "tiny")
    assert not (tiny["work"] / "data" / ".tiny.download").exists()


def test_a_server_that_ignores_the_range_sends_the_whole_file_again(tiny, archive, capsys):
    cut = len(archive) // 3
    with ArchiveServer(archive, drop_after=cut, ranges=False) as server:
        assert data(tiny, server.url, "--no-features") == 0, capsys.readouterr().err
    assert server.ranges == [None, f"bytes={cut}-"]
    assert same_files(tiny["reference"], tiny["work"] / "data" / "tiny")


def test_a_stopped_download_resumes_in_the_next_command(tiny, archive, capsys):
    """The server drops the connection, then answers 503: one line, exit 2, the part file kept; once the server is
    back, the same command asks for the rest only, and the bytes put together make the archive."""
    cut = len(archive) // 2
    with ArchiveServer(archive, drop_after=cut, after_drop=503) as server:
        assert data(tiny, server.url, "--no-features") == 2
        line = one_error_line(capsys, progress=1)  # the dropped connection, then the 503
        assert f"answered 503 Service Unavailable; the {cut:,} bytes fetched so far are kept: the same" in line
        part = tiny["work"] / "data" / ".tiny.download" / "tiny.tar.gz.part"
        assert part.read_bytes() == archive[:cut]
        assert nothing_in_place(tiny)
        server.after_drop, server.ranges = "ok", []
        assert data(tiny, server.url, "--no-features") == 0, capsys.readouterr().err
    assert server.ranges == [f"bytes={cut}-"]
    assert f"resumed at {cut:,} bytes" in capsys.readouterr().out
    assert same_files(tiny["reference"], tiny["work"] / "data" / "tiny")


def test_a_url_that_answers_404_is_one_line(tiny, archive, capsys):
    with ArchiveServer(archive, status=404) as server:
        assert data(tiny, server.url) == 2
    assert "the server answered 404" in one_error_line(capsys)
    assert nothing_in_place(tiny)


def test_a_server_that_sends_nothing_is_one_line_after_the_timeout(tiny, archive, capsys):
    with ArchiveServer(archive, stall=True) as server:
        assert data(tiny, server.url, "--timeout", "0.5") == 2
        assert server.ranges == [None]  # it asked once, and got nothing
    assert "the server sent nothing for 0.5 s (read timeout" in one_error_line(capsys)
    assert nothing_in_place(tiny)


@pytest.mark.skipif(
    not Path("/dev/full").exists(), reason="/dev/full (a device whose writes fail with ENOSPC) is absent"
)
def test_a_disk_that_fills_mid_download_is_one_line_naming_the_folder(tiny, archive, capsys):
    """The part file is /dev/full, whose every write fails with ENOSPC: the disk full, as the write sees it."""
    downloads = tiny["work"] / "data" / ".tiny.download"
    downloads.mkdir(parents=True)
    (downloads / "tiny.tar.gz.part").symlink_to("/dev/full")
    with ArchiveServer(archive) as server:
        assert data(tiny, server.url) == 2
    line = one_error_line(capsys)
    assert "no space left on data/.tiny.download: the download stopped at" in line, line
    assert "run the same command: it resumes" in line
    assert nothing_in_place(tiny)


# --- the features ----------------------------------------------------------------------------------------


def test_one_command_from_a_zip_to_image_and_text_features(tiny, tmp_path, capsys, small_bert_dir):
    """The whole command on the tiny set: the real EfficientNet and a one-layer MiniLM; each step timed; the same
    command again finds everything done."""
    from itrlab.data import open_precomp
    from itrlab.data.text_features import TextFeatures

    source = zip_of(tiny["reference"], tmp_path / "tiny.zip")
    args = ("--text-model", str(small_bert_dir), "--threads", "1")
    assert data(tiny, source, *args) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    for step in ("unpack", "verify", "image features", "text features"):
        assert re.search(rf"^{step} +\d+\.\d s ", printed, re.M), (step, printed)
    precomp = tiny["work"] / "data" / "tiny_precomp"
    assert open_precomp(precomp / "pool1x1", "train").features.shape == (4, 1, 1280)
    assert TextFeatures(precomp / "text").folder.is_dir()
    assert data(tiny, source, *args) == 0
    again = capsys.readouterr().out
    assert "already up to date" in again and not re.search(r"^unpack", again, re.M)


# --- the shipped manifest and the real copy --------------------------------------------------------------


def test_the_shipped_flickr8k_manifest_is_small_and_names_the_folder_the_config_reads():
    path = find_manifest("flickr8k")
    assert path == REPO / "configs" / "datasets" / "manifests" / f"flickr8k{SUFFIX}"
    assert path.stat().st_size < 500_000
    manifest = read_manifest(path)
    assert manifest.format_version == 1 and manifest_bytes(manifest) == path.read_bytes()
    assert {split: len(images) for split, images in manifest.splits.items()} == {
        "train": 6000,
        "dev": 1000,
        "test": 1000,
    }
    config = yaml.safe_load((REPO / "configs" / "datasets" / "flickr8k_precomp.yaml").read_text())
    pooled = Path(config["root"])
    assert str(pooled.parent) == manifest.precomp and pooled.name.removeprefix("pool") in manifest.extract.pool.split(
        ","
    )
    assert manifest.extract.text == "tokens" and manifest.extract.dtype == "float16"


@pytest.mark.skipif(
    not (FLICKR8K / "images").is_dir(),
    reason=f"Flickr8K not found at {FLICKR8K}; it lives beside the checkout in ../shared/data/flickr8k",
)
def test_the_shipped_manifest_verifies_the_real_flickr8k_copy(tmp_path, monkeypatch, capsys):
    """All 8,000 photos, the caption file and the split, copied and verified (no extraction)."""
    monkeypatch.chdir(tmp_path)
    assert main(["data", "flickr8k", "--from", str(FLICKR8K), "--no-features", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    copied = re.search(r"^copy +(\d+\.\d) s +8,004 files", printed, re.M)
    verified = re.search(r"^verify +(\d+\.\d) s +8,000 images, captions_flickr8k.json and splits.txt", printed, re.M)
    assert copied and verified, printed
    assert not (tmp_path / "data" / ".flickr8k.partial").exists()
