"""``models distill-draft``: teach the truncated draft to guess what the target will write.

A draft made of the target's first layers agrees with the target on only a few tokens in a
hundred (about 1-3 % of drafted tokens accepted), which makes speculation pure overhead.
Distillation fixes most of that in minutes on a CPU:

1. The target is served by vLLM (the project's launcher, no speculation, its default
   bfloat16) and writes greedy continuations of a bundled prompt set
   (``distill_prompts.jsonl``: diverse training prompts and a held-out split), each prompt
   both as raw text and in the chat template, with its top next-token log-probabilities at
   every position. This is the distribution a served draft has to match.
2. ``_distill_draft_script.py``, run with the vLLM venv's interpreter (torch and
   transformers live only there), fine-tunes the draft on it and saves the result next to
   the undistilled draft, which stays as it was.
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
from dataclasses import dataclass
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

TEACHER_TOP_K = 20
"""Log-probabilities kept per position (vLLM's default ``max_logprobs``)."""

Split = Literal["train", "heldout"]


class DistillError(SpecLedgerError):
    """Distillation failed; the message carries the tool's output."""

    code = "distill_failed"


@dataclass(frozen=True, slots=True)
class DistillSettings:
    """How long and how hard to train. The defaults are the full distillation."""

    steps: int = 200
    """Optimizer steps at most (batches of ``batch_size`` continuations)."""
    max_seconds: float = 900.0
    """Training stops here even if ``steps`` are not done."""
    new_tokens: int = 64
    """Length of the target's continuations."""
    batch_size: int = 8
    lr: float = 3e-4
    max_prompts: int | None = None
    """Use only the first N prompts of each split (short runs in tests)."""
    concurrency: int = 8
    """Requests in flight while the target writes its continuations."""
    threads: int | None = None
    """torch threads of the training script; default: one per core."""
    seed: int = 0


@dataclass(frozen=True, slots=True)
class DistillResult:
    """What a distillation produced."""

    draft: Path
    steps: int
    train_seconds: float
    seconds: float
    """Everything: serving the target, its continuations and the training."""
    agreement_before: float | None
    """Held-out continuation positions where the draft's argmax is the target's token."""
    agreement_after: float | None


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


def distill_draft(
    *,
    target: Path,
    draft: Path,
    out: Path,
    vllm_python: Path,
    settings: DistillSettings | None = None,
    prompts_file: Path = PROMPTS_FILE,
    console: Console | None = None,
    start_timeout_s: float = launcher.DEFAULT_START_TIMEOUT_S,
) -> DistillResult:
    """Serve ``target``, record its continuations and fine-tune ``draft`` on them into ``out``.

    Args:
        target: Prepared target model folder.
        draft: Draft to start from (e.g. the truncated one of ``models prepare``).
        out: Folder of the distilled draft; replaced if it exists.
        vllm_python: Interpreter of the vLLM venv.
        settings: Training budget; default: the full distillation.
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
    console = console or Console(stderr=True)
    for path in (target, draft):
        if not is_prepared(path):
            raise DistillError(f"{path} is not a prepared model; run `models prepare` first")
    if not vllm_python.exists():
        raise DistillError(f"{vllm_python} not found; create the vLLM venv first")
    started = time.monotonic()
    splits: tuple[Split, ...] = ("train", "heldout")
    prompts = {split: load_prompts(split, prompts_file)[: settings.max_prompts] for split in splits}
    with tempfile.TemporaryDirectory(prefix="specledger-distill-") as tmp:
        work = Path(tmp)
        data = work / "teacher.jsonl"
        _record_teacher(
            target, prompts, data, work, vllm_python, settings, console, start_timeout_s
        )
        metadata = {
            "target": str(target),
            "prompt_set": prompts_file.name,
            "prompt_set_sha256": prompt_set_digest(prompts_file),
            "train_prompts": len(prompts["train"]),
            "heldout_prompts": len(prompts["heldout"]),
            "new_tokens": settings.new_tokens,
        }
        argv = [
            str(vllm_python), str(_SCRIPT),
            "--draft", str(draft),
            "--data", str(data),
            "--out", str(out),
            "--steps", str(settings.steps),
            "--max-seconds", str(settings.max_seconds),
            "--batch-size", str(settings.batch_size),
            "--lr", str(settings.lr),
            "--seed", str(settings.seed),
            "--metadata", json.dumps(metadata),
        ]  # fmt: skip
        if settings.threads is not None:
            argv += ["--threads", str(settings.threads)]
        done = _train(argv, settings, console)
    return DistillResult(
        draft=out,
        steps=int(done["steps"]),
        train_seconds=float(done["train_seconds"]),
        seconds=time.monotonic() - started,
        agreement_before=_optional_float(done.get("heldout_top1_agreement_before")),
        agreement_after=_optional_float(done.get("heldout_top1_agreement_after")),
    )


def collect_continuations(
    base_url: str,
    model_name: str,
    prompts: Sequence[str],
    *,
    new_tokens: int,
    top_k: int = TEACHER_TOP_K,
    concurrency: int = 8,
    on_done: Callable[[], None] | None = None,
    client: httpx.Client | None = None,
) -> list[dict[str, Any]]:
    """The served model's greedy continuation of each prompt, raw and as a chat turn.

    Prompts are tokenized by the server (``/tokenize``, with the chat template for the
    chat form) and sent as token ids, so the data holds exactly what the model saw.

    Args:
        base_url: The server's root URL, without ``/v1``.
        model_name: The name it serves the model under.
        prompts: Texts to continue.
        new_tokens: Continuation length at most.
        top_k: Log-probabilities kept per position.
        concurrency: Requests in flight.
        on_done: Called after each finished request (progress).
        client: HTTP client to use; default: a new one.

    Returns:
        Two records per prompt (raw, then chat): ``prompt_ids``, the continuation's
        ``tokens`` and, per position, ``top`` as ``[token_id, logprob]`` pairs.
    """
    requests = [
        body
        for prompt in prompts
        for body in (
            {"prompt": prompt},
            {"messages": [{"role": "user", "content": prompt}], "add_generation_prompt": True},
        )
    ]

    def one(client: httpx.Client, tokenize: dict[str, Any]) -> dict[str, Any]:
        response = client.post(f"{base_url}/tokenize", json={"model": model_name, **tokenize})
        response.raise_for_status()
        prompt_ids = [int(t) for t in response.json()["tokens"]]
        response = client.post(
            f"{base_url}/v1/completions",
            json={
                "model": model_name,
                "prompt": prompt_ids,
                "max_tokens": new_tokens,
                "temperature": 0,
                "logprobs": top_k,
                "return_tokens_as_token_ids": True,
            },
        )
        response.raise_for_status()
        logprobs = response.json()["choices"][0]["logprobs"]
        record = {
            "prompt_ids": prompt_ids,
            "tokens": [_token_id(t) for t in logprobs["tokens"]],
            "top": [
                [[_token_id(t), lp] for t, lp in (top or {}).items()]
                for top in logprobs["top_logprobs"]
            ],
        }
        if on_done is not None:
            on_done()
        return record

    with contextlib.ExitStack() as stack:
        if client is None:
            client = stack.enter_context(httpx.Client(timeout=600))
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=concurrency))
        return list(pool.map(lambda body: one(client, body), requests))


def _record_teacher(
    target: Path,
    prompts: dict[Split, list[str]],
    data: Path,
    work: Path,
    vllm_python: Path,
    settings: DistillSettings,
    console: Console,
    start_timeout_s: float,
) -> None:
    config = EngineConfig(
        name="distill-teacher",
        model=str(target),
        speculation=NoSpeculation(),
        port=_free_port(),
        python=str(vllm_python),
    )
    with _serving(config, work, console, start_timeout_s), _progress(console) as progress:
        total = 2 * sum(len(p) for p in prompts.values())
        task = progress.add_task("Target continuations", total=total)
        with data.open("w", encoding="utf-8") as out:
            for split, texts in prompts.items():
                records = collect_continuations(
                    config.base_url,
                    config.model_name,
                    texts,
                    new_tokens=settings.new_tokens,
                    concurrency=settings.concurrency,
                    on_done=lambda: progress.advance(task),
                )
                for record in records:
                    out.write(json.dumps({"split": split, **record}) + "\n")


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


def _train(argv: list[str], settings: DistillSettings, console: Console) -> dict[str, Any]:
    output: deque[str] = deque(maxlen=40)
    done: dict[str, Any] | None = None
    begun = time.monotonic()
    with (
        _progress(console) as progress,
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc,
    ):
        task = progress.add_task("Loading torch and the draft", total=settings.steps)
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line.rstrip())
            event = _parse_event(line)
            if event is None:
                continue
            kind = event.get("event")
            if kind == "step":
                progress.update(task, description=str(event.get("message", "")))
            elif kind == "progress":
                progress.update(
                    task,
                    completed=int(event["done"]),
                    description=f"Distilling, loss {float(event['loss']):.3f}",
                )
            elif kind == "metric":
                progress.console.print(f"  {event['name']}: {_percent(event.get('value'))}")
            elif kind == "done":
                done = event
        returncode = proc.wait()
    if returncode != 0 or done is None:
        tail = "\n".join(output)
        raise DistillError(f"draft distillation failed (exit {returncode}):\n{tail}")
    console.print(
        f"[green]✓[/] Distilled in {time.monotonic() - begun:.0f} s ({done['steps']} steps); "
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
    return "n/a" if not isinstance(value, int | float) else f"{100 * value:.1f} %"


def _optional_float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
