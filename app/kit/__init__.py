"""Kit shared by the features: bulk inserts and PostgreSQL binary COPY, epoch times, HTTP
parameters, CSV/Parquet responses, shared schemas.
"""
