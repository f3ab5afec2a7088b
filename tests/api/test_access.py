"""Access control over every route of the app, table-driven, on both databases.

For each route: no key and a wrong key give 401; admin-only routes give 403 to a team key;
a team key's responses never mention the other team (its name, sessions, events, cost
center or tags), even when it asks for the other team by name. The table must name every
route the app has, so a new route cannot skip these checks.
"""

from dataclasses import dataclass, field
from typing import Any

from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient

from tests.api.conftest import Seeded


@dataclass(frozen=True)
class Case:
    query: dict[str, Any] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    admin_only: bool = False
    path_params: dict[str, str] = field(default_factory=dict)
    team_param: bool = False
    """The route takes ?team=; a team key naming another team must get 403."""
    shows_team_data: bool = False
    """The seeded data shows up: the admin view names both teams, a team view its own."""
    team_status: int = 200
    static: bool = False
    """A static asset (plotly.js): it needs a key, but its text is not team data (it names
    the colour "orchid")."""
    variants: tuple[dict[str, Any], ...] = ()
    """More query parameters to run the team checks with (other aggregates, formats)."""


PUBLIC = {
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/openapi.json"),
    ("GET", "/docs"),
    ("GET", "/docs/oauth2-redirect"),
    ("GET", "/redoc"),
}
"""Operations and documentation: no key needed, and no team data in them."""

CASES: dict[tuple[str, str], Case] = {
    ("GET", "/v1/whoami"): Case(),
    ("GET", "/v1/allocation"): Case(
        query={
            "window": "2026-10",
            "aggregate": "team,session,model,tag:app,cost_center",
            "step": "hour",
            "idle": "share",
        },
        team_param=True,
        shows_team_data=True,
        variants=(
            {"idle": "separate", "aggregate": "deployment,method", "step": "day"},
            {"aggregate": "session", "format": "csv", "cost_metric": "billed"},
        ),
    ),
    ("POST", "/v1/allocation/runs"): Case(body={"month": "2026-10"}, admin_only=True),
    ("GET", "/v1/costs"): Case(
        query={"month": "2026-10", "by": "team,session,tag:app"},
        team_param=True,
        shows_team_data=True,
        variants=({"by": "deployment,cost_center", "format": "csv"},),
    ),
    ("GET", "/v1/reconciliation"): Case(query={"month": "2026-10"}, admin_only=True),
    ("GET", "/v1/prices"): Case(query={"month": "2026-10"}),
    ("GET", "/v1/chargeback"): Case(
        query={"month": "2026-10", "format": "focus-csv"},
        team_param=True,
        shows_team_data=True,
        variants=({"format": "csv"}, {"format": "csv", "by_cost_center": True}),
    ),
    ("GET", "/v1/ledger/closures"): Case(),
    ("POST", "/v1/ledger/closures"): Case(body={"month": "2026-10"}, admin_only=True),
    ("POST", "/v1/usage/events"): Case(body={"events": []}, admin_only=True),
    ("GET", "/v1/sessions"): Case(
        query={"window": "2026-10"}, team_param=True, shows_team_data=True
    ),
    ("GET", "/v1/sessions/{session_id}"): Case(
        path_params={"session_id": "OTHER_SESSION"}, team_status=404
    ),
    ("GET", "/v1/breakeven/sweeps"): Case(),
    ("GET", "/v1/breakeven/sweeps/{sweep_id}"): Case(path_params={"sweep_id": "SWEEP"}),
    ("GET", "/v1/breakeven/sweeps/{sweep_id}/fit"): Case(path_params={"sweep_id": "SWEEP"}),
    ("GET", "/v1/tiers"): Case(),
    ("GET", "/v1/tiers/recommendation"): Case(query={"concurrency": 10, "tpot_p90": 0.05}),
    ("GET", "/v1/waste"): Case(query={"window": "2026-10", "min_requests": 1}, team_param=True),
    ("GET", "/v1/deployments"): Case(),
    ("POST", "/v1/deployments"): Case(body={"name": "d9"}, admin_only=True),
    ("POST", "/v1/deployments/{name}/replicas"): Case(
        path_params={"name": "d1"}, body={"name": "r9", "gpus": 1}, admin_only=True
    ),
    ("POST", "/v1/billing/ingest"): Case(body={"location": "/nonexistent"}, admin_only=True),
    ("GET", "/v1/billing/deliveries"): Case(query={"month": "2026-10"}, admin_only=True),
    ("GET", "/v1/billing/deliveries/{delivery_id}"): Case(
        path_params={"delivery_id": "1"}, admin_only=True
    ),
    ("POST", "/v1/billing/deliveries/{delivery_id}/remove"): Case(
        path_params={"delivery_id": "999"}, body={}, admin_only=True
    ),
    ("GET", "/v1/budgets"): Case(shows_team_data=True),
    ("GET", "/v1/anomalies"): Case(variants=({"granularity": "hour", "buckets": 3},)),
    ("GET", "/v1/budgets/{ident}"): Case(path_params={"ident": "OTHER_BUDGET"}, team_status=404),
    ("POST", "/v1/budgets"): Case(
        body={"name": "b9", "scope": "team=x", "amount": "10"}, admin_only=True
    ),
    ("DELETE", "/v1/budgets/{ident}"): Case(path_params={"ident": "b9"}, admin_only=True),
    ("GET", "/v1/slurm/jobs"): Case(query={"month": "2026-10"}, team_param=True),
    ("GET", "/v1/slurm/usage"): Case(query={"month": "2026-10"}, team_param=True),
    ("GET", "/v1/speculation/positions"): Case(query={"window": "2026-10"}, team_param=True),
    ("GET", "/dashboards"): Case(shows_team_data=True),  # redirects to the cost page
    ("GET", "/dashboards/cost"): Case(team_param=True, shows_team_data=True),
    ("GET", "/dashboards/speculation"): Case(team_param=True, shows_team_data=True),
    ("GET", "/dashboards/breakeven"): Case(team_param=True),
    ("GET", "/dashboards/tiers"): Case(team_param=True),
    ("GET", "/dashboards/budgets"): Case(team_param=True, shows_team_data=True),
    ("GET", "/dashboards/assets/plotly.min.js"): Case(static=True),
}

