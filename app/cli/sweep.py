"""``specledger breakeven sweep``: measure speculation configs against concurrency."""

import hashlib
import math
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from app.cli._support import UserError, err, open_engine, progress_bar, user_errors
from app.cli.engine import DEFAULT_DRAFT_LAYERS
from serving.engine.paths import DEFAULT_VLLM_PYTHON

if TYPE_CHECKING:
    from app.breakeven.sweep_file import SweepRow
    from serving.engine.config import EngineConfig
    from serving.load.loadgen import LevelStats
    from serving.load.sweep import SweepTarget


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(
            f"--concurrency must be integers like 1,2,4,8,16, got {text!r}"
        ) from None
    if not levels or min(levels) < 1:
        raise typer.BadParameter("--concurrency needs levels >= 1")
    return levels


def row_of(target: "SweepTarget", stats: "LevelStats") -> "SweepRow":
    """A sweep CSV row from one measured level."""
    from app.breakeven.rules.sweep import SweepPoint
    from app.breakeven.sweep_file import SweepRow

    speculative = target.method != "none"
    point = SweepPoint(
        config=target.name,
        method=target.method,
        k=target.k if speculative else 0,
        concurrency=stats.concurrency,
        output_tokens_per_s=stats.output_tokens_per_s,
        tpot_p50_s=stats.tpot_s[0],
        acceptance_rate=stats.acceptance_rate if speculative else math.nan,
        mean_acceptance_length=stats.mean_acceptance_length if speculative else math.nan,
    )
    metrics: dict[str, float | str | None] = {
        "requests": stats.requests, "ttft_p50_s": stats.ttft_s[0], "ttft_p90_s": stats.ttft_s[1],
        "ttft_p99_s": stats.ttft_s[2], "tpot_p90_s": stats.tpot_s[1],
        "tpot_p99_s": stats.tpot_s[2], "gpu_seconds_per_1k_tokens":
        stats.gpu_seconds_per_1k_tokens, "window_s": stats.window_s, "errors": stats.errors,
        "other_servers": stats.other_servers,
    }  # fmt: skip
    return SweepRow(
        point=point, requests_per_s=stats.requests_per_s, metrics=metrics, schedule=target.schedule
    )


def _targets(
    specs: str,
    engine_configs: list[Path],
    proxies: list[str],
    *,
    base: "EngineConfig",
    proxy_key: str | None = None,
    k: int,
    draft_model: Path,
    allow_empty: bool = False,
) -> "list[SweepTarget]":
    from pydantic import ValidationError

    from serving.engine.config import load_engine_config as read_engine_config
    from serving.load.sweep import SweepTarget, engine_for_method, target_for_engine

    names = [s.strip() for s in specs.split(",") if s.strip()]
    if proxies:
        if len(proxies) != len(names):
            raise UserError(
                f"--proxy was given {len(proxies)} time(s) for {len(names)} --spec "
                "config(s); give one URL per config, in the same order"
            )
        return [
            SweepTarget(
                name="none" if n == "none" else f"{n}-k{k}",
                method=n,
                k=0 if n == "none" else k,
                url=url,
                api_key=proxy_key,
            )
            for n, url in zip(names, proxies, strict=True)
        ]
    targets = [
        target_for_engine(engine_for_method(n, base=base, k=k, draft_model=draft_model))
        for n in names
    ]
    for path in engine_configs:
        try:
            config = read_engine_config(path)
            # The deployment's name tells two scheduled engines of one method apart.
            targets.append(
                target_for_engine(config, name=None if config.name == "default" else config.name)
            )
        except (OSError, ValidationError) as exc:
            raise UserError(f"--engine-config {path}: {exc}") from None
    if not targets and not allow_empty:
        raise UserError("nothing to sweep: give --spec, --engine-config or --route-by-load")
    return targets


def _print_row(row: "SweepRow") -> None:
    p, m = row.point, row.metrics
    acceptance = (
        ""
        if math.isnan(p.mean_acceptance_length)
        else f"  accept {p.acceptance_rate:.2f} AL {p.mean_acceptance_length:.2f}"
    )
    contended = "  (another vLLM server ran: suspect)" if m.get("other_servers") else ""
    err.print(
        f"{p.config:>16} @ {p.concurrency:>3}: {p.output_tokens_per_s:7.1f} tok/s  "
        f"TPOT p50 {1000 * p.tpot_p50_s:6.1f} ms  TTFT p50 "
        f"{1000 * float(m['ttft_p50_s'] or math.nan):7.1f} ms{acceptance}{contended}",
        highlight=False,
        soft_wrap=True,
    )


