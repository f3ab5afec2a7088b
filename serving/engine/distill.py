"""``models distill-draft`` and ``models medusa-heads``: teach a drafter what the target
will write, on the CPU, in minutes.

A draft made of the target's first 6 of 30 layers agrees with the target on a few tokens
in a hundred (about 1 % of drafted tokens accepted), so speculating with it is pure
overhead. Both trainings learn from the target as it is served:

1. :func:`record_teacher` serves the target with vLLM (the project's launcher, no
   speculation, its default bfloat16) and records its continuations of a bundled prompt
   set (``distill_prompts.jsonl``: diverse training prompts and a held-out split), each
   prompt as raw text and in the chat template, greedy plus a few sampled ones for more
   contexts, with the target's top next-token log-probabilities at every position.
2. :func:`distill_draft` runs ``_distill_draft_script.py`` and :func:`train_medusa_heads`
   runs ``_medusa_heads_script.py`` with the vLLM venv's interpreter (torch and
   transformers live only there). The first fine-tunes the draft towards the target's
   distribution (a KL divergence) into a new folder, keeping the undistilled draft; the
   second trains Medusa heads on the target's last hidden state into a checkpoint vLLM
   loads with ``method: "medusa"``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from app.domain.errors import SpecLedgerError
from serving.engine import launcher
from serving.engine.config import EngineConfig, NoSpeculation
from serving.engine.model_prep import TARGET_NAME, is_prepared

PROMPTS_FILE = Path(__file__).with_name("distill_prompts.jsonl")
"""The bundled prompt set: one ``{"split": "train"|"heldout", "prompt": ...}`` per line."""
_SCRIPT = Path(__file__).with_name("_distill_draft_script.py")
_MEDUSA_SCRIPT = Path(__file__).with_name("_medusa_heads_script.py")

TEACHER_TOP_K = 20
"""Log-probabilities kept per position (vLLM's default ``max_logprobs``)."""

Split = Literal["train", "heldout"]


class DistillError(SpecLedgerError):
    """Distillation failed; the message carries the tool's output."""

    code = "distill_failed"


@dataclass(frozen=True, slots=True)
class TeacherSettings:
    """What the served target writes for the student to learn from."""

    new_tokens: int = 64
    """Length of its continuations at most."""
    samples: int = 2
    """Sampled continuations per training prompt and form, besides the greedy one."""
    temperature: float = 1.0
    """Their sampling temperature."""
    max_prompts: int | None = None
    """Use only the first N prompts of each split (short runs in tests)."""
    concurrency: int = 8
    """Requests in flight."""
    seed: int = 0


@dataclass(frozen=True, slots=True)
class DistillSettings:
    """How long and how hard to train a draft. The defaults are the full distillation."""

    steps: int = 200
    """Optimizer steps at most (batches of ``batch_size`` continuations)."""
    max_seconds: float = 900.0
    """Training stops here even if ``steps`` are not done."""
    batch_size: int = 8
    lr: float = 1e-3
    threads: int | None = None
    """torch threads of the training script; default: one per core."""
    seed: int = 0
    teacher: TeacherSettings = field(default_factory=TeacherSettings)


@dataclass(frozen=True, slots=True)
class MedusaSettings:
    """How many Medusa heads, and how long to train them."""

    heads: int = 3
    steps: int = 300
    """Optimizer steps at most (``positions`` hidden states each)."""
    max_seconds: float = 900.0
    positions: int = 256
    lr: float = 1e-3
    threads: int | None = None
    seed: int = 0
    teacher: TeacherSettings = field(default_factory=lambda: TeacherSettings(samples=0))
    """Greedy continuations only: a head learns what greedy serving will write next."""


@dataclass(frozen=True, slots=True)
class TrainResult:
    """What a distillation or a Medusa training produced."""

    folder: Path
    steps: int
    train_seconds: float
    seconds: float
    """Everything: serving the target, its continuations and the training."""
    agreement_before: float | list[float] | None
    """Held-out continuation positions where the draft's (or each head's) argmax is the
    target's greedy token."""
    agreement_after: float | list[float] | None


def distilled_dir(cache_dir: Path, num_layers: int) -> Path:
    """Folder of the distilled ``num_layers`` draft (next to the undistilled one)."""
    return cache_dir / f"{TARGET_NAME}-draft-L{num_layers}-distilled"


def load_prompts(split: Split, path: Path = PROMPTS_FILE) -> list[str]:
    """The prompts of one split of a prompt set, in file order."""
    prompts = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            if record["split"] == split:
                prompts.append(str(record["prompt"]))
    return prompts


def prompt_set_digest(path: Path = PROMPTS_FILE) -> str:
    """SHA-256 of a prompt set: its version, recorded with every distilled draft."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def medusa_dir(cache_dir: Path, heads: int) -> Path:
    """Folder of trained Medusa heads for the prepared target."""
    return cache_dir / f"{TARGET_NAME}-medusa-{heads}"


def distill_draft(
    *,
    target: Path,
    draft: Path,
    out: Path,
    vllm_python: Path,
    settings: DistillSettings | None = None,
    data: Path | None = None,
    prompts_file: Path = PROMPTS_FILE,
    console: Console | None = None,
    start_timeout_s: float = launcher.DEFAULT_START_TIMEOUT_S,
) -> TrainResult:
    """Serve ``target``, record its continuations and fine-tune ``draft`` on them into ``out``.

    Args:
        target: Prepared target model folder.
        draft: Draft to start from (e.g. the truncated one of ``models prepare``).
        out: Folder of the distilled draft; replaced if it exists.
        vllm_python: Interpreter of the vLLM venv.
        settings: Training budget; default: the full distillation.
        data: The target's continuations (:func:`record_teacher`); default: recorded now
            with ``settings.teacher``.
        prompts_file: Prompt set with ``train`` and ``heldout`` splits.
        console: Where progress is shown.
        start_timeout_s: How long the target engine may take to become healthy.

    Returns:
        The result folder, training time and held-out agreement before and after.

    Raises:
        DistillError: If a model or the venv is missing or the training script fails.
        launcher.EngineStartError: If the target engine does not start.
    """
    settings = settings or DistillSettings()
    _check_inputs(vllm_python, target, draft)
    argv = [
        str(vllm_python), str(_SCRIPT),
        "--draft", str(draft),
        "--out", str(out),
        "--steps", str(settings.steps),
        "--max-seconds", str(settings.max_seconds),
        "--batch-size", str(settings.batch_size),
        "--lr", str(settings.lr),
        "--seed", str(settings.seed),
    ]  # fmt: skip
    if settings.threads is not None:
        argv += ["--threads", str(settings.threads)]
    return _teach(
        target=target,
        out=out,
        argv=argv,
        steps=settings.steps,
        teacher=settings.teacher,
        data=data,
        what="Distilling",
        vllm_python=vllm_python,
        prompts_file=prompts_file,
        console=console or Console(stderr=True),
        start_timeout_s=start_timeout_s,
    )


def train_medusa_heads(
    *,
    target: Path,
    out: Path,
    vllm_python: Path,
    settings: MedusaSettings | None = None,
    data: Path | None = None,
    prompts_file: Path = PROMPTS_FILE,
    console: Console | None = None,
    start_timeout_s: float = launcher.DEFAULT_START_TIMEOUT_S,
) -> TrainResult:
    """Serve ``target``, record its continuations and train Medusa heads on them into ``out``.

    The result is a checkpoint vLLM loads with ``{"method": "medusa", "model": out}``
    (:class:`serving.engine.config.MedusaSpeculation`).

    Raises:
        DistillError: If the target or the venv is missing or the training script fails.
        launcher.EngineStartError: If the target engine does not start.
    """
    settings = settings or MedusaSettings()
    _check_inputs(vllm_python, target)
    argv = [
        str(vllm_python), str(_MEDUSA_SCRIPT),
        "--target", str(target),
        "--out", str(out),
        "--heads", str(settings.heads),
        "--steps", str(settings.steps),
        "--max-seconds", str(settings.max_seconds),
        "--positions", str(settings.positions),
        "--lr", str(settings.lr),
        "--seed", str(settings.seed),
    ]  # fmt: skip
    if settings.threads is not None:
        argv += ["--threads", str(settings.threads)]
    if settings.teacher.samples:
        argv.append("--all-samples")
    return _teach(
        target=target,
        out=out,
        argv=argv,
        steps=settings.steps,
        teacher=settings.teacher,
        data=data,
        what="Training Medusa heads",
        vllm_python=vllm_python,
        prompts_file=prompts_file,
        console=console or Console(stderr=True),
        start_timeout_s=start_timeout_s,
    )


def _check_inputs(vllm_python: Path, *models: Path) -> None:
    for path in models:
        if not is_prepared(path):
            raise DistillError(f"{path} is not a prepared model; run `models prepare` first")
    if not vllm_python.exists():
        raise DistillError(f"{vllm_python} not found; create the vLLM venv first")


def _teach(
    *,
    target: Path,
    out: Path,
    argv: list[str],
    steps: int,
    teacher: TeacherSettings,
    data: Path | None,
    what: str,
    vllm_python: Path,
    prompts_file: Path,
    console: Console,
    start_timeout_s: float,
) -> TrainResult:
    """Record the target's continuations (unless ``data`` holds them already), then run a
    training script (``argv``, which gets ``--data`` and ``--metadata``) on them."""
    started = time.monotonic()
    prompts = _prompts(prompts_file, teacher)
    metadata = {
        "target": str(target),
        "prompt_set": prompts_file.name,
        "prompt_set_sha256": prompt_set_digest(prompts_file),
        "train_prompts": len(prompts["train"]),
        "heldout_prompts": len(prompts["heldout"]),
        "new_tokens": teacher.new_tokens,
        "samples": teacher.samples,
        "temperature": teacher.temperature,
    }
    with tempfile.TemporaryDirectory(prefix="specledger-distill-") as tmp:
        if data is None:
            data = record_teacher(
                target=target,
                data=Path(tmp) / "teacher.jsonl",
                vllm_python=vllm_python,
                settings=teacher,
                prompts_file=prompts_file,
                console=console,
                start_timeout_s=start_timeout_s,
            )
        done = _run_script(
            [*argv, "--data", str(data), "--metadata", json.dumps(metadata)], steps, what, console
        )
    return TrainResult(
        folder=out,
        steps=int(done["steps"]),
        train_seconds=float(done["train_seconds"]),
        seconds=time.monotonic() - started,
        agreement_before=_agreement(done.get("heldout_top1_agreement_before")),
        agreement_after=_agreement(done.get("heldout_top1_agreement_after")),
    )


def collect_continuations(
    base_url: str,
    model_name: str,
    prompts: Sequence[str],
    *,
    new_tokens: int,
    top_k: int = TEACHER_TOP_K,
    samples: int = 0,
    temperature: float = 1.0,
    seed: int = 0,
    concurrency: int = 8,
    on_done: Callable[[], None] | None = None,
    client: httpx.Client | None = None,
) -> list[dict[str, Any]]:
    """The served model's continuations of each prompt, raw and as a chat turn: the greedy
    one and ``samples`` sampled at ``temperature`` (more contexts to learn from).

    Prompts are tokenized by the server (``/tokenize``, with the chat template for the
    chat form) and sent as token ids, so the data holds exactly what the model saw.

    Args:
        base_url: The server's root URL, without ``/v1``.
        model_name: The name it serves the model under.
        prompts: Texts to continue.
        new_tokens: Continuation length at most.
        top_k: Log-probabilities kept per position (of the model's own distribution,
            vLLM's ``raw_logprobs``, whatever the sampling temperature).
        samples: Sampled continuations per prompt form, besides the greedy one.
        temperature: Their sampling temperature.
        seed: Their sampling seed.
        concurrency: Requests in flight.
        on_done: Called after each finished request (progress).
        client: HTTP client to use; default: a new one.

    Returns:
        Per prompt, the raw form's records then the chat form's, greedy first: each with
        ``prompt_ids``, ``greedy``, the continuation's ``tokens`` and, per position,
        ``top`` as ``[token_id, logprob]`` pairs.
    """
    requests = [
        body
        for prompt in prompts
        for body in (
            {"prompt": prompt},
            {"messages": [{"role": "user", "content": prompt}], "add_generation_prompt": True},
        )
    ]

    def one(client: httpx.Client, tokenize: dict[str, Any]) -> list[dict[str, Any]]:
        response = client.post(f"{base_url}/tokenize", json={"model": model_name, **tokenize})
        response.raise_for_status()
        prompt_ids = [int(t) for t in response.json()["tokens"]]
        request = {
            "model": model_name,
            "prompt": prompt_ids,
            "max_tokens": new_tokens,
            "logprobs": top_k,
            "return_tokens_as_token_ids": True,
        }
        variants: list[dict[str, Any]] = [{"temperature": 0}]
        if samples:
            variants.append({"temperature": temperature, "n": samples, "seed": seed})
        records = []
        for variant in variants:
            response = client.post(f"{base_url}/v1/completions", json={**request, **variant})
            response.raise_for_status()
            for choice in response.json()["choices"]:
                logprobs = choice["logprobs"]
                records.append(
                    {
                        "prompt_ids": prompt_ids,
                        "greedy": variant["temperature"] == 0,
                        "tokens": [_token_id(t) for t in logprobs["tokens"]],
                        "top": [
                            [[_token_id(t), lp] for t, lp in (top or {}).items()]
                            for top in logprobs["top_logprobs"]
                        ],
                    }
                )
        if on_done is not None:
            on_done()
        return records

    with contextlib.ExitStack() as stack:
        if client is None:
            client = stack.enter_context(httpx.Client(timeout=600))
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=concurrency))
        return [
            record
            for records in pool.map(lambda body: one(client, body), requests)
            for record in records
        ]


def record_teacher(
    *,
    target: Path,
    data: Path,
    vllm_python: Path,
    settings: TeacherSettings | None = None,
    prompts_file: Path = PROMPTS_FILE,
    console: Console | None = None,
    start_timeout_s: float = launcher.DEFAULT_START_TIMEOUT_S,
) -> Path:
    """Serve ``target`` with vLLM and write its continuations of the prompt set to ``data``
    (JSONL, one record per continuation with its ``split``), the input of both trainings.

    Returns:
        ``data``.

    Raises:
        DistillError: If the target or the venv is missing.
        launcher.EngineStartError: If the target engine does not start.
    """
    settings = settings or TeacherSettings()
    console = console or Console(stderr=True)
    _check_inputs(vllm_python, target)
    prompts = _prompts(prompts_file, settings)
    config = EngineConfig(
        name="distill-teacher",
        model=str(target),
        speculation=NoSpeculation(),
        port=_free_port(),
        python=str(vllm_python),
    )
    data.parent.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="specledger-teacher-") as work,
        _serving(config, Path(work), console, start_timeout_s),
        _progress(console) as progress,
    ):
        task = progress.add_task("Target continuations", total=2 * sum(map(len, prompts.values())))
        with data.open("w", encoding="utf-8") as out:
            for split, texts in prompts.items():
                records = collect_continuations(
                    config.base_url,
                    config.model_name,
                    texts,
                    new_tokens=settings.new_tokens,
                    # Held-out prompts are scored on what greedy serving writes only.
                    samples=settings.samples if split == "train" else 0,
                    temperature=settings.temperature,
                    seed=settings.seed,
                    concurrency=settings.concurrency,
                    on_done=lambda: progress.advance(task),
                )
                for record in records:
                    out.write(json.dumps({"split": split, **record}) + "\n")
    return data


def _prompts(prompts_file: Path, settings: TeacherSettings) -> dict[Split, list[str]]:
    splits: tuple[Split, ...] = ("train", "heldout")
    return {split: load_prompts(split, prompts_file)[: settings.max_prompts] for split in splits}


@contextmanager
def _serving(
    config: EngineConfig, work: Path, console: Console, start_timeout_s: float
) -> Iterator[None]:
    begun = time.monotonic()
    with console.status(f"Starting vLLM with the target {Path(config.model).name}"):
        handle = launcher.start(
            config, work / "teacher.log", timeout_s=start_timeout_s, state_dir=work
        )
    console.print(f"[green]✓[/] Target engine healthy ({time.monotonic() - begun:.0f} s)")
    try:
        yield
    finally:
        launcher.stop(handle, state_dir=work)


def _run_script(argv: list[str], steps: int, what: str, console: Console) -> dict[str, Any]:
    """Run a training script, rendering its JSON progress lines; its ``done`` event."""
    output: deque[str] = deque(maxlen=40)
    done: dict[str, Any] | None = None
    begun = time.monotonic()
    with (
        _progress(console) as progress,
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc,
    ):
        task = progress.add_task("Loading torch", total=steps)
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line.rstrip())
            event = _parse_event(line)
            if event is None:
                continue
            kind = event.get("event")
            if kind == "step":
                progress.update(task, description=str(event.get("message", "")))
            elif kind == "progress" and event.get("phase") == "train":
                progress.update(
                    task,
                    completed=int(event["done"]),
                    description=f"{what}, loss {float(event['loss']):.3f}",
                )
            elif kind == "metric":
                progress.console.print(f"  {event['name']}: {_percent(event.get('value'))}")
            elif kind == "done":
                done = event
        returncode = proc.wait()
    if returncode != 0 or done is None:
        tail = "\n".join(output)
        raise DistillError(f"{what} failed (exit {returncode}):\n{tail}")
    console.print(
        f"[green]✓[/] {what} took {time.monotonic() - begun:.0f} s ({done['steps']} steps); "
        f"held-out top-1 agreement {_percent(done.get('heldout_top1_agreement_before'))} → "
        f"{_percent(done.get('heldout_top1_agreement_after'))}"
    )
    return done


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def _parse_event(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) else None


def _token_id(token: str) -> int:
    """``token_id:123`` (vLLM's ``return_tokens_as_token_ids``) as 123."""
    return int(token.rpartition(":")[2])


def _percent(value: object) -> str:
    if isinstance(value, list):
        return ", ".join(_percent(v) for v in value)
    return "n/a" if not isinstance(value, int | float) else f"{100 * value:.1f} %"


def _agreement(value: object) -> float | list[float] | None:
    if isinstance(value, list):
        return [float(v) for v in value]
    return float(value) if isinstance(value, int | float) else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
