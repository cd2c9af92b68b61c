# syntax=docker/dockerfile:1
# The image of examples/pytorch-ddp on Kubernetes: Python 3 with PyTorch, the trainyard
# package (trainyard.report), train.py and Debian's Fashion-MNIST, at the paths the example's
# job file names, so that examples/pytorch-ddp/job.yaml runs on both backends unchanged.
#
#   docker build -f deploy/docker/pytorch-ddp.Dockerfile -t trainyard-pytorch-ddp .   (from the repo root)
#
# By default Debian bookworm's python3-torch: CPU only, so the ranks use gloo. For GPU nodes
# (NCCL), build on an image that already has a CUDA build of PyTorch in its /usr/bin/python3,
# e.g. --build-arg BASE=<a PyTorch CUDA image>: PyTorch is then kept, not installed.
ARG BASE=debian:bookworm-slim

# Fashion-MNIST as Debian packages it (dataset-fashion-mnist), with its copyright file.
FROM debian:bookworm-slim AS dataset
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      dataset-fashion-mnist \
 && rm -rf /var/lib/apt/lists/*

FROM ${BASE}
# requests for trainyard.report; PyTorch and Python unless the base image has them.
RUN if /usr/bin/python3 -c 'import torch' 2>/dev/null; then torch=; \
    else torch="python3 python3-torch"; fi \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates python3-requests $torch \
 && rm -rf /var/lib/apt/lists/*
# The worker image's user (10001), which the EFS access points of deploy/ write as.
RUN groupadd --system --gid 10001 trainyard \
 && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --shell /usr/sbin/nologin trainyard
COPY --from=dataset /usr/share/datasets/fashion-mnist /usr/share/datasets/fashion-mnist
COPY --from=dataset /usr/share/doc/dataset-fashion-mnist/copyright \
     /usr/share/doc/dataset-fashion-mnist/copyright
COPY clients/python/trainyard /usr/share/trainyard/python/trainyard
COPY examples/pytorch-ddp/train.py examples/pytorch-ddp/job.yaml \
     /usr/share/trainyard/examples/pytorch-ddp/
ENV PYTHONPATH=/usr/share/trainyard/python PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /tmp
# A job's `command` replaces this (job.yaml names the same program).
ENTRYPOINT ["/usr/bin/python3", "/usr/share/trainyard/examples/pytorch-ddp/train.py"]
CMD ["--help"]
