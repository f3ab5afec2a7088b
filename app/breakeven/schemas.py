"""Wire schemas of load sweeps and breakeven fits."""

from datetime import datetime
from typing import Any

from pydantic import ConfigDict

from app.kit.schemas import Schema


class SweepRead(Schema):
    id: int
    name: str
    deployment: str | None
    created_at: datetime
    points: int
    fitted: bool
    """Whether a fit is stored with the sweep."""
    breakeven_concurrency: float | None
    """From the stored fit, if any."""


class SweepPointRead(Schema):
    config: str
    method: str
    k: int
    concurrency: int
    output_tokens_per_s: float
    requests_per_s: float | None
    tpot_p50_s: float | None
    metrics: dict[str, Any]


class SweepDetail(SweepRead):
    settings: dict[str, Any]
    point_list: list[SweepPointRead]


class FitRead(Schema):
    sweep_id: int
    computed_now: bool
    """True when fitted for this request (not stored), False for the stored fit."""
    config: str | None
    """The primary speculative config the summary fields describe."""
    breakeven_concurrency: float | None
    """Concurrency where speculation stops paying off; null when the curves do not cross in
    the measured range."""
    breakeven_ci: list[float | None] | None
    schedule: list[list[int]]
    """vLLM ``num_speculative_tokens_per_batch_size`` bands ``[start, end, k]``."""
    inflection_concurrency: float | None
    fit: dict[str, Any]
    """Everything: parameters, per-config analysis, measured-vs-modelled comparisons."""


class _Open(Schema):
    model_config = ConfigDict(extra="allow")


class TiersRead(_Open):
    workload: str
    """Where acceptance and the TPOT tail come from: the catalog, or a sweep."""
    tiers: list[dict[str, Any]]
    """Per tier: price, modelled replica, and unit-cost curves (money as decimal strings)."""


class TierRecommendationRead(_Open):
    concurrency: int
    tpot_p90_target_s: float
    recommended: str | None
    """The tier to use; null when none meets the target."""
    options: list[dict[str, Any]]
    reasoning: list[str]
