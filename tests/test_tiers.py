"""Every package of app/ has its place in the layers contract: a new feature must choose its
tier, and the features of one tier stay independent of each other (no cycles)."""

import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

NOT_FEATURES = {"app.cli", "app.main", "app.watch", "app.storage", "app.models", "app.db", "app.kit",
                "app.domain"}  # fmt: skip


def layers_contract() -> dict[str, Any]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, Any]] = pyproject["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers"]
    return layers


def members(layer: str) -> list[str]:
    return [m.strip() for m in layer.replace("|", ":").split(":")]


def app_packages() -> set[str]:
    return {f"app.{init.parent.name}" for init in (ROOT / "app").glob("*/__init__.py")}


def test_every_app_package_stands_in_exactly_one_layer() -> None:
    listed = [m for layer in layers_contract()["layers"] for m in members(layer)]
    packages = app_packages()
    assert {p: listed.count(p) for p in packages if listed.count(p) != 1} == {}
    assert "app.waste" in packages
    assert "app.storage" in packages


def test_the_features_stand_in_tiers_of_independent_siblings() -> None:
    features = app_packages() - NOT_FEATURES
    tiers = [layer for layer in layers_contract()["layers"] if set(members(layer)) & features]
    assert len(tiers) >= 2
    for tier in tiers:
        assert ":" not in tier, f"the features of a tier are independent (|): {tier}"
        assert set(members(tier)) <= features, f"a tier holds features only: {tier}"
