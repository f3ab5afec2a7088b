"""A Slurm cluster in the registry: the deployment ``slurm-<cluster>`` whose replicas are the
nodes of its cost model (GPUs, and the ResourceId its bill rows carry), and the replicas that
serve from inside a Slurm job."""

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.deployments.service import add_deployment, add_replica, get_deployment
from app.domain.errors import Invalid, NotFound
from app.domain.slurm_jobs import job_key
from app.models import Deployment, Replica, SlurmJob
from app.slurm.rules.cluster_cost import ClusterCostModel
from app.slurm.rules.usage import cluster_deployment

ENTERPRISE_TIER = "enterprise"


@dataclass(frozen=True, slots=True)
class ClusterRegistration:
    deployment: str
    added: tuple[str, ...]
    kept: tuple[str, ...]
    """Nodes already registered with the same GPUs and resource id."""


def register_cluster(session: Session, model: ClusterCostModel) -> ClusterRegistration:
    """Register (idempotently) the cluster's deployment and one replica per node.

    Raises:
        Invalid: If a node is registered already with other GPUs or another resource id
            (change the cost model or the registry, not both silently).
    """
    name = cluster_deployment(model.cluster)
    deployment = session.scalar(select(Deployment).where(Deployment.name == name))
    if deployment is None:
        deployment = add_deployment(session, name=name, tier=ENTERPRISE_TIER)
    existing = {
        r.name: r
        for r in session.scalars(select(Replica).where(Replica.deployment_id == deployment.id))
    }
    added, kept = [], []
    for node in model.nodes:
        replica = existing.get(node.name)
        if replica is None:
            add_replica(
                session,
                deployment=name,
                name=node.name,
                gpus=node.gpus,
                resource_id=node.resource_id,
            )
            added.append(node.name)
        elif (replica.gpus, replica.resource_id) == (node.gpus, node.resource_id):
            kept.append(node.name)
        else:
            raise Invalid(
                f"{model.source}: node {node.name} is registered with {replica.gpus} GPUs and "
                f"resource id {replica.resource_id!r}, the cost model says {node.gpus} and "
                f"{node.resource_id!r}"
            )
    return ClusterRegistration(name, tuple(added), tuple(kept))


def link_job(session: Session, *, deployment: str, replica: str, cluster: str, job: str) -> None:
    """Record that ``replica`` serves from inside Slurm job ``job`` of ``cluster``: the job's
    share of its node is split again to the replica's requests.

    Raises:
        NotFound: If the replica is not registered.
        Invalid: If the job is known to have run on several nodes (one server per node is
            what the split supports).
    """
    owner = get_deployment(session, deployment)
    row = session.scalar(
        select(Replica).where(Replica.deployment_id == owner.id, Replica.name == replica)
    )
    if row is None:
        raise NotFound(f"unknown replica {replica!r} of deployment {deployment!r}")
    nodes = session.scalars(
        select(SlurmJob.nodes).where(
            SlurmJob.cluster == cluster, SlurmJob.job == job, SlurmJob.step == ""
        )
    ).all()
    if any(len(n) > 1 for n in nodes):
        raise Invalid(
            f"Slurm job {job} of {cluster} ran on several nodes; a metered server job must "
            "run on one node (one replica per node)"
        )
    row.slurm_job = job_key(cluster, job)
    session.flush()
