# syntax=docker/dockerfile:1
# One image for the webhook, the controller and the `certs` hook Job of the Helm chart:
#   volcano-metronome webhook ... | volcano-metronome controller ... | volcano-metronome certs ...
# Build:  docker build -t <registry>/volcano-metronome:<version> .
# Pinned by digest (the multi-arch index of python:3.11-slim), so a rebuild gets the same base
# until someone moves the pin on purpose; override with --build-arg PYTHON_IMAGE=... to update it.
ARG PYTHON_IMAGE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

# ---------------------------------------------------------------- builder: wheels only
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# .dockerignore lets in only the package sources and their metadata.
COPY . .
# Our wheel, then wheels of every dependency of the two extras the image serves: the final stage
# installs from these files alone, with no index and no compiler.
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m pip wheel --wheel-dir /wheels "$(ls /wheels/volcano_metronome-*.whl)[webhook,controller]"

# ---------------------------------------------------------------- final: runtime only
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="volcano-metronome" \
      org.opencontainers.image.description="Network-aware gang placement (node sets and TDM phase offsets) for Volcano and Kueue" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# The wheels are bind-mounted, not copied: they never become a layer of this image.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python -m pip install --no-index --find-links=/wheels "volcano-metronome[webhook,controller]" \
 && groupadd --system --gid 65532 metronome \
 && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
            --shell /usr/sbin/nologin metronome
# Numeric, so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["volcano-metronome"]
CMD ["--help"]
