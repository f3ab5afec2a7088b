"""Usage records: storing them idempotently on event_id, sessions and their costs, and the
usage routes.
"""
