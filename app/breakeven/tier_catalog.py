"""The tier catalog (``app/data/tiers.json``) as typed, checked data."""

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any


class TierCatalogError(Exception):
    """The tier catalog file is not valid; the message names the entry."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """How far real engines stay from the roofline (see tiers.json for the source)."""

    bandwidth_efficiency: float
    compute_efficiency: float
    step_overhead_s: float
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """Peak figures of one GPU."""

    bf16_dense_tflops: float
    hbm_tb_per_s: float
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TierSpeculation:
    """The tier's drafter and the acceptance assumed for it."""

    method: str
    draft: str | None
    k: int
    mean_acceptance_length: float
    draft_cost_ratio: float | None
    """Given for head drafters; for a draft model it follows from the roofline of both."""
    acceptance_source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Tier:
    """One maturity tier: what it provisions, serves and is said to cost."""

    name: str
    description: str
    instance_type: str
    instances_min: int
    instances_max: int
    gpus_per_replica: int
    replicas_per_instance: int
    max_concurrency_per_replica: int
    scheduler: str
    target: str
    bytes_per_param: float
    speculation: TierSpeculation
    sessions_min: int
    sessions_max: int
    quoted: dict[str, Any]
    """The brief's quoted figures, kept beside the computed ones (None: not provided)."""
    notes: tuple[str, ...]
    """Sources of assumptions specific to this tier."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TierCatalog:
    """All tiers plus the shared assumptions."""

    hours_per_month: float
    calibration: Calibration
    tpot_p90_over_mean: float
    tpot_p90_source: str
    gpus: dict[str, GpuSpec]
    model_params_billion: dict[str, float]
    tiers: tuple[Tier, ...]

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


def _tier(item: dict[str, Any]) -> Tier:
    spec = item["speculation"]
    notes = tuple(str(v) for k, v in item.items() if k.endswith("_source"))
    ratio = spec.get("draft_cost_ratio")
    return Tier(
        name=str(item["name"]), description=str(item["description"]),
        instance_type=str(item["instance_type"]),
        instances_min=int(item["instances"]["min"]), instances_max=int(item["instances"]["max"]),
        gpus_per_replica=int(item["gpus_per_replica"]),
        replicas_per_instance=int(item["replicas_per_instance"]),
        max_concurrency_per_replica=int(item["max_concurrency_per_replica"]),
        scheduler=str(item["scheduler"]), target=str(item["target"]),
        bytes_per_param=float(item["bytes_per_param"]),
        speculation=TierSpeculation(
            method=str(spec["method"]), draft=spec.get("draft"), k=int(spec["k"]),
            mean_acceptance_length=float(spec["mean_acceptance_length"]),
            draft_cost_ratio=None if ratio is None else float(ratio),
            acceptance_source=str(spec["acceptance_source"])),
        sessions_min=int(item["sessions"]["min"]), sessions_max=int(item["sessions"]["max"]),
        quoted=dict(item["quoted"]), notes=notes,
    )  # fmt: skip


def parse_tier_catalog(data: dict[str, Any]) -> TierCatalog:
    """Check and type a decoded tiers.json.

    Raises:
        TierCatalogError: On a missing key or a wrong type, naming the entry.
    """
    try:
        calibration = data["calibration"]
        tail = data["tpot_p90_over_mean"]
        tiers = []
        for index, item in enumerate(data["tiers"]):
            try:
                tiers.append(_tier(item))
            except (KeyError, TypeError, ValueError) as exc:
                raise TierCatalogError(f"tiers[{index}]: bad or missing {exc}") from None
        catalog = TierCatalog(
            hours_per_month=float(data["hours_per_month"]),
            calibration=Calibration(
                bandwidth_efficiency=float(calibration["bandwidth_efficiency"]),
                compute_efficiency=float(calibration["compute_efficiency"]),
                step_overhead_s=float(calibration["step_overhead_s"]),
                source=str(calibration["source"])),
            tpot_p90_over_mean=float(tail["value"]), tpot_p90_source=str(tail["source"]),
            gpus={name: GpuSpec(bf16_dense_tflops=float(g["bf16_dense_tflops"]),
                                hbm_tb_per_s=float(g["hbm_tb_per_s"]), source=str(g["source"]))
                  for name, g in data["gpus"].items()},
            model_params_billion={name: float(m["params_billion"])
                                  for name, m in data["models"].items()},
            tiers=tuple(tiers),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as exc:
        raise TierCatalogError(f"tiers.json: bad or missing {exc}") from None
    for tier in catalog.tiers:
        for model in (tier.target, tier.speculation.draft):
            if model is not None and model not in catalog.model_params_billion:
                raise TierCatalogError(f"tier {tier.name!r}: model {model!r} is not in 'models'")
        if not 1 <= tier.instances_min <= tier.instances_max:
            raise TierCatalogError(f"tier {tier.name!r}: need 1 <= instances min <= max")
    return catalog


def load_tier_catalog() -> TierCatalog:
    """The tier catalog shipped with the package."""
    text = resources.files("app").joinpath("data/tiers.json").read_text("utf-8")
    return parse_tier_catalog(json.loads(text))