def sweep(
    out: Annotated[Path, typer.Option("--out", help="Sweep CSV to write.")],
    concurrency: Annotated[
        str, typer.Option(help="Concurrency levels, comma-separated.")
    ] = "1,2,4,8,16",
    spec: Annotated[
        str,
        typer.Option(
            help="Speculation configs, comma-separated: none, ngram, "
            "draft (the prepared 6-layer draft model)."
        ),
    ] = "none,ngram",
    requests_per_level: Annotated[
        int, typer.Option(min=1, help="Measured requests per level.")
    ] = 16,
    warmup: Annotated[
        int | None,
        typer.Option(
            min=0, help="Warm-up requests per level, excluded (default: one per session)."
        ),
    ] = None,
    repeats: Annotated[
        int,
        typer.Option(
            min=1,
            help="Run the levels this many times per "
            "config on one engine start (repeated rows; the fit "
            "compares medians).",
        ),
    ] = 1,
    k: Annotated[int, typer.Option(min=1, help="Drafted tokens per step.")] = 4,
    engine_config: Annotated[
        list[Path] | None,
        typer.Option(
            help="Also sweep the engine in this config file (e.g. one with an applied schedule; "
            "repeatable)."
        ),
    ] = None,
    proxy: Annotated[
        list[str] | None,
        typer.Option(
            help="Drive this running proxy or server instead of starting engines (one per --spec "
            "config, same order)."
        ),
    ] = None,
    proxy_key: Annotated[
        str | None,
        typer.Option(
            envvar="SPECLEDGER_PROXY_KEY",
            help="The proxy key (slk_...) a running --proxy expects; the sweep's traffic is "
            "billed to its team. Also read from SPECLEDGER_PROXY_KEY.",
        ),
    ] = None,
    route_by_load: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Also sweep routing by load: a plain and an ngram engine behind one proxy "
            "that sends new requests to the ngram engine while at most N are in flight, else to "
            "the plain one (the schedule done by the proxy instead of vLLM's k=0 path).",
        ),
    ] = None,
    model: Annotated[
        Path | None, typer.Option(help="Target model folder (default: the prepared SmolLM2).")
    ] = None,
    draft_model: Annotated[
        Path | None, typer.Option(help="Draft model folder for 'draft'.")
    ] = None,
    dtype: Annotated[
        str,
        typer.Option(
            help="Model dtype for the engines: bfloat16, float16, "
            "float32 or auto. On CPUs without AVX-512 BF16 (no "
            "oneDNN bf16 kernels) float32 is much faster."
        ),
    ] = "bfloat16",
    gpus: Annotated[
        int,
        typer.Option(
            min=1, help="Accelerators per replica, for GPU-seconds (a CPU replica counts as 1)."
        ),
    ] = 1,
    vllm_python: Annotated[
        Path, typer.Option(help="Python of the vLLM venv.")
    ] = DEFAULT_VLLM_PYTHON,
    prompts: Annotated[
        Path | None,
        typer.Option(
            help="Prompt set (JSONL); default: the bundled copy-heavy and open-ended set."
        ),
    ] = None,
    deployment: Annotated[str | None, typer.Option(help="Deployment the sweep measures.")] = None,
    store: Annotated[
        bool, typer.Option(help="Store the sweep (and its fit) in the database.")
    ] = True,
    wait_for_other_engines: Annotated[
        float,
        typer.Option(
            min=0,
            help="Seconds to wait for other vLLM servers on this machine to stop before "
            "each engine start (default: refuse at once).",
        ),
    ] = 0.0,
    engines_dir: Annotated[
        Path | None,
        typer.Option(
            help="Folder of engine state files (default: engines/ in SPECLEDGER_DATA_DIR)."
        ),
    ] = None,
) -> None:
    """Measure throughput, TTFT/TPOT percentiles and acceptance against concurrency.

    For each config an engine starts (one at a time) with the metering proxy in front;
    closed-loop sessions then send streamed chat completions from the prompt set at each
    level, warm-up excluded. Writes one CSV row per (config, concurrency) after each config,
    stores the sweep in the database and fits it when it has enough levels.
    """
    from app.breakeven.sweep_file import write_sweep_file
    from app.settings import get_settings
    from serving.engine import launcher, model_prep
    from serving.engine.config import EngineConfig
    from serving.load.loadgen import LoadError, load_prompts
    from serving.load.sweep import SweepError, engine_for_method, routed_target, sweep_target

    settings = get_settings()
    levels = _levels(concurrency)
    if route_by_load is not None and proxy:
        raise typer.BadParameter(
            "--route-by-load starts its own engines; it cannot be combined with --proxy"
        )
    if store and deployment is not None:
        _check_deployment(deployment)
    cache = settings.models_dir
    if dtype not in ("bfloat16", "float16", "float32", "auto"):
        raise typer.BadParameter("--dtype must be bfloat16, float16, float32 or auto")
    base = EngineConfig.model_validate(
        {
            "name": "sweep",
            "model": str((model or model_prep.target_dir(cache)).resolve()),
            "python": str(vllm_python.absolute()),
            "dtype": dtype,
        }
    )
    draft = draft_model or model_prep.draft_dir(cache, DEFAULT_DRAFT_LAYERS)
    started = datetime.now(UTC)
    work_dir = settings.data_dir / "sweeps" / started.strftime("%Y%m%dT%H%M%SZ")
    rows: list[SweepRow] = []
    with user_errors():
        try:
            targets = _targets(
                spec,
                engine_config or [],
                proxy or [],
                base=base,
                k=k,
                draft_model=draft,
                allow_empty=route_by_load is not None,
                proxy_key=proxy_key,
            )
            if route_by_load is not None:
                targets.append(
                    routed_target(
                        engine_for_method("ngram", base=base, k=k, draft_model=None),
                        engine_for_method("none", base=base, k=k, draft_model=None),
                        speculate_up_to=route_by_load,
                    )
                )
            prompt_set = load_prompts(prompts)
            with progress_bar(sys.stderr.isatty()) as hook:
                for target in targets:
                    stats = sweep_target(
                        target,
                        levels=levels,
                        requests_per_level=requests_per_level,
                        prompts=prompt_set,
                        work_dir=work_dir,
                        engines_dir=engines_dir or settings.engines_dir,
                        warmup=warmup,
                        repeats=repeats,
                        gpus=gpus,
                        wait_s=wait_for_other_engines,
                        progress=hook,
                    )
                    for level in stats:
                        rows.append(row_of(target, level))
                        _print_row(rows[-1])
                    write_sweep_file(out, rows)
        except (SweepError, LoadError, launcher.EngineError, ValueError, OSError) as exc:
            if rows:
                write_sweep_file(out, rows)
                err.print(f"partial sweep ({len(rows)} rows) kept in {out}")
            raise UserError(str(exc)) from None
    err.print(f"wrote {len(rows)} rows to {out}; logs in {work_dir}")
    if store:
        _store(
            out,
            rows,
            levels=levels,
            specs=spec,
            dtype=dtype,
            deployment=deployment,
            requests_per_level=requests_per_level,
            repeats=repeats,
            work_dir=work_dir,
        )


