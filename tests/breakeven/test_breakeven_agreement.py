"""The breakeven answer agrees with the measurements: the model interpolates between the
levels that bracket the crossing; where it crosses outside them, the measured crossing is
reported and the disagreement said."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.breakeven.rules.local_crossing import LocalCrossing
from app.breakeven.rules.report import disagreement


def _local(low: float, high: float, estimate: float) -> LocalCrossing:
    return LocalCrossing(
        estimate=estimate, interval=None, bracket=(low, high), levels_used=(low, high)
    )


@given(
    low=st.floats(1, 1000),
    ratio=st.floats(1.01, 8),
    where=st.floats(0, 1),
)
def test_a_model_crossing_between_the_bracketing_levels_agrees(
    low: float, ratio: float, where: float
) -> None:
    high = low * ratio
    model = low + where * (high - low)
    assert disagreement(model, _local(low, high, (low + high) / 2)) is None


@pytest.mark.parametrize("model", [3.9, 8.1, None])
def test_a_model_crossing_outside_them_or_none_disagrees(model: float | None) -> None:
    said = disagreement(model, _local(4, 8, 5.5))
    assert said is not None
    assert "between levels 4 and 8" in said
    assert "reporting the measured crossing" in said


def test_without_a_bracket_the_model_is_all_there_is() -> None:
    assert disagreement(12.0, None) is None
    assert disagreement(None, None) is None
