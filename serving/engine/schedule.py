"""Write a fitted speculation schedule into a deployment's engine config (``breakeven apply``).

The fit and its schedule come from the breakeven feature; this adapter knows the engine
config file and vLLM's ``num_speculative_tokens_per_batch_size``.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.breakeven.rules.model import ScheduleBand
from app.breakeven.service import BreakevenError, fitted_schedule
from app.deployments.service import get_deployment
from serving.engine.config import (
    BatchSizeBand,
    EngineConfig,
    NgramSpeculation,
    NoSpeculation,
    OtherSpeculation,
    engine_config_path,
    load_engine_config,
    save_engine_config,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class AppliedSchedule:
    """What ``breakeven apply`` wrote."""

    deployment: str
    engine: EngineConfig
    engine_path: Path
    source: str
    bands: tuple[ScheduleBand, ...]
    note: str | None = None


def _load_engine(name: str, path: Path, stored: dict[str, Any] | None) -> EngineConfig:
    try:
        if path.is_file():
            return load_engine_config(path)
        if stored:
            return EngineConfig.model_validate(stored)
    except ValidationError as exc:
        raise BreakevenError(f"engine config of {name!r} is not valid: {exc}") from None
    raise BreakevenError(
        f"deployment {name!r} has no engine config ({path} does not exist and the registry "
        f"holds none); start it once with `specledger engine start --name {name} --spec ngram`, "
        "which saves the file, then apply again"
    )


def _with_schedule(
    engine: EngineConfig, bands: Sequence[ScheduleBand], *, method: str, k: int
) -> tuple[EngineConfig, str | None]:
    fields = engine.model_dump()
    if all(band.k == 0 for band in bands):
        fields.update(speculation=NoSpeculation().model_dump(), batch_size_schedule=None)
        return EngineConfig.model_validate(fields), (
            "the schedule never speculates, so the engine is set to plain decoding: a drafter "
            "kept at k=0 still costs throughput (DESIGN.md, measured ~11-13% on CPU)"
        )
    speculation = engine.speculation
    note = None
    if isinstance(speculation, NoSpeculation):
        if method != "ngram":
            raise BreakevenError(
                f"the engine of {engine.name!r} does not speculate and the fit is for "
                f"{method!r}; set the drafter in the engine config first"
            )
        speculation = NgramSpeculation(k=k)
        note = f"speculation was off; set to ngram k={k} as the fit measured"
    engine_method = (
        speculation.vllm_method if isinstance(speculation, OtherSpeculation) else speculation.method
    )
    if engine_method != method:
        raise BreakevenError(
            f"the fit is for {method!r} but the engine of {engine.name!r} speculates with "
            f"{engine_method!r}; fit a sweep of that method"
        )
    fields.update(
        speculation=speculation.model_dump(),
        batch_size_schedule=[
            BatchSizeBand(start=b.start, end=b.end, k=b.k).model_dump() for b in bands
        ],
    )
    try:
        return EngineConfig.model_validate(fields), note
    except ValidationError as exc:
        raise BreakevenError(f"the schedule does not fit the engine config: {exc}") from None


def apply_schedule(
    session: Session,
    *,
    deployment: str,
    sweep_id: int | None = None,
    fit_path: Path | None = None,
    engines_dir: Path,
    min_k: int = 0,
) -> AppliedSchedule:
    """Write a fitted speculation schedule into a deployment's engine config.

    Both copies are updated: the registry's ``Deployment.engine_config`` and the engine JSON
    file that ``specledger engine start --config`` reads, so the next start uses vLLM's
    dynamic speculation (``num_speculative_tokens_per_batch_size``).

    Args:
        session: Database session (the registry).
        deployment: Registered deployment name; also names the engine file.
        sweep_id: Take the fit stored with this sweep.
        fit_path: Take the fit from a ``breakeven fit --json`` file instead.
        engines_dir: Folder of engine configs.
        min_k: Raise bands below this k to it (adjacent equal bands merge), unless the
            schedule never speculates (then the engine is set to plain decoding). 1 keeps
            the drafter drafting where the fit says k=0: vLLM's k=0 path with a drafter
            loaded ran 16% slower than plain decoding at concurrency 64 on the example CPU
            sweep, and k=1 there reached 0.947 of it.

    Returns:
        The new engine config and where it was written.

    Raises:
        UnknownDeployment: If no deployment has that name.
        BreakevenError: No engine config, no fit, or a fit for another speculation method
            than the engine's.
    """
    record = get_deployment(session, deployment)
    schedule = fitted_schedule(
        session, sweep_id=sweep_id, fit_path=fit_path, min_k=min_k, deployment=deployment
    )
    path = engine_config_path(deployment, engines_dir)
    engine = _load_engine(deployment, path, record.engine_config)
    updated, note = _with_schedule(engine, schedule.bands, method=schedule.method, k=schedule.k)
    save_engine_config(updated, path)
    record.engine_config = updated.model_dump(mode="json")
    session.flush()
    return AppliedSchedule(
        deployment=deployment,
        engine=updated,
        engine_path=path,
        source=schedule.source,
        bands=schedule.bands,
        note=note,
    )
