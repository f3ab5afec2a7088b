"""FOCUS billing ingest (readers, cell repairs, normalisation, file and S3 sources, the
idempotent loader, the report, its HTTP route) and the usage JSONL loader (read in blocks with
Arrow, checked as columns).
"""
