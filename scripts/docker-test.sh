#!/usr/bin/env bash
# `make docker-test`: the Docker deployment built and run for real, with no registry.
#
#  1. a Docker engine: the running one, else dockerd started here on a private socket
#     and data root (docker.io, docker-compose and debootstrap installed with apt when
#     missing and root); only what was started here is stopped;
#  2. the base image (scripts/docker-base.sh), the wheelhouse (scripts/docker-wheels.sh)
#     served on loopback, and the image from docker/Dockerfile;
#  3. the compose files written by `flowerbed deploy compose`: SuperLink + 2 SuperNodes
#     + 3 SuperExecs, all on that image; the quickstart (2 clients, 1 round) run
#     through them from this host, insecure with the run folder mounted (with-runs.yml),
#     then with TLS (with-tls.yml, the summary comes back through the log);
#  4. the same scenario on plain processes (`flowerbed deploy local`); the three
#     summaries must hold the same numbers;
#  5. everything torn down: containers, networks, the images built here, the engine.
#
# Exit status 77 (with a line saying why) when no Docker engine can be had here.
# Environment: PYTHON (default .venv/bin/python), TORCH_SPEC (default torch==2.13.0,
# a CPU build: see docker/README.md; empty for the pin in pyproject.toml), COMPOSE
# ("docker compose" or "docker-compose"; default the first that works),
# FLOWERBED_DOCKER_CACHE (default .flowerbed-cache/docker: base root file system and
# wheelhouse, kept for the next run), KEEP_WORK=1 (keep the scratch folder and logs).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

PY="${PYTHON:-$ROOT/.venv/bin/python}"
BIN="$(dirname "$PY")"
TORCH_SPEC="${TORCH_SPEC-torch==2.13.0}"
export FLOWERBED_DOCKER_CACHE="${FLOWERBED_DOCKER_CACHE:-$ROOT/.flowerbed-cache/docker}"
SKIP=77
START=$SECONDS
WORK=$(mktemp -d -t fbdock.XXXXXX)
WORK=$(realpath "$WORK")
TAG="fbtest$$"
IMAGE="flowerbed-superexec:$TAG"
BASE="flowerbed-base:$TAG"
DOCKERD_PID=""
ENGINE_TMPFS=""
SERVER_PID=""
PLAIN_PID=""
PROJECTS=()
IMAGES=()
BASE_TARBALL=base-bookworm-rootfs.tar.gz   # as scripts/docker-base.sh names it

say() { printf 'docker-test [%3ds] %s\n' "$((SECONDS - START))" "$*"; }
skip() { say "SKIP: $*"; exit "$SKIP"; }
fail() { say "FAIL: $*"; exit 1; }

# --- 1. engine ----------------------------------------------------------------

can_install() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; }

# apt-get install the Debian packages that are missing (root only).
apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ "${#missing[@]}" = 0 ] && return 0
  say "apt-get install ${missing[*]}"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >"$WORK/apt.log" 2>&1 || { tail -5 "$WORK/apt.log"; return 1; }
}

# The first `docker` client on PATH that builds with BuildKit: one with the buildx
# plugin, or one older than 23 (BuildKit built in), such as Debian's docker.io.
pick_client() {
  local client major
  DOCKER=docker
  for client in $(type -ap docker); do
    major=$("$client" --version 2>/dev/null | sed -n 's/^Docker version \([0-9]*\)\..*/\1/p')
    if "$client" buildx version >/dev/null 2>&1 || [ "${major:-99}" -lt 23 ]; then
      DOCKER=$client
      return 0
    fi
  done
}

engine_up() { "$DOCKER" info >/dev/null 2>&1; }

# dockerd on a socket and data root of its own, no iptables rules, no default bridge
# (compose makes its own network; builds use the host network to reach the index).
# Its folders sit on a tmpfs when one can be mounted: deleting a data root of a few GB
# file by file takes minutes on a busy machine, unmounting takes none.
start_dockerd() {
  local state="$WORK/engine"
  mkdir -p "$state"
  if mount -t tmpfs -o "size=${DOCKER_TMPFS_SIZE:-12g},mode=0700" flowerbed-docker "$state"; then
    ENGINE_TMPFS="$state"
  fi
  say "starting dockerd (state in $state${ENGINE_TMPFS:+, a tmpfs})"
  dockerd --host "unix://$state/docker.sock" --data-root "$state/data" \
    --exec-root "$state/exec" --pidfile "$state/dockerd.pid" --iptables=false \
    --ip-forward=false --ip-masq=false --bridge=none >"$WORK/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  export DOCKER_HOST="unix://$state/docker.sock"
  for _ in $(seq 60); do
    engine_up && return 0
    kill -0 "$DOCKERD_PID" 2>/dev/null || break
    sleep 0.5
  done
  tail -5 "$WORK/dockerd.log" | sed 's/^/  dockerd: /'
  skip "dockerd did not start (log above)"
}