OTHER_TEAM_MARKERS = {"orchid": "walrus", "walrus": "orchid"}
"""Every seeded identifier of a team (team, sessions, events, cost center, tag values)
contains its name; no other seeded string does."""


def app_routes(client: TestClient) -> set[tuple[str, str]]:
    routes = set()
    for context in iter_route_contexts(client.app.routes):  # type: ignore[attr-defined]
        for method in getattr(context.original_route, "methods", None) or ():
            if method != "HEAD":
                routes.add((method, str(context.path_format)))
    return routes


def _call(
    client: TestClient,
    method: str,
    template: str,
    case: Case,
    seeded: Seeded,
    headers: dict[str, str],
    other: str = "walrus",
    **extra_query: Any,
) -> Any:
    """Call a route with its path parameters filled in; ``OTHER_SESSION`` is a session of
    team ``other``."""
    values = {
        "SWEEP": str(seeded.sweep_id),
        "OTHER_SESSION": f"sess-{other}-1",
        "OTHER_BUDGET": f"budget-{other}",
    }
    path = template
    for name, value in case.path_params.items():
        path = path.replace("{" + name + "}", values.get(value, value))
    return client.request(
        method, path, params={**case.query, **extra_query}, json=case.body, headers=headers
    )


def test_the_table_covers_every_route(client: TestClient) -> None:
    routes = app_routes(client)
    missing = routes - set(CASES) - PUBLIC
    assert not missing, f"routes without an access case: {sorted(missing)}"
    assert set(CASES) <= routes, f"cases for routes that do not exist: {set(CASES) - routes}"


