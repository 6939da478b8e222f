"""MLflow tables as the UI shows them: column names it can display, floats to 6 significant digits, and the
JSON layout of its table artifacts (pandas' ``split`` orientation)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def table_column(name: str) -> str:
    """A column name MLflow's table view shows (it reads ``a.b`` as a nested path: an empty column)."""
    return name.replace(".", "/")


def significant(value: Any, digits: int = 6) -> Any:
    """A float cell to ``digits`` significant digits (not decimals: 5e-05 stays 5e-05); others as they are."""
    return float(f"{value:.{digits}g}") if isinstance(value, float) and math.isfinite(value) else value


def write_table(data: dict[str, list], path: Path) -> None:
    """``data`` (column -> values) as the JSON file of an MLflow table at ``path``: the layout
    ``MlflowClient.log_table`` writes, dotted column names as ``a/b`` (:func:`table_column`), floats to 6
    significant digits (the UI shows them as written: ``13.8333333333``)."""
    import pandas as pd

    table = pd.DataFrame({table_column(key): [significant(v) for v in values] for key, values in data.items()})
    table.to_json(path, orient="split", index=False, date_format="iso")
