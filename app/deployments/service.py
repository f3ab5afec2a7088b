"""The deployments registry: register deployments and their replicas (GPUs, ResourceIds)."""

from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.domain.errors import Conflict, Invalid, NotFound
from app.domain.ledger import SharedPolicy
from app.domain.names import unknown_name
from app.models import Deployment, Replica


class UnknownDeployment(NotFound):
    """No deployment has that name."""


class AlreadyRegistered(Conflict):
    """The deployment, replica or resource id is registered already."""


class InvalidRegistration(Invalid):
    """A registration that makes no sense (no GPU, an unknown shared policy...)."""


def add_deployment(
    session: Session,
    *,
    name: str,
    tag_value: str | None = None,
    tier: str | None = None,
    shared_policy: str = SharedPolicy.proportional,
    shared_team: str | None = None,
) -> Deployment:
    """Register a deployment; its billing rows carry ``tag_value`` (default: its name)."""
    try:
        policy = SharedPolicy(shared_policy)
    except ValueError:
        raise InvalidRegistration(
            f"shared policy must be one of {', '.join(p.value for p in SharedPolicy)}"
        ) from None
    if policy is SharedPolicy.team and not shared_team:
        raise InvalidRegistration("the 'team' shared policy needs a team name")
    if session.scalar(select(Deployment).where(Deployment.name == name)):
        raise AlreadyRegistered(f"deployment {name!r} already exists")
    deployment = Deployment(
        name=name,
        tag_value=tag_value or name,
        tier=tier,
        shared_cost_policy=policy,
        shared_cost_team=shared_team,
        created_at=datetime.now(UTC),
    )
    session.add(deployment)
    session.flush()
    return deployment


def add_replica(
    session: Session,
    *,
    deployment: str,
    name: str,
    gpus: int,
    resource_id: str | None = None,
    base_url: str | None = None,
) -> Replica:
    """Register a replica with its GPU count and, optionally, its billing ResourceId."""
    if gpus < 1:
        raise InvalidRegistration("a replica has at least one GPU")
    owner = get_deployment(session, deployment)
    replica = Replica(
        deployment_id=owner.id, name=name, gpus=gpus, resource_id=resource_id, base_url=base_url
    )
    session.add(replica)
    try:
        session.flush()
    except IntegrityError:
        raise AlreadyRegistered(
            f"replica {name!r} or resource id {resource_id!r} is already registered"
        ) from None
    return replica


def get_deployment(session: Session, name: str) -> Deployment:
    deployment = session.scalar(select(Deployment).where(Deployment.name == name))
    if deployment is None:
        known = session.scalars(select(Deployment.name)).all()
        raise UnknownDeployment(
            unknown_name(
                "deployment", name, known, hint="register it with `specledger deployments add`"
            )
        )
    return deployment


def list_deployments(session: Session) -> list[tuple[Deployment, list[Replica]]]:
    deployments = session.scalars(select(Deployment).order_by(Deployment.name)).all()
    replicas = session.scalars(select(Replica).order_by(Replica.name)).all()
    return [(d, [r for r in replicas if r.deployment_id == d.id]) for d in deployments]
