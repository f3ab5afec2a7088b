"""The instance price catalog (a data file shipped with the package)."""

import json
from dataclasses import dataclass
from decimal import Decimal
from importlib import resources
from typing import Any


@dataclass(frozen=True, slots=True)
class InstancePrice:
    instance_type: str
    usd_per_hour: Decimal
    gpus: int
    gpu: str


def _load() -> dict[str, Any]:
    text = resources.files("app").joinpath("data/instance_prices.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def instance_prices() -> dict[str, InstancePrice]:
    """Every instance type in the catalog, by name."""
    return {
        name: InstancePrice(name, Decimal(item["usd_per_hour"]), int(item["gpus"]), item["gpu"])
        for name, item in _load()["instances"].items()
    }


def networking_prices() -> dict[str, Decimal]:
    return {k: Decimal(v) for k, v in _load()["networking"].items()}
