"""ORM models; importing this package registers every table on ``Base.metadata``."""

from app.models.billing import BillingDelivery, BillingRow

__all__ = ["BillingDelivery", "BillingRow"]
