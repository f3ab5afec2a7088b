"""The waste report's finding sources: one registered list, :data:`SOURCES`.

A new kind of finding is one class in its feature (implementing
:class:`app.domain.findings.FindingSource` over :class:`app.storage.entry_reader.LedgerReaders`)
plus one line here. The report's own three (low acceptance, above breakeven, idle GPUs) live
in this module; the others in their features.
"""

from app.breakeven.service import breakeven_curves
from app.domain.findings import Finding, FindingInputs, FindingKind, FindingSource
from app.engine_health.draft_memory import DraftMemorySource
from app.speculation.positions import UnpaidPositionsSource
from app.storage.entry_reader import LedgerReaders
from app.waste.exposures import above_breakeven, idle_exposures
from app.waste.rules import above_breakeven_finding, idle_findings, low_acceptance_findings


class LowAcceptanceSource:
    name = "low acceptance"
    kinds = frozenset({FindingKind.low_acceptance})

    def find(self, inputs: FindingInputs, readers: LedgerReaders) -> list[Finding]:
        findings: list[Finding] = []
        for scope_groups in inputs.acceptance.values():
            findings += low_acceptance_findings(
                list(scope_groups.values()),
                inputs.thresholds,
                window_seconds=inputs.observed_seconds,
            )
        return findings


class AboveBreakevenSource:
    name = "speculation above breakeven"
    kinds = frozenset({FindingKind.above_breakeven})

    def find(self, inputs: FindingInputs, readers: LedgerReaders) -> list[Finding]:
        curves = breakeven_curves(readers.session)
        above = above_breakeven(readers.parts, curves, inputs.window, inputs.team)
        findings: list[Finding] = []
        for deployment, exposure in above.items():
            finding = above_breakeven_finding(
                curves[deployment], exposure, window_seconds=inputs.observed_seconds
            )
            if finding is not None:
                findings.append(finding)
        return findings


class IdleGpuSource:
    """Idle GPU time belongs to no team: admin views only."""

    name = "idle GPUs"
    kinds = frozenset({FindingKind.idle_gpu})

    def find(self, inputs: FindingInputs, readers: LedgerReaders) -> list[Finding]:
        if inputs.team is not None:
            return []
        exposures = idle_exposures(readers.session, dict(inputs.idle))
        return idle_findings(exposures, inputs.thresholds, window_seconds=inputs.observed_seconds)


SOURCES: tuple[FindingSource[LedgerReaders], ...] = (
    LowAcceptanceSource(),
    UnpaidPositionsSource(),
    AboveBreakevenSource(),
    IdleGpuSource(),
    DraftMemorySource(),
)
"""Every source of the waste report (``find_waste``)."""

OUTSIDE_THE_REPORT: dict[FindingKind, str] = {
    FindingKind.acceptance_drift: "app.probe.service.drift_finding (specledger probe drift)",
}
"""Kinds produced elsewhere and not in the waste report: adding them to it would change what
``GET /v1/waste`` returns."""
