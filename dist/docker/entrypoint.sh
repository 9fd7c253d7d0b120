#!/bin/sh
# The container's entrypoint (Dockerfile): strata with the image's
# defaults, run as an unprivileged user whose state directory it can write.
#
# Started as root (the default), it makes the state directory (a named
# volume, or a bind mount of a host directory owned by a host user, which
# the strata user could not write) the strata user's, then drops to that
# user. Started as another user (docker run --user), it runs strata as
# that user; a directory it cannot write makes strata refuse to start
# (exit 73, with the path), as it does outside a container.
#
# Flags given to `docker run IMAGE ...` follow the image's: -l 0.0.0.0,
# --snapshot-dir, and --metrics-listen 0.0.0.0:9150 (memcached_exporter's
# port) unless STRATA_METRICS is set empty. The environment variables are
# for tests and unusual images: the defaults are the image's.
set -eu
bin=${STRATA_BIN:-/usr/local/bin/strata}
state=${STRATA_STATE:-/var/lib/strata}
user=${STRATA_USER:-strata}
metrics=${STRATA_METRICS-0.0.0.0:9150}

if [ -n "$metrics" ]; then
    set -- --metrics-listen "$metrics" "$@"
fi
set -- -l "${STRATA_LISTEN:-0.0.0.0}" --snapshot-dir "$state" "$@"

if [ "$(id -u)" != 0 ]; then
    exec "$bin" "$@"
fi
mkdir -p "$state"
# The directory and what strata keeps in it (the snapshot, its temporary
# file, the log, a flash file), not the rest of a bind-mounted tree.
find "$state" -maxdepth 1 ! -user "$user" -exec chown "$user:" {} +
exec setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups "$bin" "$@"
