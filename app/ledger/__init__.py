"""The ledger: reading the runs that allocation wrote (unit costs, reconciliation, chargeback
and the FOCUS export, closing and verifying months), from the database or a Parquet store.
"""
