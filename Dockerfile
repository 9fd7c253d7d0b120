# A small image of strata: built with the workspace's oldest supported
# toolchain (Cargo.toml's rust-version, checked by `make msrv`), run on
# Debian's slim image as a non-root user.
#
#   docker build -t strata .
#   docker run --rm -p 11211:11211 -v strata-state:/var/lib/strata \
#       --stop-timeout 120 strata -m 1024     # any of strata's flags
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
USER strata
# The snapshot (and a flash file, -o ext_path=/var/lib/strata/flash:SIZE).
VOLUME /var/lib/strata
EXPOSE 11211
# strata saves the snapshot on SIGTERM (Docker's default, stated here as
# the contract the save relies on).
STOPSIGNAL SIGTERM
# Inside a container the loopback default would be unreachable from outside.
ENTRYPOINT ["/usr/local/bin/strata", "-l", "0.0.0.0", "--snapshot-dir", "/var/lib/strata"]
