#!/usr/bin/env bash
# Make sure a PostgreSQL server runs on 127.0.0.1:5432 and the test database exists.
# Installs the server from Debian's packages when it is missing (CI on a fresh machine).
set -euo pipefail
DB="${1:-specledger_test}"

if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "PostgreSQL is not installed; installing it from Debian's packages" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
fi
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
    version="$(ls /etc/postgresql | sort -V | tail -1)"
    pg_ctlcluster --skip-systemctl-redirect "$version" main start
    for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi
export PGPASSWORD=postgres
if ! psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1" >/dev/null 2>&1; then
    # A fresh Debian cluster wants a password over TCP: give postgres the one we use.
    runuser -u postgres -- psql -qc "ALTER USER postgres PASSWORD 'postgres'"
fi
if [ "$(psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='$DB'")" != "1" ]; then
    psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE $DB"
fi
echo "postgresql+psycopg://postgres:postgres@127.0.0.1:5432/$DB"
