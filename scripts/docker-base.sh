#!/usr/bin/env bash
# Build a base image for docker/Dockerfile without a container registry:
# Debian bookworm (debootstrap, minbase) with Python 3.11 in a venv at /python/venv,
# user `app` (uid 49999) and WORKDIR /app, the layout of Flower's superexec image.
#
#   scripts/docker-base.sh [TAG]          # default flowerbed-base:bookworm
#
# Needs root, debootstrap and a running Docker daemon. The root file system is kept as
# a tarball in the cache folder, so a second build only imports it (seconds).
# Environment: DOCKER (client, default `docker`), FLOWERBED_DOCKER_CACHE (default
# .flowerbed-cache/docker), DEBIAN_MIRROR (default: the host's apt mirror, else
# debootstrap's own default).
set -euo pipefail
cd "$(dirname "$0")/.."

TAG="${1:-flowerbed-base:bookworm}"
DOCKER="${DOCKER:-docker}"
CACHE="${FLOWERBED_DOCKER_CACHE:-$PWD/.flowerbed-cache/docker}"
TARBALL="$CACHE/base-bookworm-rootfs.tar.gz"
SUITE=bookworm   # Python 3.11, the version flowerbed requires
APP_UID=49999

# The first Debian mirror the host's apt uses (deb822 .sources or one-line lists).
host_mirror() {
  local files=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources)
  { cat "${files[@]}" 2>/dev/null || true; } | awk '
    /^URIs:/ && $2 ~ /\/debian\/?$/ { print $2; exit }
    /^deb / { for (i = 2; i <= NF; i++) if ($i ~ /^https?:.*\/debian\/?$/) { print $i; exit } }'
}

# Unmount whatever is still mounted below $1 (deepest first), then remove it.
remove_tree() {
  local mounts
  mounts=$(awk -v p="$1/" 'index($2, p) == 1 { print $2 }' /proc/mounts | sort -r)
  for m in $mounts; do umount -l "$m" || true; done
  rm -rf --one-file-system "$1"
}

make_rootfs() {
  [ "$(id -u)" = 0 ] || { echo "docker-base: debootstrap needs root" >&2; exit 1; }
  command -v debootstrap >/dev/null || { echo "docker-base: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
  local mirror
  ROOTFS=$(mktemp -d -t flowerbed-rootfs.XXXXXX)
  trap 'remove_tree "$ROOTFS"; rm -f "$ROOTFS.log"' EXIT
  local rootfs="$ROOTFS"
  mirror="${DEBIAN_MIRROR:-$(host_mirror)}"
  echo "docker-base: debootstrap $SUITE ${mirror:-(debootstrap default mirror)}"
  # shellcheck disable=SC2086  # an empty mirror is left out on purpose
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$SUITE" "$rootfs" $mirror >"$rootfs.log" 2>&1 \
    || { tail -20 "$rootfs.log" >&2; exit 1; }
  chroot "$rootfs" python3 -m venv /python/venv
  chroot "$rootfs" useradd --uid "$APP_UID" --user-group --create-home --home-dir /home/app app
  mkdir -p "$rootfs/app"
  chroot "$rootfs" chown -R app:app /python /app
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  mkdir -p "$CACHE"
  tar -C "$rootfs" --numeric-owner -czf "$TARBALL.part" .
  mv "$TARBALL.part" "$TARBALL"
}

if "$DOCKER" image inspect "$TAG" >/dev/null 2>&1; then
  echo "docker-base: $TAG exists"
  exit 0
fi
[ -f "$TARBALL" ] || make_rootfs
"$DOCKER" import \
  --change 'ENV PATH=/python/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'USER app' --change 'WORKDIR /app' --change 'CMD ["/bin/bash"]' \
  "$TARBALL" "$TAG" >/dev/null
echo "docker-base: $TAG imported from $TARBALL"
