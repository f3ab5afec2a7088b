"""The teams SpecLedger knows: those with usage and those that hold API keys (what a key or a
report may name)."""

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from app.domain.errors import NotFound
from app.domain.names import unknown_name
from app.models import ApiKey

# A loose index scan: one index seek per distinct team on usage_records(team, ...), so the
# cost grows with the number of teams, not of requests (a plain DISTINCT reads every row).
_TEAMS_WITH_USAGE = text(
    """
    WITH RECURSIVE seen(team) AS (
        SELECT MIN(team) FROM usage_records
        UNION ALL
        SELECT (SELECT MIN(u.team) FROM usage_records u WHERE u.team > seen.team)
        FROM seen WHERE seen.team IS NOT NULL
    )
    SELECT team FROM seen WHERE team IS NOT NULL
    """
)


class UnknownTeam(NotFound):
    """No usage and no API key names this team."""


def known_teams(session: Session) -> set[str]:
    """Every team with usage records or an API key."""
    teams = set(session.scalars(_TEAMS_WITH_USAGE))
    teams.update(t for t in session.scalars(select(ApiKey.team).distinct()) if t)
    return teams


def check_team(session: Session, team: str) -> None:
    """Refuse a team nobody has heard of, suggesting the close known names.

    Raises:
        UnknownTeam: No usage record and no API key names ``team``.
    """
    teams = known_teams(session)
    if team not in teams:
        raise UnknownTeam(unknown_name("team", team, teams))
