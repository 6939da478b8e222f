"""What a served itrlab model embeds, checked before it embeds anything (``mlflow models serve``, any
``mlflow.pyfunc.load_model(...).predict``): one kind of input (:func:`input_column`: captions, image features or
photos), at most :data:`MAX_ROWS` rows (:data:`MAX_PHOTOS` photos) and :data:`MAX_BYTES` bytes of what the model
would read (UTF-8 captions, features as 4-byte floats, photos' decoded bytes); captions non-empty strings, features
nested lists of finite numbers of one shape, photos base64 text. Anything else is a :class:`RefusedRequest`, an HTTP
400 with one line (a ``null`` caption is not the caption "None", a NaN feature not a NaN embedding). Whether a
photo decodes is the model's check. The scoring server parses a body whole before the model sees it, so a body limit
for a server open to others belongs to its proxy (docs/models.md).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

INPUTS = ("caption", "features", "image")  # a request's column: captions, images' region features, photos
MAX_ROWS = 4096  # captions or images per request
MAX_PHOTOS = 256  # photos per request: each goes through the image encoder (about 0.1 s of a CPU core)
MAX_BYTES = 32 << 20  # of input per request: the captions' UTF-8 text, or the images' features as 4-byte floats
FEATURE_BYTES = 4  # a feature value as the model reads it (float32)


class RefusedRequest(MlflowException):
    """A request the model cannot embed: the scoring server answers 400 (``INVALID_PARAMETER_VALUE``) with
    :meth:`serialize_as_json`, which keeps this one line where the server would prepend the whole request."""

    def __init__(self, line: str):
        super().__init__(line, error_code=INVALID_PARAMETER_VALUE)
        self.line = line

    def serialize_as_json(self) -> str:
        return json.dumps({"error_code": self.error_code, "message": self.line})


def _kind(value: Any) -> str:
    """What a JSON value that is not a caption is, in a few words."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "null"
    if isinstance(value, (bool, np.bool_)):
        return "a boolean"
    if isinstance(value, (int, float, np.number)):
        return "a number"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple, np.ndarray)):
        return "a list"
    return type(value).__name__


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def input_column(frame: Any) -> str:
    """The one column of :data:`INPUTS` that the request ``frame`` holds, or a :class:`RefusedRequest` for a frame
    of none, or of two (naming the first row that holds both)."""
    columns = set(getattr(frame, "columns", ()))
    held = [name for name in INPUTS if name in columns]
    if len(held) == 1:
        return held[0]
    kinds = "a 'caption' column (text), a 'features' column (region features per image) or an 'image' column (a "
    kinds += "JPEG or PNG photo per row, base64-encoded)"
    if not held:
        raise RefusedRequest(
            f"an itrlab model's input is a frame with {kinds}; got columns {sorted(map(str, columns)) or 'none'}"
        )
    for row in range(len(frame)):
        both = [name for name in held if not _missing(frame[name].iloc[row])]
        if len(both) > 1:
            raise RefusedRequest(
                f"row {row} holds both '{both[0]}' and '{both[1]}'; a request embeds one kind of input: {kinds}"
            )
    raise RefusedRequest(
        f"the request mixes rows of {' and '.join(repr(name) for name in held)}; a request embeds one kind of "
        f"input: send each kind in a request of its own"
    )


def _rows(values: Iterable[Any], what: str, limit: int = MAX_ROWS) -> list[Any]:
    rows = list(values)
    if not rows:
        raise RefusedRequest(f"the request holds no {what}; send 1 to {limit:,} rows")
    if len(rows) > limit:
        raise RefusedRequest(f"the request holds {len(rows):,} {what}; at most {limit:,} rows per request")
    return rows


def _over_bytes(size: int, what: str) -> RefusedRequest:
    return RefusedRequest(
        f"the request's {what} come to {size / (1 << 20):,.1f} MiB; at most {MAX_BYTES >> 20} MiB per request"
    )


def checked_captions(values: Iterable[Any]) -> list[str]:
    """The captions of a request's ``caption`` column, or a :class:`RefusedRequest` naming the first that is not a
    non-empty string, or a request over :data:`MAX_ROWS` rows or :data:`MAX_BYTES` bytes of text."""
    captions = _rows(values, "captions")
    size = 0
    for row, caption in enumerate(captions):
        if not isinstance(caption, str):
            raise RefusedRequest(f"caption row {row} is {_kind(caption)}; each caption is a non-empty string")
        if not caption.strip():
            raise RefusedRequest(f"caption row {row} is empty; each caption is a non-empty string")
        size += len(caption.encode("utf-8"))
        if size > MAX_BYTES:
            raise _over_bytes(sum(len(c.encode("utf-8")) for c in captions if isinstance(c, str)), "captions")
    return captions


def checked_features(values: Iterable[Any]) -> np.ndarray:
    """The ``features`` column as one (N, R, D) float32 array, or a :class:`RefusedRequest` naming the first row that is
    not an (R, D) nested list of finite numbers of the first row's shape, or a request over the limits. Whether (R, D)
    is the model's layout is the model's check."""
    images = _rows(values, "images")
    arrays, size = [], 0
    for row, value in enumerate(images):
        try:
            array = np.asarray(value)
        except (ValueError, TypeError):  # rows of different lengths
            array = None
        if array is None or array.dtype.kind not in "fiu" or array.ndim != 2:
            raise RefusedRequest(
                f"features row {row} is not an (R, D) list of R lists of D numbers"
                + (f" ({_kind(value)})" if not isinstance(value, (list, tuple, np.ndarray)) else "")
            )
        if arrays and array.shape != arrays[0].shape:
            raise RefusedRequest(
                f"features row {row} is {array.shape[0]} x {array.shape[1]}, row 0 {arrays[0].shape[0]} x "
                f"{arrays[0].shape[1]}; every image has the model's R x D layout"
            )
        with np.errstate(over="ignore"):  # beyond float32's range: infinite, refused below
            array = array.astype(np.float32)
        if not np.isfinite(array).all():
            raise RefusedRequest(
                f"features row {row} holds NaN or infinity; features are finite numbers (within float32's range)"
            )
        size += array.size * FEATURE_BYTES
        if size > MAX_BYTES:
            raise _over_bytes(len(images) * array.size * FEATURE_BYTES, "features")
        arrays.append(array)
    return np.stack(arrays)


def checked_images(values: Iterable[Any]) -> list[bytes]:
    """The ``image`` column (standard base64 with padding) as bytes, or a :class:`RefusedRequest` naming the first row
    that is not base64, or a request over :data:`MAX_PHOTOS` rows or :data:`MAX_BYTES` bytes."""
    texts = _rows(values, "photos", MAX_PHOTOS)
    photos, size = [], 0
    for row, text in enumerate(texts):
        if not isinstance(text, str):
            raise RefusedRequest(
                f"image row {row} is {_kind(text)}; each image is a JPEG or PNG photo's bytes, base64-encoded"
            )
        try:
            photo = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):  # a character out of the alphabet, wrong padding; non-ASCII text
            raise RefusedRequest(
                f"image row {row} is not base64 text; each image is a JPEG or PNG photo's bytes, base64-encoded"
            ) from None
        if not photo:
            raise RefusedRequest(f"image row {row} is empty; each image is a JPEG or PNG photo's bytes, base64-encoded")
        size += len(photo)
        if size > MAX_BYTES:  # the whole request's, as base64 gives them
            raise _over_bytes(sum(len(t) * 3 // 4 for t in texts if isinstance(t, str)), "photos")
        photos.append(photo)
    return photos