# One apt-get call for what is missing: the engine, a compose, debootstrap (root only).
install_missing() {
  local want=()
  pick_client
  command -v dockerd >/dev/null || engine_up || want+=(docker.io)
  "$DOCKER" compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null \
    || want+=(docker-compose)
  command -v debootstrap >/dev/null || [ -f "$FLOWERBED_DOCKER_CACHE/$BASE_TARBALL" ] \
    || want+=(debootstrap)
  [ "${#want[@]}" = 0 ] || ! can_install || apt_install "${want[@]}" \
    || skip "apt-get could not install ${want[*]}"
  pick_client
}

ensure_engine() {
  if engine_up; then
    say "using the running Docker engine ($("$DOCKER" version -f '{{.Server.Version}}'))"
    return 0
  fi
  command -v dockerd >/dev/null \
    || skip "no Docker engine reachable and dockerd is not installed (root and apt-get install docker.io)"
  [ "$(id -u)" = 0 ] || skip "no Docker engine reachable and starting dockerd needs root"
  start_dockerd
  say "dockerd $("$DOCKER" version -f '{{.Server.Version}}') up (pid $DOCKERD_PID)"
}

# A compose that answers `version`. Debian's docker-compose is a Python program: run
# from inside a virtual environment (PYTHONPATH, PYTHONHOME, a venv's site-packages)
# it can import that environment's requests and fail on Debian's OpenSSL, so it is
# also tried with those variables unset and its interpreter in isolated mode (-I).
ensure_compose() {
  local script interp
  if [ -n "${COMPOSE:-}" ]; then
    read -r -a COMPOSE_CMD <<<"$COMPOSE"
    compose_works || fail "COMPOSE=$COMPOSE does not answer 'version': $COMPOSE_ERR"
  else
    COMPOSE_CMD=("$DOCKER" compose)
    if ! compose_works; then
      script=$(command -v docker-compose) \
        || skip "neither \`docker compose\` nor docker-compose is available"
      COMPOSE_CMD=("$script")
      compose_works || COMPOSE_CMD=(env -u PYTHONPATH -u PYTHONHOME -u PYTHONUSERBASE
        -u PYTHONSTARTUP -u VIRTUAL_ENV "$script")
      if ! compose_works; then
        for interp in "$(sed -n '1s/^#! *\([^ ]*\).*/\1/p' "$script")" /usr/bin/python3.[0-9]*; do
          [ -x "$interp" ] || continue
          COMPOSE_CMD=(env -u PYTHONPATH -u PYTHONHOME -u PYTHONUSERBASE -u PYTHONSTARTUP
            -u VIRTUAL_ENV "$interp" -I "$script")
          compose_works && break
        done
        compose_works || skip "docker-compose is installed but does not run here: $COMPOSE_ERR"
      fi
    fi
  fi
  say "compose: ${COMPOSE_CMD[*]} ($("${COMPOSE_CMD[@]}" version --short 2>/dev/null))"
}

# True when COMPOSE_CMD answers `version`; else COMPOSE_ERR holds its last line.
compose_works() {
  local out
  if out=$("${COMPOSE_CMD[@]}" version --short 2>&1); then
    return 0
  fi
  COMPOSE_ERR=$(printf '%s\n' "$out" | tail -n 1)
  return 1
}

# --- teardown -----------------------------------------------------------------

stop_pid() {
  local pid=$1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  kill -KILL "$pid" 2>/dev/null || true
}

teardown() {
  local status=$?
  set +e
  [ -z "$PLAIN_PID" ] || pkill -TERM -P "$PLAIN_PID"  # its `timeout flowerbed run`
  stop_pid "$PLAIN_PID"
  [ -f "$WORK/plain.pid" ] && stop_pid "$(cat "$WORK/plain.pid")"
  stop_pid "$SERVER_PID"
  for p in "${PROJECTS[@]}"; do compose_down "$p"; done
  for image in "${IMAGES[@]}"; do "$DOCKER" image rm -f "$image" >/dev/null 2>&1; done
  if [ -n "$DOCKERD_PID" ]; then
    stop_pid "$DOCKERD_PID"
    # what dockerd may leave mounted below its folders (network namespaces, overlays)
    awk -v p="$WORK/engine/" 'index($2, p) == 1 { print $2 }' /proc/mounts | sort -r \
      | while read -r m; do umount -l "$m"; done
    [ -z "$ENGINE_TMPFS" ] || umount -l "$ENGINE_TMPFS"
    rm -rf --one-file-system "$WORK/engine"
  fi
  if [ "${KEEP_WORK:-0}" = 1 ] || { [ "$status" != 0 ] && [ "$status" != "$SKIP" ]; }; then
    say "logs kept in $WORK"
  else
    rm -rf --one-file-system "$WORK"
  fi
  say "torn down (exit $status)"
  exit "$status"
}
trap teardown EXIT
trap 'exit 130' INT TERM

