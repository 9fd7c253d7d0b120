# A small image of strata: built with the project's toolchain, run on
# Debian's slim image as a non-root user.
#
#   docker build -t strata .
#   docker run --rm -p 11211:11211 strata            # -m 64, all interfaces
#   docker run --rm -p 11211:11211 strata -m 1024    # any of strata's flags

FROM rust:1.80-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p strata --bin strata

FROM debian:bookworm-slim
RUN useradd --system --no-create-home --shell /usr/sbin/nologin strata
COPY --from=build /src/target/release/strata /usr/local/bin/strata
USER strata
EXPOSE 11211
# Inside a container the loopback default would be unreachable from outside.
ENTRYPOINT ["/usr/local/bin/strata", "-l", "0.0.0.0"]
