"""The schema of a text-feature folder's ``text.json`` (:mod:`itrlab.data.text_features`) and of the record of its
arrays' digests that a run (``vocab.json``) and a model (``model.json``) keep: every key that is read typed and
bounded by one schema, so that a bad key is one line naming it (what it holds, what is allowed), as
``summary.json`` is read (:mod:`itrlab.report.summary_schema`), before any of its values is used."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from itrlab.files import validate_record

MAX_WIDTH = 1 << 16  # a text model's hidden size (MiniLM: 384, BERT-large: 1,024)
MAX_COUNT = 10**9  # captions, tokens of a split

Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
SplitName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]


class SplitEntry(BaseModel):
    """One split of ``text.json``: its captions (count, digest), its tokens, the digests of its array files."""

    model_config = ConfigDict(strict=True, extra="allow")

    captions: Count
    captions_sha256: Sha256
    tokens: Count | None = None  # with token states
    arrays_sha256: dict[Literal["tokens", "lengths", "sentence"], Sha256] | None = None


class TextManifest(BaseModel):
    """The keys of ``text.json`` that are read, typed and bounded (others are kept as written)."""

    model_config = ConfigDict(strict=True, extra="allow")

    hidden_size: Annotated[int, Field(ge=1, le=MAX_WIDTH)]
    kinds: Annotated[list[Literal["tokens", "sentence"]], Field(min_length=1, max_length=2)]
    splits: Annotated[dict[SplitName, SplitEntry], Field(max_length=100)]
    model: dict[str, Any] = {}
    max_len: Annotated[int, Field(ge=2, le=1 << 16)] | None = None
    fingerprint: Annotated[str, StringConstraints(max_length=128)] | None = None


ArrayDigests = Annotated[
    dict[SplitName, dict[Literal["tokens", "lengths", "sentence"], Sha256]], Field(max_length=100)
]  # the sha256 of text features' array files by split and role, as a run and a model record them


class _Digests(BaseModel):
    model_config = ConfigDict(strict=True)

    arrays_sha256: ArrayDigests


def typed_digests(path: Path, recorded: Any) -> dict[str, dict[str, str]]:
    """``recorded`` (a record of text features' digests read from ``path``) checked to be one; DataError
    naming ``path`` and the bad key otherwise."""
    return validate_record(path, {"arrays_sha256": recorded}, _Digests, "record of text-feature digests").arrays_sha256


__all__ = ["ArrayDigests", "Sha256", "SplitEntry", "TextManifest", "typed_digests"]
