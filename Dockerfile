# The operator image: `python -m kubeturn operator`, the kopf operator that also serves the
# Orchestrator API, as an unprivileged user (uid 10001). charts/kubeturn deploys it.
#
# Build from the repository root; the context is the whole `kubeturn` distribution:
#
#   DOCKER_BUILDKIT=1 docker build --network=host \
#     --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt -t kubeturn-operator .
#
# The `ca` secret is optional. Where HTTPS is intercepted it is the CA bundle pip must
# trust; as a secret it never lands in a layer or in the image's history.
#
# No `# syntax=` line on purpose: BuildKit's built-in Dockerfile frontend (Docker ≥ 20.10)
# already knows RUN --mount, and naming a frontend would pull an image from a registry.
#
# The base is Debian's, with Debian's python3 in a venv, not a python:* image: see
# docs/decisions/0003-images-build-on-debian-python.md. Ports and the process model:
# docs/decisions/0016-operator-deployment.md.

ARG BASE_IMAGE=debian:bookworm-slim

# --------------------------------------------------------------------------- build
# Builds /opt/kubeturn, a venv holding the distribution with its `operator` extra (kopf,
# kubernetes). Nothing else from this stage ships: not pip, not setuptools, not the source.
FROM ${BASE_IMAGE} AS build

ARG DEBIAN_FRONTEND=noninteractive
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Versions are not pinned: the base tag fixes the Debian release, and a pin would break
# the build at each point release when the archive drops the pinned version.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*

# pip reads these from the environment; PIP_CERT is set per RUN, only when the secret is
# there, so builds without interception use the system's trust store unchanged.
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DEFAULT_TIMEOUT=120

WORKDIR /src

# Dependencies first, in their own layer, read from pyproject.toml alone: editing the
# source does not download them again. They are the distribution's own, its `operator`
# extra (a missing extra fails the build here rather than shipping an operator without
# kopf), and the build backend, so the project installs without build isolation.
COPY pyproject.toml ./
RUN --mount=type=secret,id=ca,required=false \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
 && python3 -m venv /opt/kubeturn \
 && python3 -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb")); print("\n".join(p["project"]["dependencies"] + p["project"]["optional-dependencies"]["operator"] + p["build-system"]["requires"]))' > /tmp/requirements.txt \
 && /opt/kubeturn/bin/pip install --prefer-binary -r /tmp/requirements.txt

# README* may be absent; the glob keeps COPY from failing then. The Harness package comes
# too: one distribution holds both, and setuptools looks for both source roots.
COPY README* ./
COPY operator/ operator/
COPY harness_image/kubeturn_harness/ harness_image/kubeturn_harness/
RUN /opt/kubeturn/bin/pip install --no-deps --no-build-isolation '.[operator]' \
 && /opt/kubeturn/bin/python -m pip check \
 && /opt/kubeturn/bin/python -m pip uninstall -y setuptools pip \
 && /opt/kubeturn/bin/python -c 'import kopf, kubernetes, kubeturn.cli'

# --------------------------------------------------------------------------- runtime
FROM ${BASE_IMAGE} AS runtime

ARG BASE_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG DEBIAN_FRONTEND=noninteractive

LABEL org.opencontainers.image.title="kubeturn-operator" \
      org.opencontainers.image.description="The kubeturn operator: runs Runs, Workspaces and AgentTurns, and serves the Orchestrator API." \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"

# python3: the interpreter the venv links to (the same Debian package as in the build
# stage). ca-certificates: TLS to anything outside the cluster's own CA (a kubeconfig's
# API server). tini: PID 1, so SIGTERM reaches Python even before kopf installs its
# handlers (PID 1 ignores signals it has no handler for) and the pod stops gracefully.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3 tini \
 && rm -rf /var/lib/apt/lists/*

# The operator's user: 10001, as in the Harness image, clear of the uids Debian hands out
# to people (1000+) and system services (<1000). It owns nothing: the root filesystem can
# be read-only (the chart mounts /tmp).
RUN groupadd --gid 10001 kubeturn \
 && useradd --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin kubeturn

COPY --from=build /opt/kubeturn /opt/kubeturn

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

USER 10001:10001
WORKDIR /tmp
# 8081 the Orchestrator API, 9090 /metrics, 8080 /healthz and /readyz.
EXPOSE 8081 9090 8080

# No HEALTHCHECK: Kubernetes probes /healthz and /readyz (the chart's Deployment), and
# Docker's HEALTHCHECK is ignored there.
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/kubeturn/bin/python", "-m", "kubeturn"]
CMD ["operator"]
