#!/usr/bin/env bash
# Builds, under the exact tags compose.yaml and the Dockerfile name, local stand-ins for the base
# images no registry can give us here: denoland/deno:2.9.6, redis:7.0, postgres:17, traefik:v3.6,
# prom/prometheus:v2.42.0 and grafana/k6:1.8.1. Each is the real program on a Debian root
# filesystem made by mmdebstrap from the machine's apt mirror (bookworm; trixie for PostgreSQL
# 17). Sourced by ./stack
# (`./stack images`, and the compose tests); runnable alone: tools/images/build.sh.
#
# Every image is labelled with a hash of what it was built from, and rebuilt only when that
# changes, so a second run costs seconds. compose.yaml and the project's Dockerfile never change
# to suit these images: they are only test infrastructure.

IMAGES_DIR="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
IMAGE_LABEL=users-pipeline.inputs
# Which Debian suite each root filesystem comes from, and what it carries beyond minbase: tini and
# gosu are the official images' PID 1 and privilege drop; ca-certificates for TLS.
ROOTFS_PACKAGES=ca-certificates,tini,gosu

images_note() { printf '==> %s\n' "$*" >&2; }

# The label value of an image, or nothing when there is no such image.
image_inputs() {
  docker image inspect -f "{{ index .Config.Labels \"$IMAGE_LABEL\" }}" "$1" 2>/dev/null || true
}

# users-pipeline/rootfs:<suite>: a minbase Debian root filesystem imported as an image.
build_rootfs() {
  local suite=$1 inputs tmp started=$SECONDS
  inputs=$(printf '%s %s %s' "$suite" "$ROOTFS_PACKAGES" "$(images_mirror)" | sha256sum | cut -c1-16)
  if [[ $(image_inputs "users-pipeline/rootfs:$suite") == "$inputs" ]]; then return 0; fi
  if ! command -v mmdebstrap >/dev/null; then apt_install mmdebstrap; fi
  images_note "building a Debian $suite root filesystem with mmdebstrap (30 s to 2 min)"
  tmp=$(mktemp -d)
  with_progress "running mmdebstrap $suite" mmdebstrap --variant=minbase \
    --include="$ROOTFS_PACKAGES" "$suite" "$tmp/rootfs.tar" "$(images_mirror)"
  docker import --change "LABEL $IMAGE_LABEL=$inputs" "$tmp/rootfs.tar" \
    "users-pipeline/rootfs:$suite" >/dev/null
  rm -rf "$tmp"
  images_note "imported users-pipeline/rootfs:$suite in $((SECONDS - started))s"
}

# The Debian mirror the machine's apt already uses.
images_mirror() {
  local uri
  uri=$(sed -n 's/^URIs:[[:space:]]*\(http[^ ]*debian\)\/\{0,1\}$/\1/p' \
    /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
  if [[ -z $uri ]]; then
    uri=$(awk '$1 == "deb" && $2 ~ /debian\/?$/ { print $2; exit }' /etc/apt/sources.list \
      2>/dev/null)
  fi
  echo "${uri:-http://deb.debian.org/debian}"
}

# build_standin <tag> <name>: tools/images/<name>.Dockerfile with its entrypoint script and the
# files named after it (binaries, CA certificates) as the build context.
build_standin() {
  local tag=$1 name=$2 files=("${@:3}") context inputs
  context=$(mktemp -d)
  cp "$IMAGES_DIR/$name.Dockerfile" "$context/Dockerfile"
  if [[ -f $IMAGES_DIR/$name-entrypoint.sh ]]; then
    cp "$IMAGES_DIR/$name-entrypoint.sh" "$context/"
  fi
  local file
  for file in "${files[@]}"; do cp -rL "$file" "$context/"; done
  inputs=$( (cd "$context" && find . -type f -print0 | sort -z | xargs -0 sha256sum
    docker image inspect -f '{{.Id}}' "users-pipeline/rootfs:bookworm" \
      "users-pipeline/rootfs:trixie" 2>/dev/null) | sha256sum | cut -c1-16)
  if [[ $(image_inputs "$tag") == "$inputs" ]]; then
    rm -rf "$context"
    return 0
  fi
  images_note "building the stand-in for $tag"
  with_progress "building $tag" docker build --label "$IMAGE_LABEL=$inputs" -t "$tag" "$context"
  rm -rf "$context"
}

# Builds every stand-in the project names (a few seconds when nothing changed).
build_standin_images() {
  local started=$SECONDS ca
  build_rootfs bookworm
  build_rootfs trixie
  ca=$(mktemp -d)
  mkdir -p "$ca/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$ca/ca-certificates/" 2>/dev/null || true
  build_standin "denoland/deno:$DENO_VERSION" deno "$(readlink -f "$(command -v deno)")" \
    "$ca/ca-certificates"
  rm -rf "$ca"
  build_standin redis:7.0 redis
  build_standin postgres:17 postgres
  build_standin traefik:v3.6 traefik "$TOOLS_BIN/traefik"
  build_standin prom/prometheus:v2.42.0 prometheus
  build_standin "grafana/k6:${K6_VERSION#v}" k6 "$(command -v k6)"
  images_note "stand-in images ready in $((SECONDS - started))s"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -euo pipefail
  # shellcheck source=../stack/install_tools.sh
  source "$IMAGES_DIR/../stack/install_tools.sh"
  ensure_deno
  ensure_k6
  ensure_traefik
  build_standin_images
fi
