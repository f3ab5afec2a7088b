"""The served pages: access by API key, team scope, parameters (no browser; see test_browser)."""

import math
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from app.breakeven.rules.report import breakeven_fit_as_dict, fit_breakeven
from app.breakeven.rules.sweep import SweepPoint
from dashboards.pages import PAGES
from dashboards.router import KEY_COOKIE
from tests.dashboards.conftest import Keys, dashboards_app
from tests.dashboards.seed import (
    SWEEP_BASELINE,
    SWEEP_LEVELS,
    SWEEP_NGRAM,
    TEAMS,
    Seeded,
    add_sweep,
)


@pytest.fixture
def client(engine: Engine) -> Iterator[TestClient]:
    with TestClient(dashboards_app(engine), raise_server_exceptions=False) as test_client:
        yield test_client


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.mark.parametrize("page", list(PAGES))
def test_every_page_needs_a_valid_key(client: TestClient, keys: Keys, page: str) -> None:
    missing = client.get(f"/dashboards/{page}")
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "unauthorized"
    wrong = client.get(f"/dashboards/{page}", headers=_bearer("slk_" + "x" * 43))
    assert wrong.status_code == 401
    assert client.get(f"/dashboards/{page}", headers={"X-API-Key": keys.admin}).status_code == 200


def test_the_plotly_asset_needs_a_key_and_comes_from_the_package(
    client: TestClient, keys: Keys
) -> None:
    assert client.get("/dashboards/assets/plotly.min.js").status_code == 401
    asset = client.get("/dashboards/assets/plotly.min.js", headers=_bearer(keys.search))
    assert asset.status_code == 200
    assert asset.headers["content-type"].startswith("application/javascript")
    assert len(asset.content) > 1_000_000


def test_admin_pages_show_every_team(client: TestClient, keys: Keys, seeded: Seeded) -> None:
    body = client.get("/dashboards/cost", headers=_bearer(keys.admin)).text
    assert all(team in body for team in TEAMS)
    assert "all teams · 2026-10" in body
    assert 'name="team"' in body  # an admin may pick a team
    assert "cdn" not in body.lower()
    assert '<script src="/dashboards/assets/plotly.min.js?v=' in body


@pytest.mark.parametrize("page", list(PAGES))
def test_a_team_key_sees_only_its_team(
    client: TestClient, keys: Keys, seeded: Seeded, page: str
) -> None:
    response = client.get(f"/dashboards/{page}", headers=_bearer(keys.search))
    assert response.status_code == 200
    body = response.text
    for other in set(TEAMS) - {"search"}:
        assert other not in body
    assert "team search" in body
    assert 'name="team"' not in body
    # asking for another team's view is refused, asking for its own is fine
    refused = client.get(f"/dashboards/{page}?team=ads-platform", headers=_bearer(keys.search))
    assert refused.status_code == 403
    own = client.get(f"/dashboards/{page}?team=search", headers=_bearer(keys.search))
    assert own.status_code == 200
    assert 'name="team"' not in own.text  # only an admin key gets the team picker


def test_an_admin_can_look_at_one_team(client: TestClient, keys: Keys, seeded: Seeded) -> None:
    body = client.get("/dashboards/speculation?team=ads-platform", headers=_bearer(keys.admin)).text
    assert "ads-platform" in body
    assert "research-lab" not in body
    assert 'name="team" size="12" placeholder="all" value="ads-platform"' in body
    assert 'href="/dashboards/cost?team=ads-platform"' in body  # navigation keeps the scope


def test_a_browser_key_in_the_query_becomes_a_cookie(
    client: TestClient, keys: Keys, seeded: Seeded
) -> None:
    first = client.get(f"/dashboards/tiers?key={keys.ads}")
    assert first.status_code == 200
    cookie = first.headers["set-cookie"]
    assert cookie.startswith(f"{KEY_COOKIE}=")
    assert "HttpOnly" in cookie
    assert "Path=/dashboards" in cookie
    client.cookies.set(KEY_COOKIE, keys.ads)
    later = client.get("/dashboards/cost")
    assert later.status_code == 200
    assert "team ads-platform" in later.text
    assert "search" not in later.text


def test_month_and_index(client: TestClient, keys: Keys, seeded: Seeded) -> None:
    headers = _bearer(keys.admin)
    bad = client.get("/dashboards/cost?month=2026-13", headers=headers)
    assert bad.status_code == 422
    assert client.get("/dashboards/cost?month=October", headers=headers).status_code == 422
    empty = client.get("/dashboards/cost?month=2026-09", headers=headers)
    assert empty.status_code == 200
    assert "No data yet" in empty.text
    index = client.get("/dashboards?month=2026-10", headers=headers, follow_redirects=False)
    assert index.status_code == 303
    assert index.headers["location"] == "/dashboards/cost?month=2026-10"


def test_an_unknown_sweep_shows_no_data(client: TestClient, keys: Keys, seeded: Seeded) -> None:
    body = client.get("/dashboards/breakeven?sweep=999", headers=_bearer(keys.admin)).text
    assert "No data yet" in body


def test_tiers_page_flags_the_briefs_figures_with_the_reason(
    client: TestClient, keys: Keys, seeded: Seeded
) -> None:
    body = client.get("/dashboards/tiers", headers=_bearer(keys.admin)).text
    assert "<table class=claims>" in body
    assert body.count("reference/product-brief.txt") >= 9  # three figures for three tiers
    assert "quoted $0.12 (computed: within)" in body  # the figure's diamond
    assert "<td class=flag>above</td>" in body
    assert "1 running 617 h a month (85% of 730 h)" in body
    assert "8 running 216 h a month (30% of 730 h)" in body


def test_the_breakeven_page_says_how_its_interval_was_computed(
    client: TestClient, keys: Keys, engine: Engine
) -> None:
    points = [
        SweepPoint(
            config=config,
            method=method,
            k=k,
            concurrency=level,
            output_tokens_per_s=rate,
            mean_acceptance_length=2.4 if k else math.nan,
        )
        for config, method, k, rates in (
            ("none", "none", 0, SWEEP_BASELINE),
            ("ngram-k4", "ngram", 4, SWEEP_NGRAM),
        )
        for level, rate in zip(SWEEP_LEVELS, rates, strict=True)
    ]
    fit = breakeven_fit_as_dict(fit_breakeven(points, bootstrap_samples=30, seed=0))
    sweep_id = add_sweep(engine, fit=fit)
    body = client.get(f"/dashboards/breakeven?sweep={sweep_id}", headers=_bearer(keys.admin)).text
    assert "95% interval" in body
    assert "The interval is the union of a residual-bootstrap percentile interval" in body
    if fit["pinned_down"] is False:
        assert "measure concurrency" in body


def test_the_cost_page_shows_the_months_waste_as_the_api_reports_it(
    client: TestClient, keys: Keys, seeded: Seeded, engine: Engine
) -> None:
    from dashboards.data import waste_frame
    from dashboards.figures import money_2dp

    frame = waste_frame(engine, month="2026-10")
    assert not frame.empty, "the seeded month has waste to show"
    body = client.get("/dashboards/cost?month=2026-10", headers=_bearer(keys.admin)).text
    assert "Waste this month" in body
    for row in frame.to_dict("records"):
        assert f"{money_2dp(int(row['monthly_micros']))} {row['currency']}" in body
        assert f"{row['scope']} {row['key']}" in body
    own = waste_frame(engine, month="2026-10", team="search")
    assert not (own["kind"] == "idle_gpu").any(), "idle GPUs belong to no team"
