"""Every dashboard page in headless Chromium: no console error, plots drawn, screenshots taken.

The pages are served by uvicorn on a free port from a small app that mounts the dashboards
router against the test database (a billed and allocated month, and a sweep). Chromium is
Debian's ``/usr/bin/chromium`` (``scripts/ensure_chromium.sh`` installs it), driven by
Playwright without ``playwright install``; without it the tests skip, and fail under CI.

Screenshots go to the test's ``tmp_path`` (pytest keeps the last few runs' folders). The
README's ``docs/screenshot-cost.png`` is written only when asked for, by ``make screenshot``
(``--readme-screenshot PATH``): the admin's cost page on SQLite.
"""

import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from playwright.sync_api import BrowserContext, Page, sync_playwright
from sqlalchemy import Engine

from dashboards.pages import PAGES
from tests.dashboards.conftest import Keys, dashboards_app
from tests.dashboards.seed import TEAMS, Seeded
from tests.prereq import require

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.xdist_group("browser")  # one Chromium at a time on a small machine


@pytest.fixture(scope="module", autouse=True)
def _chromium() -> None:
    require(
        CHROMIUM.exists(),
        f"needs Debian's chromium at {CHROMIUM}: run scripts/ensure_chromium.sh (make test does)",
    )


@pytest.fixture
def readme_screenshot(request: pytest.FixtureRequest) -> Path | None:
    """Where ``--readme-screenshot`` asks for the admin's cost page (relative paths from the
    directory pytest was started in); None when not asked."""
    value = request.config.getoption("readme_screenshot")
    return None if value is None else request.config.invocation_params.dir / value


_PLOTS_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(el => ({
    id: el.id,
    svg: el.querySelectorAll('.main-svg').length,
    traces: el.querySelectorAll('g.trace').length,
    data: (el.data || []).length,
    text: Array.from(el.querySelectorAll('text')).map(t => t.textContent).join(' '),
}))"""


@pytest.fixture
def server(engine: Engine, seeded: Seeded) -> Iterator[str]:
    """The dashboards on 127.0.0.1, on a port the OS picked, for the test's duration."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(dashboards_app(engine), log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not uv.started:
        assert thread.is_alive(), "uvicorn stopped while starting"
        assert time.monotonic() < deadline, "uvicorn did not start within 20 s"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    uv.should_exit = True
    thread.join(timeout=20)
    sock.close()


@pytest.fixture
def browser() -> Iterator[BrowserContext]:
    """Chromium with a fresh profile (user data dir), removed afterwards."""
    profile = tempfile.mkdtemp(prefix="specledger-chromium-")
    try:
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile,
                executable_path=str(CHROMIUM),
                headless=True,
                args=CHROMIUM_FLAGS,
                viewport={"width": 1400, "height": 900},
            )
            yield context
            context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


class PageProblems:
    """Console errors, uncaught exceptions and failed requests seen by one page."""

    def __init__(self, page: Page) -> None:
        self.items: list[str] = []
        page.on(
            "console",
            lambda m: (
                self.items.append(f"console.{m.type}: {m.text}") if m.type == "error" else None
            ),
        )
        page.on("pageerror", lambda e: self.items.append(f"uncaught: {e}"))
        page.on("requestfailed", lambda r: self.items.append(f"request failed: {r.url}"))
        page.on(
            "response",
            lambda r: self.items.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None,
        )


def _load(context: BrowserContext, url: str) -> tuple[Page, list[dict[str, Any]], PageProblems]:
    page = context.new_page()
    problems = PageProblems(page)
    response = page.goto(url, wait_until="load")
    assert response is not None, url
    assert response.status == 200, url
    expected = page.locator(".js-plotly-plot").count()
    assert expected > 0, f"no plot on {url}"
    page.wait_for_function(
        f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {expected}"
    )
    page.wait_for_timeout(300)  # the load-time resize settles
    return page, page.evaluate(_PLOTS_JS), problems


def _shot(page: Page, name: str, engine: Engine, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    suffix = "" if engine.dialect.name == "sqlite" else f"-{engine.dialect.name}"
    path = folder / f"{name}{suffix}.png"
    # A loaded two-core machine has taken over 30 s (the default) for a full-page shot.
    page.screenshot(path=str(path), full_page=True, timeout=120_000)
    return path


def test_every_page_renders_for_an_admin(
    server: str,
    browser: BrowserContext,
    keys: Keys,
    engine: Engine,
    tmp_path: Path,
    readme_screenshot: Path | None,
) -> None:
    first = True
    for name in PAGES:
        key = f"?key={keys.admin}" if first else ""  # then the cookie carries it
        first = False
        page, plots, problems = _load(browser, f"{server}/dashboards/{name}{key}")
        assert problems.items == [], name
        for plot in plots:
            assert plot["svg"] >= 1, (name, plot["id"])
            assert plot["data"] > 0, (name, plot["id"])
            assert plot["traces"] > 0, (name, plot["id"])
        body = page.content()
        assert f"SpecLedger · {PAGES[name]}" in body
        assert "No data yet" not in body
        path = _shot(page, f"{name}-admin", engine, tmp_path / "screenshots")
        assert path.stat().st_size > 10_000
        if name == "cost":
            assert all(team in body for team in TEAMS)
            by_id = {plot["id"]: plot for plot in plots}
            assert "balanced to the micro" in by_id["reconciliation"]["text"]
            if readme_screenshot is not None and engine.dialect.name == "sqlite":
                readme_screenshot.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, readme_screenshot)
        if name == "breakeven":
            by_id = {plot["id"]: plot for plot in plots}
            assert "k=0" in by_id["breakeven"]["text"]
        page.close()


def test_every_page_renders_for_a_team_without_other_teams(
    server: str, browser: BrowserContext, keys: Keys, engine: Engine, tmp_path: Path
) -> None:
    others = set(TEAMS) - {"search"}
    for index, name in enumerate(PAGES):
        key = f"?key={keys.search}" if index == 0 else ""
        page, plots, problems = _load(browser, f"{server}/dashboards/{name}{key}")
        assert problems.items == [], name
        for plot in plots:
            assert plot["svg"] >= 1, (name, plot["id"])
            if plot["id"] == "idle-share":  # idle GPUs belong to no team
                assert "Idle GPU cost belongs to no team" in plot["text"]
            else:
                assert plot["traces"] > 0, (name, plot["id"])
        html = page.content()
        text = page.inner_text("body") + " ".join(plot["text"] for plot in plots)
        for other in others:
            assert other not in html, (name, other)
            assert other not in text, (name, other)
        assert "team search" in text
        _shot(page, f"{name}-team-search", engine, tmp_path / "screenshots")
        page.close()
