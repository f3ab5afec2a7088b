#!/usr/bin/env bash
# Make sure Debian's headless-capable Chromium is at /usr/bin/chromium, for the dashboard
# browser tests (tests/dashboards/test_browser.py drives it with Playwright). Idempotent and
# quiet: does nothing when it is already installed. Never runs `playwright install`.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
echo "chromium is not installed; installing it from Debian's packages" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y -qq chromium >/dev/null 2>&1; then
    $SUDO apt-get update -qq >/dev/null
    $SUDO apt-get install -y -qq chromium >/dev/null
fi
test -x /usr/bin/chromium
