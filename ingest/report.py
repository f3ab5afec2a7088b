"""The ingest report: what was read, repaired, rejected and written, with money totals."""

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.domain.money import format_picos
from ingest.errors import Problem

NO_CURRENCY = "(none)"


@dataclass
class CostTotals:
    """Exact sums of the rows, in picos (``app.domain.money``): the provider's own totals."""

    billed_cost_picos: int = 0
    effective_cost_picos: int = 0

    def add(self, other: "CostTotals") -> None:
        self.billed_cost_picos += other.billed_cost_picos
        self.effective_cost_picos += other.effective_cost_picos

    def to_json(self) -> dict[str, str]:
        return {
            "BilledCost": format_picos(self.billed_cost_picos),
            "EffectiveCost": format_picos(self.effective_cost_picos),
        }


@dataclass
class PeriodReport:
    source: str
    billing_period_start: datetime
    billing_period_end: datetime
    rows: int
    action: str
    rows_by_provider: dict[str, int]
    totals_by_currency: dict[str, CostTotals]


@dataclass
class FileReport:
    name: str
    focus_version: str
    rows_read: int
    rows_kept: int


FIRST_ROWS = 5
"""How many row numbers a conformance warning lists."""


@dataclass
class ConformanceWarning:
    """A FOCUS rule broken in a column the ledger only carries along (the rows still load):
    how many rows of a file, and the first of them (1-based data rows)."""

    file: str
    column: str
    rule: str
    count: int
    first_rows: list[int]

    def to_json(self) -> dict[str, Any]:
        return vars(self).copy()

    def __str__(self) -> str:
        rows = ", ".join(str(r) for r in self.first_rows)
        more = ", ..." if self.count > len(self.first_rows) else ""
        return (
            f"{self.file}: {self.column} {self.rule} in {self.count} row(s) (rows {rows}{more}); "
            "loaded: the ledger does not split this column"
        )


@dataclass
class IngestReport:
    files: list[FileReport] = field(default_factory=list)
    periods: list[PeriodReport] = field(default_factory=list)
    repairs: Counter[str] = field(default_factory=Counter)
    rejects: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    conformance: list[ConformanceWarning] = field(default_factory=list)

    def add_conformance(self, found: list[ConformanceWarning]) -> None:
        """Merge the warnings of a file's chunk: counts add up, the first rows stay first."""
        for warning in found:
            same = next(
                (
                    w
                    for w in self.conformance
                    if (w.file, w.column, w.rule) == (warning.file, warning.column, warning.rule)
                ),
                None,
            )
            if same is None:
                self.conformance.append(warning)
                continue
            same.count += warning.count
            same.first_rows = sorted(same.first_rows + warning.first_rows)[:FIRST_ROWS]

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.periods)

    def totals_by_currency(self) -> dict[str, CostTotals]:
        totals: dict[str, CostTotals] = {}
        for period in self.periods:
            for currency, amount in period.totals_by_currency.items():
                totals.setdefault(currency, CostTotals()).add(amount)
        return totals

    def to_json(self) -> dict[str, Any]:
        return {
            "files": [vars(f) for f in self.files],
            "rows": self.rows,
            "periods": [
                {
                    "source": p.source,
                    "billing_period_start": _iso(p.billing_period_start),
                    "billing_period_end": _iso(p.billing_period_end),
                    "rows": p.rows,
                    "action": p.action,
                    "rows_by_provider": p.rows_by_provider,
                    "totals": {c: t.to_json() for c, t in sorted(p.totals_by_currency.items())},
                }
                for p in self.periods
            ],
            "totals": {c: t.to_json() for c, t in sorted(self.totals_by_currency().items())},
            "repairs": dict(sorted(self.repairs.items())),
            "rejects": [
                {
                    "file": r.file,
                    "row": r.row,
                    "column": r.column,
                    "value": r.value,
                    "reason": r.reason,
                }
                for r in self.rejects
            ],
            "warnings": self.warnings,
            "conformance_warnings": [w.to_json() for w in self.conformance],
        }

    def to_text(self) -> str:
        lines = [
            f"Read {len(self.files)} file(s), {sum(f.rows_read for f in self.files)} rows; "
            f"{self.rows} rows in {len(self.periods)} billing period(s)."
        ]
        for p in self.periods:
            providers = ", ".join(f"{k} {v}" for k, v in sorted(p.rows_by_provider.items()))
            lines.append(
                f"  {p.billing_period_start:%Y-%m-%d} .. {p.billing_period_end:%Y-%m-%d}"
                f"  {p.action:<9} {p.rows:>9} rows  [{providers}]  {p.source}"
            )
            for currency, t in sorted(p.totals_by_currency.items()):
                lines.append(
                    f"      {currency:<6} BilledCost {format_picos(t.billed_cost_picos)}"
                    f"  EffectiveCost {format_picos(t.effective_cost_picos)}"
                )
        lines.append("Totals:")
        for currency, t in sorted(self.totals_by_currency().items()):
            lines.append(
                f"  {currency:<6} BilledCost {format_picos(t.billed_cost_picos)}"
                f"  EffectiveCost {format_picos(t.effective_cost_picos)}"
            )
        if self.repairs:
            lines.append(
                "Repairs: " + ", ".join(f"{k} {v}" for k, v in sorted(self.repairs.items()))
            )
        if self.rejects:
            lines.append(f"Rejected {len(self.rejects)} cell(s) (--lenient skipped their rows):")
            lines += [f"  {r}" for r in self.rejects[:50]]
            if len(self.rejects) > 50:
                lines.append(f"  ... and {len(self.rejects) - 50} more (see --json)")
        lines += [f"Warning: {w}" for w in self.warnings]
        lines += [f"Conformance warning: {w}" for w in self.conformance]
        return "\n".join(lines)


def _iso(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")
