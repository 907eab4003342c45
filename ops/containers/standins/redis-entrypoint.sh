#!/bin/sh
# As the official image: `redis-server ARGS` runs with protected mode off, as the redis user
# (started as root, it drops to that user; started as another, it stays).
set -e
if [ "$1" = "redis-server" ]; then
  shift
  if [ "$(id -u)" = 0 ]; then
    exec setpriv --reuid=redis --regid=redis --init-groups redis-server --protected-mode no "$@"
  fi
  exec redis-server --protected-mode no "$@"
fi
exec "$@"
