# syntax=docker/dockerfile:1
# prefill-guard: a static (musl) binary alone on distroless/static, as the
# non-root user 65532. No shell, no package manager. CI cannot pull base
# images, so it builds and runs the same binary FROM scratch with podman
# instead (scripts/image-smoke.sh, deploy/container/Containerfile.scratch).
#
#   docker build -t prefill-guard .
#   docker run --rm -p 8000:8000 -p 9000:9000 -v /models:/models:ro \
#     -v "$PWD/prefill-guard.toml:/etc/prefill-guard/prefill-guard.toml:ro" prefill-guard

FROM rust:1.95-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools=1.2.3-1 \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
# The musl C++ settings for a dependency's build script (see the file).
COPY .cargo ./.cargo
COPY src ./src
RUN cargo build --release --locked --target x86_64-unknown-linux-musl --bin prefill-guard \
 && cp target/x86_64-unknown-linux-musl/release/prefill-guard /prefill-guard
# The example file binds admin to loopback; in a container that is the
# container's own, out of reach of probes and Prometheus, so the image's copy
# binds it on every address. Written into the file, not set by a variable: a
# variable would silently override the admin_listen of a file an operator
# mounts in its place.
COPY config/prefill-guard.toml ./prefill-guard.toml
RUN sed 's/^admin_listen = .*/admin_listen = "0.0.0.0:9000"/' prefill-guard.toml > /prefill-guard.toml \
 && grep -q '^admin_listen = "0.0.0.0:9000"$' /prefill-guard.toml

FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="prefill-guard" \
      org.opencontainers.image.description="Refuses prompts SGLang's prefill pool cannot hold, before they reach it" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /prefill-guard /usr/local/bin/prefill-guard
# Publish 9000 (admin) to the cluster, never to clients.
COPY --from=build /prefill-guard.toml /etc/prefill-guard/prefill-guard.toml
# distroless's nonroot user; Kubernetes manifests also set runAsUser 65532.
USER 65532:65532
# 8000: the proxy (HTTP/1.1 and h2c), for clients.
# 9000: admin (/metrics, /healthz, /readyz), for probes and Prometheus only.
EXPOSE 8000 9000
# Tokenizers given as Hugging Face ids are cached here; mount a volume (or
# use a tokenizer directory) with a read-only root filesystem.
ENV HF_HOME=/tmp/hf
# SIGTERM (docker stop, Kubernetes): stop accepting, drain in-flight requests
# and SSE streams for up to shutdown_grace_secs (30), then exit 0. Give the
# runtime a longer stop timeout (docker stop -t 40).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/prefill-guard"]
CMD ["serve", "--config", "/etc/prefill-guard/prefill-guard.toml"]
