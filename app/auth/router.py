"""Who am I: the scope of the key in use."""

from fastapi import APIRouter

from app.auth.deps import PrincipalDep
from app.errors import RESPONSES_READ
from app.kit.schemas import Schema

router = APIRouter(tags=["auth"])


class WhoAmI(Schema):
    key_name: str
    team: str | None
    """The only team whose data the key can read; null for admin keys."""
    admin: bool


@router.get("/whoami", response_model=WhoAmI, responses=RESPONSES_READ)
def whoami(principal: PrincipalDep) -> WhoAmI:
    """The scope of the API key in use."""
    return WhoAmI(key_name=principal.name, team=principal.team, admin=principal.is_admin)
