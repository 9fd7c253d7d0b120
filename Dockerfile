# A small image of strata: built with the workspace's oldest supported
# toolchain (Cargo.toml's rust-version, checked by `make msrv`), run on
# Debian's slim image as a non-root user.
#
#   docker build -t strata .
#   docker run --rm -p 11211:11211 -p 9150:9150 -v strata-state:/var/lib/strata \
#       --stop-timeout 120 strata -m 1024     # any of strata's flags
#
# A bind mount works as well as a named volume (-v /srv/strata:/var/lib/strata):
# the entrypoint (dist/docker/entrypoint.sh) starts as root, makes the
# directory the strata user's, and runs strata as that user. Prometheus
# metrics on port 9150 (STRATA_METRICS= turns them off); a health check
# sends `version` to port 11211 (STRATA_PORT if strata listens elsewhere).
#
# The cache is saved to the volume /var/lib/strata when the container stops
# (SIGTERM) and loaded when one starts on it. Docker kills a container 10 s
# after the stop signal unless told otherwise: give a large cache's save
# time (--stop-timeout, compose's stop_grace_period; docs/install.md).

FROM rust:1.88-slim-bookworm AS build
WORKDIR /src
COPY . .
# Without the debug line tables the release profile keeps for profiling:
# 31 MB -> 5 MB (the symbol table stays, for backtraces).
ENV CARGO_PROFILE_RELEASE_STRIP=debuginfo
RUN cargo build --release --locked -p strata --bin strata

FROM debian:bookworm-slim
RUN useradd --system --no-create-home --shell /usr/sbin/nologin strata \
    && install -d -o strata -g strata -m 0750 /var/lib/strata
COPY --from=build /src/target/release/strata /usr/local/bin/strata
COPY dist/docker/entrypoint.sh /usr/local/bin/strata-entrypoint
# No USER: the entrypoint starts as root only to hand the state directory
# (a bind mount may be a host user's) to strata, then drops to that user
# (setpriv); strata itself never runs as root.
# The snapshot (and a flash file, -o ext_path=/var/lib/strata/flash:SIZE).
VOLUME /var/lib/strata
# memcached's port; Prometheus metrics (memcached_exporter's port).
EXPOSE 11211 9150
# strata saves the snapshot on SIGTERM (Docker's default, stated here as
# the contract the save relies on).
STOPSIGNAL SIGTERM
# Serving once `version` is answered. A large snapshot's load comes first:
# the start period allows five minutes of it.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5m --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${STRATA_PORT:-11211} && printf 'version\\r\\n' >&3 && IFS= read -r -t 2 line <&3 && [[ $line == VERSION* ]]"]
# Inside a container the loopback default would be unreachable from
# outside: -l 0.0.0.0, --snapshot-dir /var/lib/strata, --metrics-listen.
ENTRYPOINT ["/usr/local/bin/strata-entrypoint"]
