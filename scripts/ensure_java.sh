#!/usr/bin/env bash
# Make sure a Java 17+ runtime is on PATH for Apache Spark (the ledger's cluster engine, run
# in local mode by the tests). Idempotent and quiet: installs Debian's
# openjdk-17-jre-headless only when no suitable `java` is found.
set -euo pipefail
java_major() {
    java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1
}
if command -v java >/dev/null 2>&1 && [ "$(java_major)" -ge 17 ] 2>/dev/null; then
    exit 0
fi
echo "Java 17 is not installed; installing openjdk-17-jre-headless from Debian's packages" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null 2>&1; then
    $SUDO apt-get update -qq >/dev/null
    $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi
command -v java >/dev/null
