"""Runtime configuration, read from ``SPECLEDGER_*`` environment variables.

Settings are passed in, never imported at module level: entry points call
:func:`get_settings`, everything else takes a :class:`Settings` argument.
"""

from functools import lru_cache
from pathlib import Path
from typing import Literal

from platformdirs import user_data_path
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Runtime configuration. Every field is settable as ``SPECLEDGER_<NAME>``."""

    model_config = SettingsConfigDict(
        env_prefix="SPECLEDGER_", env_file=".env", extra="ignore", frozen=True
    )

    env: Literal["dev", "test", "prod"] = Field(
        "dev", description="Deployment environment: dev, test or prod."
    )
    data_dir: Path = Field(
        default_factory=lambda: user_data_path("specledger"),
        description="Folder for the embedded database, engine configs and logs, model cache "
        "and exports. Default: the platform's user data folder (~/.local/share/specledger on "
        "Linux); a relative path is taken from the folder the command starts in.",
    )
    database_url: str = Field(
        default_factory=lambda data: _sqlite_url(data["data_dir"]),
        description="SQLAlchemy URL: a SQLite file (default: specledger.db in the data dir) or "
        "postgresql+psycopg://user@host/db.",
    )
    s3_endpoint_url: str | None = Field(
        None,
        description="S3 endpoint for billing exports (an S3-compatible server); unset means AWS.",
    )
    billing_tag_key: str = Field(
        "specledger-deployment",
        description="FOCUS tag key whose value names the deployment a billing row belongs to.",
    )
    ledger_engine: Literal["duckdb", "spark"] = Field(
        "duckdb",
        description="Engine that runs the allocation plan: duckdb (embedded, no server) or "
        "spark (Apache Spark; needs Java 17 and the spark extra).",
    )
    ledger_memory_limit: str = Field(
        "2GB",
        description="DuckDB's memory limit for the allocation plan (it spills to disk beyond "
        "it): a few GB per thread is enough for any month.",
    )
    ledger_store: str | None = Field(
        None,
        description="Where usage records and ledger entries live at scale: a folder or "
        "s3://bucket/prefix of hive-partitioned Parquet (the database keeps runs, closures "
        "and rollups). Unset: everything in the database.",
    )
    spark_master: str = Field(
        "local[2]",
        description="Spark master URL when ledger_engine is spark: local[N] or spark://host:7077.",
    )
    spark_partitions: int = Field(
        8,
        ge=1,
        description="Spark shuffle partitions: a few in local mode, a few per core on a cluster.",
    )
    default_currency: str = Field(
        "USD", description="Currency used when a figure has no billing row to take one from."
    )

    @field_validator("data_dir")
    @classmethod
    def _absolute(cls, data_dir: Path) -> Path:
        # A relative folder would follow the working directory, so a command run from
        # elsewhere would silently open another, empty database.
        return data_dir.expanduser().absolute()

    @property
    def engines_dir(self) -> Path:
        """Engine configs, state files and logs."""
        return self.data_dir / "engines"

    @property
    def models_dir(self) -> Path:
        """Prepared models (the target and its drafts)."""
        return self.data_dir / "models"


def _sqlite_url(data_dir: Path) -> str:
    return f"sqlite+pysqlite:///{data_dir / 'specledger.db'}"


@lru_cache
def get_settings() -> Settings:
    """Settings from the environment; for entry points only (CLI, uvicorn factory)."""
    return Settings()
