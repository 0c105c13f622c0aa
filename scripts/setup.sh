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

stamp=".venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
if [ -f "$stamp" ]; then
  exit 0
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# torch/torchvision are pinned in pyproject.toml; pip takes the CPU-friendly
# wheels available locally or from the registry.
.venv/bin/python -m pip install --quiet --progress-bar off -e '.[all,dev]'

# Fashion-MNIST comes from Debian's dataset-fashion-mnist package where apt exists.
if dpkg -s dataset-fashion-mnist >/dev/null 2>&1; then
  :
elif command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist >/dev/null) \
    || echo "note: could not install dataset-fashion-mnist; the fashion_mnist dataset will be unavailable"
else
  echo "note: apt-get not available (or not root); skipping dataset-fashion-mnist (fashion_mnist dataset unavailable)"
fi

rm -f .venv/.installed-*
touch "$stamp"
