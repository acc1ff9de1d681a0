# gpuguard admission webhook / audit CLI.
#   docker build -t ghcr.io/gpuguard/gpuguard:0.1.0 .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Only what the package needs: tests, docs and deploy/ stay out of the image.
# (README.md* matches nothing rather than failing while the README is absent.)
WORKDIR /src
COPY pyproject.toml README.md* ./
COPY webhook/ webhook/
COPY policies/ policies/
COPY certs/ certs/
COPY workloads/ workloads/
COPY kubeapi/ kubeapi/
RUN pip install /src \
    && rm -rf /src \
    && groupadd --system --gid 10001 gpuguard \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin gpuguard

WORKDIR /
# Numeric, so the kubelet can verify runAsNonRoot without reading /etc/passwd.
USER 10001:10001
EXPOSE 8443
ENTRYPOINT ["gpuguard"]
CMD ["--help"]
