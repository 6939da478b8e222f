# syntax=docker/dockerfile:1
# The itrlab project image (Ray head, Ray workers, RayJob submitter). The repository sits at /app,
# the working directory, so `python jobs/sweep_dbl.py` and configs/ resolve as in a checkout; the
# project installs as the README does it: torch first, pinned, then the project (`pip install .`).
# Build from the repository root:
#   CPU:  docker build -f k8s/docker/itrlab.Dockerfile -t itrlab:0.1.0-cpu .
#   CUDA: docker build -f k8s/docker/itrlab.Dockerfile -t itrlab:0.1.0-cuda \
#           --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .
# (PyPI's own Linux torch wheel is a CUDA build too: TORCH_INDEX_URL=https://pypi.org/simple.)
# The NVIDIA driver comes from the GPU node; the CUDA runtime comes with the torch wheels.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}

# = TORCH_VERSION in the Makefile; the CPU wheel by default
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# = rayVersion of the RayCluster (k8s/base/raycluster.yaml); satisfies pyproject's ray>=2.60
ARG RAY_VERSION=2.60.0

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    ITRLAB_CONFIG_DIR=/app/configs

RUN groupadd --gid 10001 itrlab \
    && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/itrlab --shell /bin/bash itrlab

WORKDIR /app

# 1. torch, pinned, from its own index (an unpinned resolve pulls the CUDA stack on any variant)
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"

# 2. the project and its dependencies (pyproject.toml), Ray pinned to the cluster's version
COPY pyproject.toml README.md ./
COPY platform/ platform/
RUN pip install --no-cache-dir . "ray[default,tune,train]==${RAY_VERSION}"

# 3. entry points and configs (they change most often: last)
COPY configs/ configs/
COPY jobs/ jobs/

USER 10001:10001
CMD ["python", "jobs/sweep_dbl.py", "--help"]
