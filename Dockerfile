# syntax=docker/dockerfile:1
# Build a static binary, then ship it alone on a distroless base: no shell,
# no package manager, a non-root user.

FROM rust:1.95-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools=1.2.3-1 \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
RUN cargo build --release --locked --target x86_64-unknown-linux-musl \
 && cp target/x86_64-unknown-linux-musl/release/prefill-guard /prefill-guard

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /prefill-guard /usr/local/bin/prefill-guard
COPY config/prefill-guard.toml /etc/prefill-guard/prefill-guard.toml
USER 65532:65532
# 8000: the proxy (HTTP/1.1 and h2c). 9000: /metrics, /healthz, /readyz.
EXPOSE 8000 9000
# The guard drains in-flight requests (streams included) on SIGTERM.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/prefill-guard"]
CMD ["serve", "--config", "/etc/prefill-guard/prefill-guard.toml"]
