#!/usr/bin/env bash
# The wheelhouse for an offline image build: every package docker/Dockerfile installs,
# resolved on this host with pip's own configuration, laid out as a PEP 503 index.
#
#   scripts/docker-wheels.sh [OUT]      # default .flowerbed-cache/docker/wheels
#
# Serve it on loopback and build with it (what `make docker-test` does):
#   python3 -m http.server --bind 127.0.0.1 --directory OUT 8765 &
#   docker build --network host -f docker/Dockerfile \
#     --build-arg PIP_INDEX=http://127.0.0.1:8765/simple/ \
#     --build-arg TORCH_INDEX=http://127.0.0.1:8765/simple/ ...
# Environment: PYTHON (a Python 3.11 with pip; default .venv/bin/python, else python3),
# TORCH_SPEC (the torch requirement; default the pin in pyproject.toml). Re-running with
# the same requirements does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${1:-$PWD/.flowerbed-cache/docker/wheels}"
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || command -v python3 )}"
mkdir -p "$OUT"
reqs="$OUT/requirements.txt"
{
  "$PY" docker/image_requirements.py pyproject.toml torch "${TORCH_SPEC:-}"
  "$PY" docker/image_requirements.py pyproject.toml rest
} >"$reqs.new"
if cmp -s "$reqs.new" "$reqs" && [ -d "$OUT/simple" ]; then
  rm "$reqs.new"
  echo "docker-wheels: $OUT is up to date ($(ls "$OUT/files" | wc -l) wheels)"
  exit 0
fi
rm -rf "$OUT/files" "$OUT/simple" "$reqs"
"$PY" -m pip wheel --quiet --progress-bar off --wheel-dir "$OUT/files" -r "$reqs.new"
"$PY" - "$OUT" <<'PYEOF'
import html
import re
import sys
from collections import defaultdict
from pathlib import Path

out = Path(sys.argv[1])
projects = defaultdict(list)
for wheel in sorted((out / "files").glob("*.whl")):
    name = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
    projects[name].append(wheel.name)
for name, files in projects.items():
    page = out / "simple" / name / "index.html"
    page.parent.mkdir(parents=True)
    links = "".join(
        f'<a href="../../files/{html.escape(f)}">{html.escape(f)}</a><br>\n' for f in files
    )
    page.write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
print(f"docker-wheels: {sum(map(len, projects.values()))} wheels, {len(projects)} projects")
PYEOF
mv "$reqs.new" "$reqs"
