# syntax=docker/dockerfile:1
# The captcha-gateway image: one binary on a distroless base, run as non-root.
#   docker build -t captcha-gateway:0.1.0 .
# Serves every role: `serve` (the default), `worker`, `simulate` (docs/DEPLOY.md).

FROM rust:1-bookworm AS build
WORKDIR /src
# Only what the build reads (.dockerignore keeps the rest out): the Lua scripts and the OpenAPI
# document are compiled into the binary (include_str!), so the runtime stage needs neither.
# Cargo loads the whole workspace even to build one binary: every member's manifest, the library
# it declares and the bench targets named without a path, dev-dependencies included. So client/
# (a member, and the tests' dev-dependency) is here although the image never links it, and
# benches/ only because a manifest names a bench target. tests/it/deploy_image.rs builds from
# exactly what these lines copy, offline.
COPY Cargo.toml Cargo.lock ./
COPY balance balance
COPY client client
COPY benches benches
COPY docs/openapi.json docs/openapi.json
COPY lua lua
COPY src src
# The registry and target/ are BuildKit cache mounts: a source change rebuilds only this crate,
# not the few hundred dependencies. target/ is not in the image, so the binary is copied out.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin captcha-gateway \
    && install -D -m 0755 target/release/captcha-gateway /out/captcha-gateway

# glibc, libgcc and CA certificates (for https providers and rediss://), no shell, no package
# manager. The `nonroot` variant's user is 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/captcha-gateway /usr/local/bin/captcha-gateway
USER 65532:65532
# 8080: `serve`; 9090: `worker` (/livez, /readyz, /metrics); 8081: `simulate`.
EXPOSE 8080 9090 8081
# No HEALTHCHECK: the image has no shell or HTTP client to run one, Kubernetes ignores it in
# favour of its own probes on /livez and /readyz (deploy/k8s), and compose.yaml orders start-up
# on Redis's health, which is what the gateway needs first.
ENTRYPOINT ["/usr/local/bin/captcha-gateway"]
CMD ["serve", "--listen=0.0.0.0:8080"]
