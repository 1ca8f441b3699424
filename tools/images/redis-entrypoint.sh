#!/bin/sh
# As the official redis image's entrypoint: flags go to redis-server, and the server drops root
# for the redis user after making /data its own.
set -e
if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then set -- redis-server "$@"; fi
if [ "$1" = redis-server ] && [ "$(id -u)" = 0 ]; then
  chown -R redis:redis /data
  exec gosu redis "$@"
fi
exec "$@"
