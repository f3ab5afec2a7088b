"""Alembic migrations: one set for SQLite and PostgreSQL, shipped with the package so that
an installed specledger can migrate (``specledger db upgrade``)."""
