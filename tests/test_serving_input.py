"""What a served model refuses before it embeds (itrlab.tracking.serving_input), in this process: the parts that a
real server's request would take long to build (features over the byte limit) and the edges of a feature value
(beyond float32's range, a boolean), photos that are not base64 text, and a request of more than one kind of input.
The served answers themselves: tests/test_model_serve.py."""

from __future__ import annotations

import base64
import json

import numpy as np
import pandas as pd
import pytest

from itrlab.tracking.serving_input import (
    MAX_BYTES,
    MAX_PHOTOS,
    RefusedRequest,
    checked_captions,
    checked_features,
    checked_images,
    input_column,
)


def test_features_over_the_byte_limit_are_refused_before_the_rest_is_read():
    row = np.zeros((2, MAX_BYTES // 16 + 1), dtype=np.float32)  # 4-byte values: one row just over half the limit
    assert checked_features([row]).shape == (1, *row.shape)
    with pytest.raises(RefusedRequest, match=r"the request's features come to 32\.0 MiB; at most 32 MiB per request"):
        checked_features([row, row])


@pytest.mark.parametrize(
    "value, line",
    [
        ([[1e39, 0.0]], "features row 0 holds NaN or infinity"),  # finite as a double, infinite as the model's float32
        ([[True, False]], "features row 0 is not an (R, D) list"),
        ([[["1"]]], "features row 0 is not an (R, D) list"),
        ([1.0, 2.0], "features row 0 is not an (R, D) list"),
    ],
    ids=["beyond float32", "booleans", "too deep", "one dimension"],
)
def test_a_feature_value_the_model_cannot_read_is_refused(value, line):
    with pytest.raises(RefusedRequest) as refused:
        checked_features([value])
    assert refused.value.line.startswith(line) and "\n" not in refused.value.serialize_as_json()


def test_the_answer_is_one_line_whatever_mlflow_puts_before_the_message():
    """MLflow's scoring server prefixes a predict error's message with the whole request; the answer keeps the line."""
    with pytest.raises(RefusedRequest) as refused:
        checked_captions(["a dog", None])
    refused.value.message = f"Failed to predict data '{'x' * 100}\n...'. \nError: {refused.value.message}"
    assert refused.value.get_http_status_code() == 400
    assert json.loads(refused.value.serialize_as_json()) == {
        "error_code": "INVALID_PARAMETER_VALUE",
        "message": "caption row 1 is null; each caption is a non-empty string",
    }


def test_photos_are_base64_text_within_the_rows_and_bytes_of_a_request():
    photo = b"\x89PNG\r\n\x1a\n" + bytes(range(256))  # the bytes are the model's to decode: only base64 here
    assert checked_images([base64.b64encode(photo).decode()] * 2) == [photo, photo]
    for rows, line in (
        (["aGVsbG8=", "aGVsbG8"], "image row 1 is not base64 text"),  # padding missing
        (["aGVs bG8="], "image row 0 is not base64 text"),  # a space inside
        (["data:image/png;base64,aGVsbG8="], "image row 0 is not base64 text"),
        (["aGVsbG8=", "ünïcode"], "image row 1 is not base64 text"),
        ([b"aGVsbG8="], "image row 0 is bytes"),
        ([None], "image row 0 is null"),
        ([""], "image row 0 is empty"),
        ([], "the request holds no photos; send 1 to 256 rows"),
        (["aGVsbG8="] * (MAX_PHOTOS + 1), f"the request holds {MAX_PHOTOS + 1} photos; at most {MAX_PHOTOS} rows"),
    ):
        with pytest.raises(RefusedRequest) as refused:
            checked_images(rows)
        assert refused.value.line.startswith(line), refused.value.line
    big = base64.b64encode(bytes(MAX_BYTES // 2 + 3)).decode()  # two of them: just over the limit
    assert len(checked_images([big])[0]) == MAX_BYTES // 2 + 3
    with pytest.raises(RefusedRequest, match=r"the request's photos come to 32\.0 MiB; at most 32 MiB per request"):
        checked_images([big, big])


@pytest.mark.parametrize(
    "frame, line",
    [
        ({"caption": ["a dog"]}, None),
        ({"image": ["aGVsbG8="], "id": [7]}, None),  # a column beside the input is left alone
        ({"text": ["a dog"]}, "an itrlab model's input is a frame with a 'caption' column"),
        ({"caption": ["a dog", None], "image": [None, "aGVsbG8="]}, "the request mixes rows of 'caption' and 'image'"),
        ({"features": [None, [[0.0]]], "image": [None, "aGVsbG8="]}, "row 1 holds both 'features' and 'image'"),
        ({"caption": ["a dog"], "features": [[[0.0]]]}, "row 0 holds both 'caption' and 'features'"),
    ],
    ids=["captions", "photos beside ids", "no input column", "mixed rows", "both in a row", "caption and features"],
)
def test_a_request_holds_one_kind_of_input(frame, line):
    frame = pd.DataFrame(frame)
    if line is None:
        assert input_column(frame) in frame.columns
        return
    with pytest.raises(RefusedRequest) as refused:
        input_column(frame)
    assert refused.value.line.startswith(line) and "\n" not in refused.value.line, refused.value.line
