"""Lookahead has no draft model, so no draft-memory finding is raised for it: the same
measured memory and poor acceptance that flag EAGLE-3 flag nothing under Lookahead."""

from dataclasses import replace

import pytest

from app.domain.findings import FindingKind
from app.engine_health.rules.engine_memory import (
    DraftMemoryExposure,
    SpeculationEvidence,
    draft_memory,
    draft_memory_finding,
    parse_startup_log,
)
from tests.conftest import FIXTURES

LOGS = FIXTURES / "vllm_logs"


def _memory_named(method: str) -> DraftMemoryExposure:
    baseline, drafted = (
        parse_startup_log((LOGS / name).read_text(encoding="utf-8").splitlines())
        for name in ("cpu_baseline.log", "cpu_draft_l6.log")
    )
    memory = replace(draft_memory(baseline=baseline, drafted=drafted), method=method)
    poor = SpeculationEvidence(
        requests=50, num_drafts=100, draft_tokens=400, accepted_tokens=12, k=4
    )
    return DraftMemoryExposure(
        deployment="scaled", memory=memory, gpu_cost_micros=10_000_000, evidence=poor
    )


@pytest.mark.parametrize("method", ["Eagle3", "DraftTarget", "draft_model"])
def test_a_drafter_with_weights_is_judged(method: str) -> None:
    finding = draft_memory_finding(_memory_named(method), window_seconds=86_400)
    assert finding is not None
    assert finding.kind is FindingKind.draft_memory


@pytest.mark.parametrize("method", ["Lookahead", "lookahead", "NGram", "SA"])
def test_a_method_without_a_draft_model_is_never_charged_for_draft_memory(method: str) -> None:
    assert draft_memory_finding(_memory_named(method), window_seconds=86_400) is None
