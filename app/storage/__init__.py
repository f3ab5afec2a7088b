"""The ledger's storage, below the features: the Parquet dataset store, the usage files, the
reader of a month's ledger entries and the allocation runs' repository."""
