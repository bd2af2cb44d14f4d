# The operator image for real clusters. This machine has no Docker engine: the local test
# cluster gets the equivalent image from hack/images.sh (same binary path, user and entrypoint).
#
#   docker build -t quay.io/etcd-operator-rs/etcd-operator:v0.1.0 .

FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p etcd-operator \
    && install -D -m 0755 target/release/etcd-operator /out/etcd-operator
# Static: it runs inside etcd images (see crates/restore-step).
RUN CARGO_TARGET_DIR=target/static cargo rustc --release --locked -p etcd-restore-step -- -C target-feature=+crt-static \
    && install -D -m 0755 target/static/release/etcd-restore-step /out/etcd-restore-step

# glibc, CA certificates, no shell, uid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/etcd-operator /out/etcd-restore-step /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/etcd-operator"]
