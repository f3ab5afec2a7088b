"""ORM models; importing this package registers every table on ``Base.metadata``."""

from app.models.alert import AlertDelivery, AlertWebhook
from app.models.api_key import ApiKey
from app.models.billing import BillingDelivery, BillingRow
from app.models.budget import Budget
from app.models.deployment import Deployment, Replica
from app.models.engine_memory import EngineMemory
from app.models.ledger import (
    AllocationRun,
    LedgerClosure,
    LedgerEntry,
    LedgerPoolRow,
    LedgerRollup,
)
from app.models.probe import ProbeRun
from app.models.slurm import SlurmIngest, SlurmJob
from app.models.sweep import Sweep, SweepPointRecord
from app.models.usage import ReplicaIdle, UsageRecord

__all__ = [
    "AlertDelivery",
    "AlertWebhook",
    "AllocationRun",
    "ApiKey",
    "BillingDelivery",
    "BillingRow",
    "Budget",
    "Deployment",
    "EngineMemory",
    "LedgerClosure",
    "LedgerEntry",
    "LedgerPoolRow",
    "LedgerRollup",
    "ProbeRun",
    "Replica",
    "ReplicaIdle",
    "SlurmIngest",
    "SlurmJob",
    "Sweep",
    "SweepPointRecord",
    "UsageRecord",
]