def _check_deployment(deployment: str) -> None:
    """Refuse an unknown deployment before the sweep runs, not after it."""
    from app.db import read_session
    from app.deployments.service import get_deployment
    from app.settings import get_settings

    with user_errors(), open_engine(get_settings()) as engine, read_session(engine) as session:
        get_deployment(session, deployment)


def _store(
    out: Path,
    rows: "list[SweepRow]",
    *,
    levels: list[int],
    specs: str,
    dtype: str,
    deployment: str | None,
    requests_per_level: int,
    repeats: int,
    work_dir: Path,
) -> None:
    from sqlalchemy.orm import Session

    from app.breakeven import service
    from app.settings import get_settings

    settings = {
        "source": str(out),
        "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
        "levels": levels,
        "spec": specs,
        "dtype": dtype,
        "requests_per_level": requests_per_level,
        "repeats": repeats,
        "logs": str(work_dir),
        "measured_by": "specledger breakeven sweep",
    }
    with (
        user_errors(),
        open_engine(get_settings()) as engine,
        Session(engine) as session,
        session.begin(),
    ):
        sweep_id, outcome, problem = service.store_measured_sweep(
            session, name=out.name, rows=rows, settings=settings, deployment=deployment
        )
    if outcome is None:
        typer.echo(f"stored as sweep {sweep_id}; not fitted: {problem}")
        return
    primary = outcome.fit.primary
    if primary.breakeven_concurrency is None:
        answer = (
            f"no crossing in {primary.concurrency_low:g}-{primary.concurrency_high:g} "
            f"(speedup {primary.speedup_at_low:.2f}x to {primary.speedup_at_high:.2f}x)"
        )
    else:
        ci = primary.breakeven_ci
        answer = f"breakeven at {primary.breakeven_concurrency:.2f}" + (
            f" (95% CI {ci[0]:.2f}-{ci[1]:.2f})" if ci else ""
        )
        if not primary.pinned_down and primary.next_levels:
            wanted = ",".join(str(level) for level in primary.next_levels)
            answer += f"; not pinned down: measure --concurrency {wanted} next"
        if primary.repeats_for_target is not None:
            answer += (
                f"; --repeats {primary.repeats_for_target} would bring the interval within "
                "10% of the estimate"
            )
    typer.echo(
        f"stored as sweep {sweep_id}; {primary.config}: {answer}; "
        f"`specledger breakeven fit {out}` prints the full report"
    )