def test_every_route_enforces_keys_and_team_scope(client: TestClient, seeded: Seeded) -> None:
    failures: list[str] = []
    wrong = {"Authorization": "Bearer slk_" + "x" * 43}
    revoked_looking = {
        "X-API-Key": seeded.keys.orchid[:-1] + ("A" if seeded.keys.orchid[-1] != "A" else "B")
    }
    for (method, template), case in sorted(CASES.items()):
        label = f"{method} {template}"
        for name, headers in (
            ("no key", {}),
            ("wrong key", wrong),
            ("altered key", revoked_looking),
            ("malformed header", {"Authorization": "Basic abc"}),
        ):
            response = _call(client, method, template, case, seeded, headers)
            if response.status_code != 401:
                failures.append(f"{label} with {name}: {response.status_code}")
            elif response.json()["error"]["code"] != "unauthorized":
                failures.append(f"{label} with {name}: code {response.json()['error']}")
        for team, other in OTHER_TEAM_MARKERS.items():
            headers = seeded.keys.header(team)
            for variant in case.variants:
                response = _call(client, method, template, case, seeded, headers, other, **variant)
                if response.status_code != 200 or other in response.text:
                    failures.append(
                        f"{label} {variant} as {team}: {response.status_code} {response.text[:300]}"
                    )
            response = _call(client, method, template, case, seeded, headers, other)
            expected = 403 if case.admin_only else case.team_status
            if response.status_code != expected:
                failures.append(
                    f"{label} as {team}: {response.status_code} != {expected}: "
                    f"{response.text[:200]}"
                )
            if other in response.text and not case.static:
                failures.append(f"{label} as {team} leaks {other!r}: {response.text[:300]}")
            if case.shows_team_data and team not in response.text:
                failures.append(f"{label} as {team}: its own data is missing")
            if case.team_param:
                asked = _call(client, method, template, case, seeded, headers, other, team=other)
                if asked.status_code != 403 or other in asked.text:
                    failures.append(
                        f"{label} as {team} asking for team={other}: "
                        f"{asked.status_code} {asked.text[:200]}"
                    )
        if case.shows_team_data:
            response = _call(client, method, template, case, seeded, seeded.keys.header("admin"))
            if response.status_code != 200 or not all(
                t in response.text for t in OTHER_TEAM_MARKERS
            ):
                failures.append(
                    f"{label} as admin: {response.status_code}, both teams "
                    f"expected: {response.text[:200]}"
                )
    assert not failures, "\n".join(failures)


def test_public_routes_need_no_key_and_show_no_team_data(
    client: TestClient, seeded: Seeded
) -> None:
    for method, path in sorted(PUBLIC - {("GET", "/docs/oauth2-redirect")}):
        response = client.request(method, path)
        assert response.status_code == 200, (path, response.text)
        assert "orchid" not in response.text, path
        assert "walrus" not in response.text, path


def test_revoked_key_is_refused(client: TestClient, seeded: Seeded, engine: Any) -> None:
    from sqlalchemy.orm import Session

    from app.auth.service import revoke_key

    headers = seeded.keys.header("orchid")
    assert client.get("/v1/whoami", headers=headers).json()["team"] == "orchid"
    with Session(engine) as session, session.begin():
        revoke_key(session, seeded.keys.orchid[:12])
    response = client.get("/v1/whoami", headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"


def test_an_admin_asking_for_an_unknown_team_gets_404_with_the_known_names(
    client: TestClient, seeded: Seeded
) -> None:
    admin = seeded.keys.header("admin")
    checked = [
        (method, template, case)
        for (method, template), case in sorted(CASES.items())
        if case.team_param and template.startswith("/v1/") and "/slurm/" not in template
    ]
    assert len(checked) >= 6
    for method, template, case in checked:
        known = _call(client, method, template, case, seeded, admin, team="orchid")
        assert known.status_code == 200, (template, known.text[:300])
        response = _call(client, method, template, case, seeded, admin, team="orchd")
        assert response.status_code == 404, (template, response.text[:300])
        message = response.json()["error"]["message"]
        assert "orchd" in message, (template, message)
        assert "orchid" in message, (template, message)


def test_a_team_key_is_not_told_which_teams_exist(client: TestClient, seeded: Seeded) -> None:
    orchid = seeded.keys.header("orchid")
    for team in ("walrus", "nobody"):
        response = client.get(
            "/v1/costs", params={"month": "2026-10", "team": team}, headers=orchid
        )
        assert response.status_code == 403, response.text
        assert "walrus" not in response.text