# --- 2. images ----------------------------------------------------------------

disk_used() { du -sh --one-file-system "$1" 2>/dev/null | cut -f1; }

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

wait_port() {
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}

build_images() {
  command -v debootstrap >/dev/null || [ -f "$FLOWERBED_DOCKER_CACHE/$BASE_TARBALL" ] \
    || skip "debootstrap is not installed (root and apt-get install debootstrap)"
  DOCKER="$DOCKER" scripts/docker-base.sh "$BASE" | sed 's/^/  /'
  IMAGES+=("$BASE")
  TORCH_SPEC="$TORCH_SPEC" PYTHON="$PY" scripts/docker-wheels.sh "$FLOWERBED_DOCKER_CACHE/wheels" \
    2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2) | sed 's/^/  /'
  local port index
  port=$(free_port)
  "$PY" -m http.server --bind 127.0.0.1 --directory "$FLOWERBED_DOCKER_CACHE/wheels" "$port" \
    >"$WORK/index.log" 2>&1 &
  SERVER_PID=$!
  wait_port "$port" || fail "the wheel index did not start on 127.0.0.1:$port"
  index="http://127.0.0.1:$port/simple/"
  say "building $IMAGE on $BASE (torch: ${TORCH_SPEC:-the pin}; index $index)"
  IMAGES+=("$IMAGE")
  DOCKER_BUILDKIT=1 "$DOCKER" build --network host --progress plain -f docker/Dockerfile \
    --build-arg "BASE_IMAGE=$BASE" --build-arg "PIP_INDEX=$index" \
    --build-arg "TORCH_INDEX=$index" --build-arg "TORCH_SPEC=$TORCH_SPEC" \
    -t "$IMAGE" . >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; fail "image build"; }
  stop_pid "$SERVER_PID"
  SERVER_PID=""
  say "built $IMAGE: $("$DOCKER" image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.2f GB", $1 / 1e9}')"
  say "disk: engine state $(disk_used "$WORK/engine"), cache $(disk_used "$FLOWERBED_DOCKER_CACHE")"
}

# --- 3. compose ---------------------------------------------------------------

compose() {
  local project=$1
  shift
  "${COMPOSE_CMD[@]}" --project-name "$project" --project-directory "$WORK/compose" "$@"
}

compose_down() {
  [ -f "$WORK/$1.compose.log" ] && return 0  # down already
  compose "$1" -f "$WORK/compose/compose.yml" logs --no-color >"$WORK/$1.compose.log" 2>&1
  compose "$1" -f "$WORK/compose/compose.yml" down --volumes --remove-orphans --timeout 10 \
    >/dev/null 2>&1
}

# Bring up project $1 with the compose files $2...; wait for the SuperLink's API.
compose_up() {
  local project=$1 link deadline=$((SECONDS + 120))
  shift
  local files=()
  for f in "$@"; do files+=(-f "$WORK/compose/$f"); done
  PROJECTS+=("$project")
  compose "$project" "${files[@]}" up --detach --no-build >"$WORK/$project.up.log" 2>&1 \
    || { cat "$WORK/$project.up.log"; fail "compose up $project"; }
  link=$(compose "$project" "${files[@]}" ps -q superlink)
  while [ $SECONDS -lt $deadline ]; do
    "$DOCKER" logs "$link" 2>&1 | grep -q 'Uvicorn running on' && return 0
    [ "$("$DOCKER" inspect -f '{{.State.Running}}' "$link")" = true ] || break
    sleep 1
  done
  "$DOCKER" logs --tail 20 "$link" 2>&1 | sed 's/^/  superlink: /'
  fail "the SuperLink of $project did not come up"
}

# Run the quickstart on connection $1 (of $FLWR_HOME) into the output folder $2.
quickstart() {
  say "quickstart on $1"
  timeout 900 "$BIN/flowerbed" run scenarios/quickstart.yaml --set engine=deployment \
    --set "engine.connection=$1" --set "engine.flwr_home=$FLWR_HOME" --set num_clients=2 \
    --set rounds=1 --set "output_dir=$2" >"$WORK/$1.run.log" 2>&1 \
    || { tail -40 "$WORK/$1.run.log"; fail "quickstart on $1"; }
  say "quickstart on $1 done"
}

