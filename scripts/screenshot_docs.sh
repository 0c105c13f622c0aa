#!/usr/bin/env bash
# Screenshot the built documentation site with headless Chromium, to look at it as a reader would.
# Usage: scripts/screenshot_docs.sh [OUT_DIR] [PAGE ...]
#   OUT_DIR  where the PNGs go (default: docs/_build/screenshots)
#   PAGE     pages of docs/_build/html to shoot, without .html (default: the home page,
#            a tutorial, a reference page and a method page)
# Build the site first (`make docs`). Needs Debian's chromium (`apt-get install chromium`).
set -euo pipefail
cd "$(dirname "$0")/.."

html="docs/_build/html"
out="${1:-docs/_build/screenshots}"
shift || true
pages=("$@")
if [ ${#pages[@]} -eq 0 ]; then
  pages=(index tutorial-quickstart ref-partition methods/fedspa)
fi
[ -f "$html/index.html" ] || { echo "no built site in $html: run make docs first" >&2; exit 2; }
browser="$(command -v chromium || command -v chromium-browser || true)"
[ -n "$browser" ] || { echo "chromium not found: apt-get install chromium" >&2; exit 2; }

mkdir -p "$out"
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
for page in "${pages[@]}"; do
  file="$html/$page.html"
  [ -f "$file" ] || { echo "no page $file" >&2; exit 2; }
  png="$out/${page//\//_}.png"
  "$browser" --headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-component-update --no-first-run --user-data-dir="$profile" \
    --hide-scrollbars --window-size=1280,1600 --screenshot="$png" \
    "file://$PWD/$file" >/dev/null 2>&1
  echo "wrote $png"
done
