"""What a served model refuses before it embeds (itrlab.tracking.serving_input), in this process: the parts that a
real server's request would take long to build (features over the byte limit) and the edges of a feature value
(beyond float32's range, a boolean). The served answers themselves: tests/test_model_serve.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from itrlab.tracking.serving_input import MAX_BYTES, RefusedRequest, checked_captions, checked_features


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