# Write connection $1 to 127.0.0.1:$2 in $FLWR_HOME (TLS when a CA file $3 is given).
connection() {
  "$PY" -c 'import sys; from flowerbed.platform.deploy.connections import write_connection
write_connection(sys.argv[1], sys.argv[2], root_certificates=(sys.argv[3:] or [None])[0])' \
    "$1" "127.0.0.1:$2" "${@:3}" >/dev/null
}

# The quickstart through compose, insecure with the run folder mounted, then with TLS.
run_docker() {
  "$BIN/flowerbed" deploy compose --nodes 2 --out "$WORK/compose" --certs "$WORK/certs" >/dev/null
  bash docker/make-certs.sh "$WORK/certs" >/dev/null
  # the SuperLink runs as `app` (uid 49999, as in Flower's images) and must read its key
  chown 49999:49999 "$WORK/certs/server.key" 2>/dev/null || chmod 0644 "$WORK/certs/server.key"
  export SUPERLINK_IMAGE="$IMAGE" SUPERNODE_IMAGE="$IMAGE" SUPEREXEC_IMAGE="$IMAGE"
  export FLOWERBED_RUNS="$WORK/runs" FLOWERBED_RUNS_USER="$(id -u):$(id -g)"
  mkdir -p "$FLOWERBED_RUNS"
  SUPERLINK_PORT=$(free_port)
  export SUPERLINK_PORT
  compose_up "${TAG}a" compose.yml with-runs.yml
  connection docker "$SUPERLINK_PORT"
  quickstart docker "$FLOWERBED_RUNS/docker"
  compose_down "${TAG}a"
  SUPERLINK_PORT=$(free_port)
  compose_up "${TAG}b" compose.yml with-tls.yml
  connection docker-tls "$SUPERLINK_PORT" "$WORK/certs/ca.crt"
  quickstart docker-tls "$WORK/runs-tls"
  compose_down "${TAG}b"
}

# --- 4. plain processes and the comparison ------------------------------------

# The quickstart on plain processes, in its own FLWR_HOME; run in the background while
# the images build (it needs no engine), its deploy-local pid in $WORK/plain.pid.
run_plain() {
  local deploy
  FLWR_HOME="$WORK/flwr-home-plain"
  "$BIN/flowerbed" deploy local --nodes 2 --connection plain --flwr-home "$FLWR_HOME" \
    --state-dir "$WORK/plain-state" >"$WORK/plain.deploy.log" 2>&1 &
  deploy=$!
  echo "$deploy" >"$WORK/plain.pid"
  for _ in $(seq 240); do
    grep -q "written to" "$WORK/plain.deploy.log" && break
    kill -0 "$deploy" 2>/dev/null || { cat "$WORK/plain.deploy.log"; fail "deploy local"; }
    sleep 0.5
  done
  quickstart plain "$WORK/runs-plain"
  stop_pid "$deploy"
}

check() {
  local python
  python=$("$DOCKER" run --rm --network none --entrypoint python "$IMAGE" -c \
    'import platform; print(platform.python_version())')
  "$PY" - "$WORK" "$python" <<'PYEOF'
import json
import sys
from pathlib import Path

work, image_python = Path(sys.argv[1]), sys.argv[2]


def run_folder(root: Path) -> Path:
    (folder,) = (root / "quickstart").iterdir()
    return folder


mounted = run_folder(work / "runs" / "docker")
missing = [
    name for name in ("summary.json", "metrics.jsonl", "client_metrics.jsonl",
                      "scenario.resolved.yaml")
    if not (mounted / name).is_file()
]
assert not missing, f"{mounted} lacks {missing}"
summaries = {
    "docker": json.loads((mounted / "summary.json").read_text()),
    "docker-tls": json.loads((run_folder(work / "runs-tls") / "summary.json").read_text()),
    "plain": json.loads((run_folder(work / "runs-plain") / "summary.json").read_text()),
}
for name in ("docker", "docker-tls"):
    ran = summaries[name]["versions"]["python"]
    assert ran == image_python, f"{name}: ServerApp ran on Python {ran}, the image has {image_python}"
reference = summaries["plain"]["results"]
for name, summary in summaries.items():
    results = summary["results"]
    print(f"  {name:10s} federated {results['federated']}")
    assert results == reference, f"{name} differs from plain processes:\n{results}\n{reference}"
print(f"  equal results in all three; ServerApp in the image (Python {image_python})")
PYEOF
}

# --- main -----------------------------------------------------------------------

[ -x "$PY" ] || fail "no Python at $PY (run scripts/setup.sh, or set PYTHON)"
export FLWR_HOME="$WORK/flwr-home" FLWR_TELEMETRY_ENABLED=0
install_missing
ensure_engine
ensure_compose
run_plain &
PLAIN_PID=$!
build_images
run_docker
wait "$PLAIN_PID" || fail "the quickstart on plain processes (logs in $WORK)"
PLAIN_PID=""
check
say "PASS"
