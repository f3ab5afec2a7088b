"""The deployments registry: list (any key), register deployments and replicas (admin)."""

from typing import Annotated

from fastapi import APIRouter

from app.auth.deps import AdminDep, PrincipalDep
from app.auth.service import Principal
from app.deployments import service
from app.deployments.schemas import DeploymentCreate, DeploymentRead, ReplicaCreate, ReplicaRead
from app.deps import SessionDep
from app.errors import RESPONSES_READ, ErrorBody
from app.kit.http_params import name_path
from app.models import Deployment, Replica

router = APIRouter(prefix="/deployments", tags=["deployments"])


def _read(deployment: Deployment, replicas: list[Replica], principal: Principal) -> DeploymentRead:
    shared_team = deployment.shared_cost_team
    if not principal.is_admin and shared_team != principal.team:
        shared_team = None  # another team's name is not this key's to see
    return DeploymentRead(
        name=deployment.name,
        tag_value=deployment.tag_value,
        tier=deployment.tier,
        shared_cost_policy=deployment.shared_cost_policy,
        shared_cost_team=shared_team,
        created_at=deployment.created_at,
        replicas=[ReplicaRead.model_validate(replica) for replica in replicas],
    )


@router.get("", response_model=list[DeploymentRead], responses=RESPONSES_READ)
def list_deployments(session: SessionDep, principal: PrincipalDep) -> list[DeploymentRead]:
    """Registered deployments with their replicas."""
    return [_read(d, replicas, principal) for d, replicas in service.list_deployments(session)]


@router.post(
    "",
    response_model=DeploymentRead,
    status_code=201,
    responses={**RESPONSES_READ, 409: {"model": ErrorBody, "description": "Already registered."}},
)
def create_deployment(
    body: DeploymentCreate, session: SessionDep, admin: AdminDep
) -> DeploymentRead:
    """Register a deployment (admin)."""
    deployment = service.add_deployment(
        session,
        name=body.name,
        tag_value=body.tag_value,
        tier=body.tier,
        shared_policy=body.shared_policy,
        shared_team=body.shared_team,
    )
    return _read(deployment, [], admin)


@router.post(
    "/{name}/replicas",
    response_model=ReplicaRead,
    status_code=201,
    responses={**RESPONSES_READ, 404: {"model": ErrorBody}, 409: {"model": ErrorBody}},
)
def create_replica(
    name: Annotated[str, name_path("The deployment's name.")],
    body: ReplicaCreate,
    session: SessionDep,
    _admin: AdminDep,
) -> ReplicaRead:
    """Register a replica of a deployment with its GPUs and billing ResourceId (admin)."""
    replica = service.add_replica(
        session,
        deployment=name,
        name=body.name,
        gpus=body.gpus,
        resource_id=body.resource_id,
        base_url=body.base_url,
    )
    return ReplicaRead.model_validate(replica)
