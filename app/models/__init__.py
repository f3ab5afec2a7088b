"""ORM models; importing this package registers every table on ``Base.metadata``."""

from app.models.billing import BillingDelivery, BillingRow
from app.models.deployment import Deployment, Replica
from app.models.sweep import Sweep, SweepPointRecord
from app.models.usage import ReplicaIdle, UsageRecord

__all__ = ["BillingDelivery", "BillingRow", "Deployment", "Replica", "ReplicaIdle", "Sweep",
           "SweepPointRecord", "UsageRecord"]
