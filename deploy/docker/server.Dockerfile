# syntax=docker/dockerfile:1
# The Trainyard server: `trainyard serve`, for the Kubernetes backend (deploy/kustomize).
#
#   docker build -f deploy/docker/server.Dockerfile -t trainyard-server .     (from the repo root)
#
# Two stages on Debian bookworm, the distribution scripts/install-deps targets: the build stage
# has the compilers and -dev packages, the runtime stage only the shared libraries the binary
# links and CA certificates. The server needs no GPU, so CUDA is off.

FROM debian:bookworm AS build
# The build packages of scripts/install-deps (CMake configures every directory, tests
# included, so cmocka and OpenBLAS are needed even though only the server is built).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config ca-certificates \
      libmicrohttpd-dev libjansson-dev libsqlite3-dev libcurl4-openssl-dev libssl-dev \
      libyaml-dev libopenblas-dev zlib1g-dev libcmocka-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DTRAINYARD_CUDA=OFF \
 && cmake --build /build --target trainyard -j"$(nproc)"

FROM debian:bookworm-slim
# The shared libraries `trainyard` links (libyaml reads the cluster profile), and CA
# certificates for TLS to the API server.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates libmicrohttpd12 libjansson4 libsqlite3-0 libcurl4 libssl3 libyaml-0-2 \
 && rm -rf /var/lib/apt/lists/*
# A fixed numeric id, so that Kubernetes can check runAsNonRoot and the volume's fsGroup
# matches without a name lookup.
RUN groupadd --system --gid 10001 trainyard \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/trainyard \
      --shell /usr/sbin/nologin trainyard \
 && install -d -o 10001 -g 10001 -m 0700 /var/lib/trainyard
COPY --from=build /build/bin/trainyard /usr/local/bin/trainyard
# The database and everything the server keeps beside it (a generated admin token): one volume.
VOLUME ["/var/lib/trainyard"]
USER 10001:10001
WORKDIR /var/lib/trainyard
ENV TRAINYARD_LISTEN=0.0.0.0:8080 \
    TRAINYARD_DB=/var/lib/trainyard/trainyard.db
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/trainyard", "serve"]
