# gpuguard admission webhook / audit CLI, one image for linux/amd64 and linux/arm64:
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg GIT_COMMIT="$(git rev-parse HEAD)" -t ghcr.io/gpuguard/gpuguard:0.1.0 .
#
# Base image: pinned below by the digest of its multi-arch *index* (one digest covering both
# architectures), never the moving tag, so every build of a commit starts from the same bytes. To
# move it, take the "Digest:" line at the top of
#   docker buildx imagetools inspect python:3.11-slim
# (not a per-platform "Manifests:" entry) and replace the sha256 below. The digest was taken from
# public references to python:3.11-slim, as no registry could be asked from where this file was
# written; the release workflow (.github/workflows/release.yml) checks, before it builds, that it
# resolves to an index with both linux/amd64 and linux/arm64, and fails the release if not.
#
# Every dependency installs from a wheel on both architectures (no compiler in the image), at the
# lock's versions with every file's sha256 checked (requirements/runtime.txt and build.txt, written
# by `python3 scripts/lock.py`): tests/unit/project/test_platforms.py resolves that set for both
# architectures in the test suite, and tests/unit/project/test_lock.py keeps the lock current.
#
# At run time: numeric non-root user, nothing written outside /tmp (bytecode is compiled at build
# time, HOME is /tmp), so `readOnlyRootFilesystem: true` with an emptyDir on /tmp works (as in
# deploy/); exec-form ENTRYPOINT, so no shell is needed to start it.
ARG PYTHON_IMAGE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Only what the package needs: .dockerignore keeps tests, docs, bench/ and deploy/ out of the context.
WORKDIR /src
COPY requirements/runtime.txt requirements/build.txt requirements/
COPY pyproject.toml README.md ./
COPY webhook/ webhook/
COPY policies/ policies/
COPY certs/ certs/
COPY workloads/ workloads/
COPY kubeapi/ kubeapi/
# The commit `gpuguard --version` shows: stamped on the one line webhook/__init__.py keeps for it.
ARG GIT_COMMIT=""
RUN case "$GIT_COMMIT" in \
      "") ;; \
      *[!0-9a-f]*) echo "GIT_COMMIT must be a hexadecimal commit id, not '$GIT_COMMIT'" >&2; exit 1 ;; \
      *) sed -i "s/^BUILD_COMMIT = None$/BUILD_COMMIT = \"$GIT_COMMIT\"/" webhook/__init__.py \
         && grep -q "^BUILD_COMMIT = \"$GIT_COMMIT\"$" webhook/__init__.py ;; \
    esac
# The build tools at the lock's pins, in a venv the final stage leaves behind.
RUN python -m venv /opt/build \
    && /opt/build/bin/pip install --only-binary=:all: --require-hashes -r requirements/build.txt
# The dependencies at the lock's pins, from wheels only, into a venv that the final stage copies at the
# same path (same base image, so the venv's interpreter links hold); then gpuguard's own wheel, built
# with the pinned tools (no build isolation: nothing unpinned is fetched) and installed without
# dependencies; `pip check` proves the locked set is complete.
RUN python -m venv /opt/gpuguard \
    && /opt/gpuguard/bin/pip install --only-binary=:all: --require-hashes -r requirements/runtime.txt \
    && /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /wheels /src \
    && /opt/gpuguard/bin/pip install --no-deps /wheels/gpuguard-*.whl \
    && /opt/gpuguard/bin/pip check \
    && /opt/gpuguard/bin/pip uninstall --yes pip \
    && /opt/gpuguard/bin/python -m compileall -q /opt/gpuguard

FROM ${PYTHON_IMAGE}
ARG GIT_COMMIT=""
LABEL org.opencontainers.image.title="gpuguard" \
      org.opencontainers.image.description="Kubernetes admission webhook that keeps ML workloads from burning GPU budget" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.revision="${GIT_COMMIT}"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    PATH=/opt/gpuguard/bin:$PATH
COPY --from=build /opt/gpuguard /opt/gpuguard
WORKDIR /tmp
# Numeric, so the kubelet can verify runAsNonRoot without reading /etc/passwd (deploy/ runs 10001).
USER 10001:10001
EXPOSE 8443
# `args: [serve, ...]` in deploy/ and the chart; `docker run IMAGE audit -` reads manifests from stdin.
ENTRYPOINT ["/opt/gpuguard/bin/python", "-m", "gpuguard.webhook"]
CMD ["--help"]
