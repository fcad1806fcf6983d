# The slipway image: one binary, every component (`slipway api|operator|webhook|edge|...`), on Debian with what
# the components need at run time: git (the API runs upload-pack and receive-pack), the Postgres client tools
# (database snapshots) and CA certificates. The Helm chart runs it as uid 65532 with a read-only root filesystem.
#
#   docker build -t <registry>/slipway/slipway:<tag> .
#
# Machines without a container registry build the same image with hack/slipway-image.sh (Debian packages and a
# locally built binary, no pull).

FROM docker.io/library/rust:1.95-slim-trixie AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin slipway

FROM docker.io/library/debian:trixie-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends git postgresql-client ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && echo 'slipway:x:65532:65532:slipway:/tmp:/usr/sbin/nologin' >>/etc/passwd \
 && echo 'slipway:x:65532:' >>/etc/group
COPY --from=build /src/target/release/slipway /usr/local/bin/slipway
# glibc gives threads that allocate at once arenas of their own, up to eight per core, and memory freed in one is
# not reused by another: two keep a component's memory near its settled size under load (at 10,000 channels with
# deploys churning, the api and operator together held about 60 MiB less), at no measured cost in latency.
ENV HOME=/tmp MALLOC_ARENA_MAX=2
USER 65532:65532
ENTRYPOINT ["slipway"]
CMD ["--help"]
