"""The ``?team=`` of the read routes, checked: an admin asking for a team nobody knows gets a
404 with the known names, not an empty answer. A team key is never told which teams exist:
its own team always passes here, and another is refused by
:func:`app.auth.deps.team_scope`."""

from typing import Annotated

from fastapi import Depends

from app.auth.deps import PrincipalDep
from app.auth.teams import check_team
from app.deps import SessionDep, SettingsDep
from app.kit.http_params import name_query


def known_team(
    principal: PrincipalDep,
    session: SessionDep,
    settings: SettingsDep,
    team: Annotated[
        str | None,
        name_query("Only this team (admin keys; a team key always sees only its own team)."),
    ] = None,
) -> str | None:
    """The team asked for, once an admin's is known (teams are checked against the
    database's usage, so not while usage lives in a Parquet store).

    Raises:
        UnknownTeam: An admin named a team with no usage and no API key.
    """
    if team is not None and principal.is_admin and settings.ledger_store is None:
        check_team(session, team)
    return team


TeamQuery = Annotated[str | None, Depends(known_team)]
