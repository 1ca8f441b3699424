#!/bin/sh
# Starts Traefik on its static configuration (/etc/traefik/$TRAEFIK_CONFIG) with this deployment's
# name written into the provider's constraint, so that Traefik routes only to this compose
# project's (or this Swarm stack's) API replicas. Without it, two projects on one engine would
# balance over each other's replicas: each labels its own traefik.enable=true.
#
# Traefik takes its static configuration from one source only (a file, flags or environment
# variables, never a mix), and a file has no variables, so the name is filled in here.
set -eu

source_file="/etc/traefik/${TRAEFIK_CONFIG:-traefik.yml}"
target_file=/tmp/traefik.yml

# fill PLACEHOLDER VARIABLE: the value of VARIABLE in place of @PLACEHOLDER@, which must then be set.
fill() {
  placeholder=$1 variable=$2
  eval "value=\${$variable:-}"
  if grep -q "@$placeholder@" "$target_file"; then
    case "$value" in
      '' | *[!A-Za-z0-9_.-]*)
        echo "start.sh: $variable must be the deployment's name for @$placeholder@ in $source_file; got '$value'" >&2
        exit 1
        ;;
    esac
    sed -i "s/@$placeholder@/$value/g" "$target_file"
  fi
}

cp "$source_file" "$target_file"
# compose interpolates the project's name; Swarm fills its template with the stack's (compose.yaml).
fill COMPOSE_PROJECT TRAEFIK_COMPOSE_PROJECT
fill STACK_NAMESPACE TRAEFIK_STACK_NAMESPACE
exec traefik --configFile="$target_file"
