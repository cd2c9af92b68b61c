# syntax=docker/dockerfile:1
# The image every rank of a job runs on Kubernetes: `trainyard-worker` with its GPU path
# (CUDA, cuBLAS, NCCL) and Debian's Fashion-MNIST where the worker looks for it by default.
#
#   docker build -f deploy/docker/worker.Dockerfile -t trainyard-worker .     (from the repo root)
#
# CUDA 13.0, as the toolkit the runtime is developed against (/usr/local/cuda-13.0). The
# nodes' driver must support it (R580 or newer). The devel image has nvcc and NCCL's headers
# (libnccl-dev); the runtime image has the shared libraries (cuBLAS, libnccl2) and nothing
# to compile with.
ARG CUDA_VERSION=13.0.2
ARG CUDA_DISTRO=ubuntu24.04

FROM nvidia/cuda:${CUDA_VERSION}-devel-${CUDA_DISTRO} AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config ca-certificates \
      libmicrohttpd-dev libjansson-dev libsqlite3-dev libcurl4-openssl-dev libssl-dev \
      libyaml-dev libopenblas-dev zlib1g-dev libcmocka-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Built where it is installed: the binary's run path names its build directory, and
# libty_gpu.so must sit beside trainyard-worker (runtime/CMakeLists.txt).
# TRAINYARD_CUDA=ON fails the build rather than produce a CPU-only worker by accident.
RUN cmake -S . -B /opt/trainyard -DCMAKE_BUILD_TYPE=Release -DTRAINYARD_CUDA=ON \
 && cmake --build /opt/trainyard --target trainyard-worker -j"$(nproc)"

# Fashion-MNIST as Debian packages it (dataset-fashion-mnist), with its copyright file.
FROM debian:bookworm-slim AS dataset
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      dataset-fashion-mnist \
 && rm -rf /var/lib/apt/lists/*

FROM nvidia/cuda:${CUDA_VERSION}-runtime-${CUDA_DISTRO}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libopenblas0-pthread libjansson4 zlib1g \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 trainyard \
 && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --shell /usr/sbin/nologin trainyard
COPY --from=build /opt/trainyard/bin/trainyard-worker /opt/trainyard/bin/libty_gpu.so \
     /opt/trainyard/bin/
# The README's path: `--data /usr/share/datasets/fashion-mnist`, also the worker's default.
COPY --from=dataset /usr/share/datasets/fashion-mnist /usr/share/datasets/fashion-mnist
COPY --from=dataset /usr/share/doc/dataset-fashion-mnist/copyright \
     /usr/share/doc/dataset-fashion-mnist/copyright
ENV PATH=/opt/trainyard/bin:${PATH}
USER 10001:10001
WORKDIR /tmp
# A job's `command` replaces this (["trainyard-worker", "train"] in the README's examples).
ENTRYPOINT ["/opt/trainyard/bin/trainyard-worker"]
CMD ["train", "--help"]
