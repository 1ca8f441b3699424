#!/bin/sh
# As the official traefik image's entrypoint: flags and subcommands go to traefik.
set -e
if [ "${1#-}" != "$1" ]; then set -- traefik "$@"; fi
if traefik "$1" --help >/dev/null 2>&1 && [ "$1" != traefik ]; then set -- traefik "$@"; fi
exec "$@"
