"""Allocation: billing rows split to requests, idle time, shared rows and teams, written as a run
of ledger entries.

The allocation is one relational plan (Ibis) that runs on embedded DuckDB (SQL compiled once) or
Spark (PySpark); its inputs are read as Arrow tables from the database, or by the engine from
Parquet. A feature like the others: its service takes the caller's Session, with a repository,
a router and schemas.
"""
