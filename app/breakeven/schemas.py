"""Wire schemas of load sweeps, breakeven fits and tiers; the typed form of a stored fit."""

from datetime import datetime
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.breakeven.rules.model import ScheduleBand, StepTimeModel
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


# ------------------------------------------------------------------------ the stored fit body


class _Stored(BaseModel):
    """Part of a stored fit: the fields readers use are typed, the rest is kept as is."""

    model_config = ConfigDict(extra="allow", frozen=True)


class StoredComparison(_Stored):
    concurrency: float
    measured_speedup: float | None = None
    predicted_speedup: float | None = None
    """None where the fit wrote a non-finite number."""


class StoredConfig(_Stored):
    config: str
    method: str
    k: int = Field(ge=0)
    mean_acceptance_length: float | None = None
    alpha: float | None = None
    """Per-token acceptance rate implied by the mean acceptance length."""
    comparisons: tuple[StoredComparison, ...] = ()
    schedule: tuple[tuple[int, int, int], ...] = ()


class StoredParameter(_Stored):
    name: str
    """``floor_s``, ``per_token_s``, ``per_sequence_s`` or ``<config>.<drafter cost>``."""
    value: float | None


class StoredStepModel(_Stored):
    floor_s: float
    per_token_s: float
    per_sequence_s: float = 0.0

    def model(self) -> StepTimeModel:
        """The domain's step-time model."""
        return StepTimeModel(
            floor_s=self.floor_s, per_token_s=self.per_token_s, per_sequence_s=self.per_sequence_s
        )


class StoredFit(_Stored):
    """A fit as ``breakeven fit --json`` prints it and ``sweeps.fit`` stores it.

    Readers validate the JSON with this model instead of indexing into it: a body that is
    not a fit fails here, once, with pydantic naming the field.
    """

    sweep_id: int | None = None
    config: str
    """The primary speculative config the summary fields describe."""
    breakeven_concurrency: float | None = None
    breakeven_ci: tuple[float | None, float | None] | None = None
    """An end is None where the bootstrap left the searched range."""
    schedule: tuple[tuple[int, int, int], ...]
    """vLLM ``num_speculative_tokens_per_batch_size`` of the primary config."""
    inflection_concurrency: float | None = None
    interval_method: str | None = None
    """How ``breakeven_ci`` was computed (fits stored before it was said: the bootstrap)."""
    pinned_down: bool | None = None
    """Whether the measured levels around the crossing bound it."""
    next_levels: tuple[int, ...] = ()
    """Concurrency levels to measure next when it is not pinned down."""
    repeats_for_target: int | None = None
    """Runs per level for an interval within 10% of the estimate."""
    baseline_config: str | None = None
    step_model: StoredStepModel | None = None
    parameters: tuple[StoredParameter, ...] = ()
    configs: tuple[StoredConfig, ...]

    @model_validator(mode="after")
    def _primary_is_a_config(self) -> Self:
        if not any(c.config == self.config for c in self.configs):
            raise ValueError(f"config {self.config!r} is not one of 'configs'")
        return self

    @property
    def primary(self) -> StoredConfig:
        """The config the summary fields describe."""
        return next(c for c in self.configs if c.config == self.config)

    @property
    def bands(self) -> tuple[ScheduleBand, ...]:
        """The primary config's schedule as domain bands."""
        return tuple(ScheduleBand(start, end, k) for start, end, k in self.schedule)

    def parameter(self, name: str, default: float = 0.0) -> float:
        """A fitted parameter's value, or ``default`` when the fit has none by that name."""
        found = next((p.value for p in self.parameters if p.name == name), None)
        return default if found is None else found
