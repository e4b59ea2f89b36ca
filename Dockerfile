# syntax=docker/dockerfile:1
#
# The announcer image: `announcer agent` for the DaemonSet (and the CLI: `announcer status`,
# `announcer load`, ...). Build from the repository root:
#
#   docker build -t registry.example.com/announcer:0.1.0 .
#
# The builder uses the same toolchain as `cargo xtask setup` (see xtask/src/setup.rs): Debian's
# rustc-web / rust-web-src / cargo-web (rustc >= 1.95 with the `core` sources the eBPF crate's
# `-Z build-std=core` needs) and bpf-linker 0.10.0. There is no rustup in the image, so
# aya-build compiles the XDP program with that same Debian toolchain.

ARG DEBIAN=bookworm

FROM debian:${DEBIAN} AS builder
ARG DEBIAN
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      rustc-web rust-web-src cargo-web gcc libc6-dev ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && rustc --version \
 && test -d /usr/lib/rustlib/src/rust/library/core
ENV CARGO_HOME=/usr/local/cargo \
    PATH=/usr/local/cargo/bin:$PATH
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    cargo install bpf-linker --version 0.10.0
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p announcer --bin announcer \
 && install -D -m 0755 target/release/announcer /out/announcer

FROM debian:${DEBIAN}-slim
LABEL org.opencontainers.image.title="announcer" \
      org.opencontainers.image.description="Layer-2 announcer for Kubernetes LoadBalancer IPs (XDP ARP/NDP responder)" \
      org.opencontainers.image.source="https://github.com/announcer-dev/announcer" \
      org.opencontainers.image.licenses="MIT OR Apache-2.0"
COPY --from=builder /out/announcer /usr/local/bin/announcer
# The agent runs as root with only CAP_BPF, CAP_NET_ADMIN, CAP_NET_RAW and CAP_PERFMON (set in
# deploy/daemonset.yaml). Its only writable paths are the host's /sys/fs/bpf and
# /var/lib/announcer (its per-node heartbeat identity); the root filesystem is read-only.
ENTRYPOINT ["/usr/local/bin/announcer"]
CMD ["--help"]
