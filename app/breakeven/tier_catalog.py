"""The tier catalog (``app/data/tiers.json``) as typed, checked data: the one parser of it.

The CLI (``tiers show``, ``tiers recommend``), the API (``/v1/tiers``) and the tiers dashboard
all read the catalog through :func:`load_tier_catalog`. The product brief's figures are kept
as quoted claims with their source and verbatim text (:class:`QuotedFigures`,
:class:`QuotedSpeedup`), never as constants: :mod:`app.breakeven.tiers` checks them against
what the model computes. Money in the file is a decimal string, integer micros once read.
"""

import json
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from app.domain.errors import Invalid
from app.domain.money import decimal_to_micros

CATALOG = "data/tiers.json"
"""The catalog inside the ``app`` package."""


class TierCatalogError(Invalid):
    """The tier catalog file is not valid; the message names the entry."""


def _decimal_string(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError('money is a decimal string in the catalog, e.g. "0.12"')
    return value


Positive = Annotated[float, Field(gt=0)]
Efficiency = Annotated[float, Field(gt=0, le=1)]
Usd = Annotated[
    Decimal, BeforeValidator(_decimal_string), Field(ge=0, max_digits=30, decimal_places=6)
]


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Calibration(_Entry):
    """How far real engines stay from the roofline (see tiers.json for the source)."""

    bandwidth_efficiency: Efficiency
    compute_efficiency: Efficiency
    step_overhead_s: float = Field(ge=0)
    source: str


class SourcedValue(_Entry):
    value: Positive
    source: str


class GpuSpec(_Entry):
    """Peak figures of one GPU."""

    bf16_dense_tflops: Positive
    hbm_tb_per_s: Positive
    source: str


class ModelSpec(_Entry):
    params_billion: Positive


class Span(_Entry):
    """An inclusive whole-number range: instances of a tier, or its concurrent sessions."""

    min: int = Field(ge=1)
    max: int

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.max < self.min:
            raise ValueError(f"max {self.max} is below min {self.min}")
        return self


class UsdRange(_Entry):
    min: Usd
    max: Usd

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.max < self.min:
            raise ValueError(f"max {self.max} is below min {self.min}")
        return self

    @property
    def micros(self) -> tuple[int, int]:
        """``(min, max)`` in USD micros."""
        return decimal_to_micros(self.min), decimal_to_micros(self.max)


class Quote(_Entry):
    """Where a claim comes from, and its words as written there."""

    source: str
    """The document and place, e.g. ``reference/product-brief.txt, lines 8-10``."""
    text: tuple[str, ...] = Field(min_length=1)
    """The quoted lines, verbatim."""

    @property
    def quotation(self) -> str:
        """The quoted lines on one line."""
        return " | ".join(self.text)


class QuotedFigures(Quote):
    """A tier's quoted monthly cost range and cost per 1K session-seconds."""

    usd_per_month: UsdRange
    usd_per_1k_session_seconds: Usd

    @property
    def usd_micros_per_1k_session_seconds(self) -> int:
        return decimal_to_micros(self.usd_per_1k_session_seconds)


class QuotedSpeedup(Quote):
    """A quoted speedup of speculative over plain decoding."""

    value: Positive


class TierSpeculation(_Entry):
    """The tier's drafter and the acceptance assumed for it."""

    method: str
    draft: str | None = None
    k: int = Field(ge=1)
    mean_acceptance_length: float = Field(ge=1)
    draft_cost_ratio: float | None = Field(default=None, ge=0)
    """Given for head drafters; for a draft model it follows from the roofline of both."""
    acceptance_source: str

    @model_validator(mode="after")
    def _length_fits_k(self) -> Self:
        if self.mean_acceptance_length > self.k + 1:
            raise ValueError(f"mean_acceptance_length must be at most k + 1 = {self.k + 1}")
        return self


class Tier(_Entry):
    """One maturity tier: what it provisions, serves and is said to cost."""

    name: str
    description: str
    instance_type: str
    instances: Span
    gpus_per_replica: int = Field(ge=1)
    replicas_per_instance: int = Field(ge=1)
    max_concurrency_per_replica: int = Field(ge=1)
    max_concurrency_source: str | None = None
    scheduler: str
    target: str
    target_source: str | None = None
    bytes_per_param: Positive
    speculation: TierSpeculation
    sessions: Span
    quoted: QuotedFigures | None = None
    """The brief's figures for this tier, a claim to check; None where none was quoted."""

    @property
    def notes(self) -> tuple[str, ...]:
        """Sources of assumptions specific to this tier."""
        return tuple(s for s in (self.max_concurrency_source, self.target_source) if s)


class CatalogClaims(_Entry):
    speedup: QuotedSpeedup | None = None
    """The architecture's quoted speedup (not per tier)."""


class TierCatalog(_Entry):
    """All tiers plus the shared assumptions and claims."""

    note: str = Field(default="", alias="_note")
    hours_per_month: Positive
    calibration: Calibration
    tpot_p90_over_mean: SourcedValue
    claims: CatalogClaims = CatalogClaims()
    gpus: dict[str, GpuSpec]
    models: dict[str, ModelSpec]
    tiers: tuple[Tier, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _references_resolve(self) -> Self:
        names = [tier.name for tier in self.tiers]
        if len(set(names)) != len(names):
            raise ValueError(f"tier names repeat: {', '.join(names)}")
        for tier in self.tiers:
            for model in (tier.target, tier.speculation.draft):
                if model is not None and model not in self.models:
                    raise ValueError(f"tier {tier.name!r}: model {model!r} is not in 'models'")
        return self

    def tier(self, name: str) -> Tier:
        """The tier with this name.

        Raises:
            TierCatalogError: If there is none.
        """
        for tier in self.tiers:
            if tier.name == name:
                return tier
        raise TierCatalogError(
            f"unknown tier {name!r}; the catalog has {', '.join(t.name for t in self.tiers)}"
        )


def _where(loc: tuple[int | str, ...]) -> str:
    parts = [f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc]
    return "".join(parts).lstrip(".") or "catalog"


def parse_tier_catalog(data: object, *, source: str = "tiers.json") -> TierCatalog:
    """Check and type a decoded tiers.json.

    Raises:
        TierCatalogError: On a missing key, a wrong type or a broken reference, naming the
            entry (``tiers[0].instance_type: Field required``).
    """
    try:
        return TierCatalog.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{_where(e['loc'])}: {e['msg']}" for e in exc.errors())
        raise TierCatalogError(f"{source}: {problems}") from None


def load_tier_catalog(path: Path | None = None) -> TierCatalog:
    """The tier catalog: the one shipped with the package, or the file at ``path``.

    Raises:
        TierCatalogError: If the file cannot be read or is not a valid catalog.
    """
    source = str(path) if path is not None else f"app/{CATALOG}"
    try:
        text = (
            path.read_text("utf-8")
            if path is not None
            else resources.files("app").joinpath(CATALOG).read_text("utf-8")
        )
        data = json.loads(text)
    except (OSError, json.JSONDecodeError) as exc:
        raise TierCatalogError(f"{source}: not a readable JSON file: {exc}") from None
    return parse_tier_catalog(data, source=source)
