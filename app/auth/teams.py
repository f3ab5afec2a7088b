"""The teams SpecLedger knows: those with usage and those that hold API keys (what a key or a
report may name)."""

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.errors import NotFound
from app.domain.names import unknown_name
from app.kit.loose_scan import distinct_values
from app.models import ApiKey


class UnknownTeam(NotFound):
    """No usage and no API key names this team."""


def known_teams(session: Session) -> set[str]:
    """Every team with usage records or an API key."""
    teams = set(distinct_values(session, "usage_records", "team"))
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
