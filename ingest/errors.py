"""Errors raised while reading billing. Each names the file, and where it can the row and column."""

from dataclasses import dataclass

from app.domain.errors import Invalid


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the input, located as precisely as the input allows."""

    file: str
    reason: str
    row: int | None = None
    """1-based data row (the header is not counted); None for a file-level problem."""
    column: str | None = None
    value: str | None = None

    def __str__(self) -> str:
        where = [self.file]
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.column is not None:
            where.append(f"column {self.column}")
        shown = f" (value {self.value!r})" if self.value is not None else ""
        return f"{', '.join(where)}: {self.reason}{shown}"


class IngestError(Invalid):
    """Input that cannot be loaded; nothing was written."""

    code = "invalid_billing_input"

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        shown = "\n".join(f"  {p}" for p in problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(f"billing input rejected, nothing was written:\n{shown}{more}")
