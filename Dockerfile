# kubeturn's two images, from one Dockerfile: they share their Debian base, their build
# venv and the distribution (docs/decisions/0103-one-dockerfile-builds-both-images.md).
#
# - the operator (the default target): `python -m kubeturn operator`, the kopf operator
#   that also serves the Orchestrator API, as an unprivileged user (uid 10001);
#   charts/kubeturn deploys it;
# - the Harness (`--target harness`): the kubeturn Harness server, plus the tools an
#   Agent's Turn runs (git, ripgrep, bash), as unprivileged users (the Harness 10001, the
#   Workspace 10002).
#
# Build from the repository root; the context is the whole `kubeturn` distribution:
#
#   DOCKER_BUILDKIT=1 docker build --network=host \
#     --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt -t kubeturn-operator .
#   DOCKER_BUILDKIT=1 docker build --network=host --target harness \
#     --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt -t kubeturn-harness .
#
# The `ca` secret is optional. Where HTTPS is intercepted it is the CA bundle pip must
# trust; as a secret it never lands in a layer or in the image's history.
#
# No `# syntax=` line on purpose: BuildKit's built-in Dockerfile frontend (Docker ≥ 20.10)
# already knows RUN --mount, and naming a frontend would pull an image from a registry.
#
# The base is Debian's, with Debian's python3 in a venv, not a python:* image: see
# docs/decisions/0003-images-build-on-debian-python.md. The operator's ports and process
# model: docs/decisions/0016-operator-deployment.md.

ARG BASE_IMAGE=debian:bookworm-slim

# --------------------------------------------------------------------------- build
# /opt/kubeturn, a venv holding the distribution's dependencies. Nothing from the build
# stages ships but the venv: not pip, not setuptools, not the source.
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
# source does not download them again. The build backend (setuptools) goes in too, so
# the project itself installs without build isolation and without a second download.
COPY pyproject.toml ./
RUN --mount=type=secret,id=ca,required=false \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
 && python3 -m venv /opt/kubeturn \
 && python3 -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb")); print("\n".join(p["project"]["dependencies"] + p["build-system"]["requires"]))' > /tmp/requirements.txt \
 && /opt/kubeturn/bin/pip install --prefer-binary -r /tmp/requirements.txt

# The distribution's source, copied into each build stage after its dependencies: editing
# it builds again from here. README* may be absent; the glob keeps COPY from failing then.
# One distribution holds both packages, and setuptools looks for both source roots.
FROM scratch AS source
COPY README* pyproject.toml /src/
COPY operator/ /src/operator/
COPY harness_image/kubeturn_harness/ /src/harness_image/kubeturn_harness/

# The Harness's venv: the distribution and its own dependencies.
FROM build AS build-harness
COPY --from=source /src/ /src/
RUN /opt/kubeturn/bin/pip install --no-deps --no-build-isolation . \
 && /opt/kubeturn/bin/python -m pip uninstall -y setuptools pip \
 && /opt/kubeturn/bin/python -c 'import kubeturn_harness'

# The operator's venv: its `operator` extra (kopf, kubernetes) too, in a layer of its own
# before the source. A missing extra fails the build here rather than shipping an
# operator without kopf.
FROM build AS build-operator
RUN --mount=type=secret,id=ca,required=false \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
 && python3 -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb")); print("\n".join(p["project"]["optional-dependencies"]["operator"]))' > /tmp/operator.txt \
 && /opt/kubeturn/bin/pip install --prefer-binary -r /tmp/operator.txt
COPY --from=source /src/ /src/
RUN /opt/kubeturn/bin/pip install --no-deps --no-build-isolation '.[operator]' \
 && /opt/kubeturn/bin/python -m pip check \
 && /opt/kubeturn/bin/python -m pip uninstall -y setuptools pip \
 && /opt/kubeturn/bin/python -c 'import kopf, kubernetes, kubeturn.cli'

# --------------------------------------------------------------------------- runtime
# What both images run on. python3: the interpreter the venv links to (the same Debian
# package as in the build stage). ca-certificates: TLS to anything outside the cluster's
# own CA. tini: PID 1, so signals reach Python even before it installs its handlers (PID
# 1 ignores signals it has no handler for) and the processes left behind are reaped.
# kubeturn (10001) runs either server, clear of the uids Debian hands out to people
# (1000+) and system services (<1000); it has no home.
FROM ${BASE_IMAGE} AS runtime

ARG BASE_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG DEBIAN_FRONTEND=noninteractive

# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3 tini \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 kubeturn \
 && useradd --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin kubeturn

LABEL org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# --------------------------------------------------------------------------- harness
FROM runtime AS harness

ARG DEBIAN_FRONTEND=noninteractive

LABEL org.opencontainers.image.title="kubeturn-harness" \
      org.opencontainers.image.description="The kubeturn Harness: runs an Agent's Turns inside its sandbox pod."

# git, ripgrep, bash: what the Working tools run. workspace (10002), the clone containers
# and the Agents' tools, owns the Workspace (/work); kubeturn, the Harness, owns its data
# (/var/lib/kubeturn, 0700). Neither has a home: ssh reads its configuration from the
# passwd home, never from $HOME, and a home on /work, which the Agents write, would be
# theirs to configure.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends bash git openssh-client ripgrep \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10002 workspace \
 && useradd --uid 10002 --gid 10002 --home-dir /nonexistent --no-create-home \
      --shell /bin/bash workspace \
 && install -d -o 10002 -g 10002 -m 0755 /work \
 && install -d -o 10001 -g 10001 -m 0700 /var/lib/kubeturn

COPY --from=build-harness /opt/kubeturn /opt/kubeturn

# /opt/kubeturn/bin stays off PATH on purpose: the Agent's commands inherit PATH, and
# their `python3` must be Debian's, not the Harness's venv (which has no pip).
# KUBETURN_HEALTHCHECK_URL: what HEALTHCHECK probes; a run that moves the server off
# port 8080 (e.g. `--network=host` in tests) points it at the new port.
ENV KUBETURN_HEALTHCHECK_URL=http://127.0.0.1:8080/healthz

USER 10001:10001
WORKDIR /work
EXPOSE 8080

# urlopen raises on a refused connection, a timeout or any non-2xx answer: exit 1.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["/opt/kubeturn/bin/python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['KUBETURN_HEALTHCHECK_URL'], timeout=2)"]

ENTRYPOINT ["/usr/bin/tini", "--", "/opt/kubeturn/bin/python", "-m", "kubeturn_harness"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080", "--data-dir", "/var/lib/kubeturn"]

# --------------------------------------------------------------------------- operator
# The default target, last.
FROM runtime AS operator

LABEL org.opencontainers.image.title="kubeturn-operator" \
      org.opencontainers.image.description="The kubeturn operator: runs Runs, Workspaces and AgentTurns, and serves the Orchestrator API."

COPY --from=build-operator /opt/kubeturn /opt/kubeturn

# It owns nothing: the root filesystem can be read-only (the chart mounts /tmp).
USER 10001:10001
WORKDIR /tmp
# 8081 the Orchestrator API, 9090 /metrics, 8080 /healthz and /readyz.
EXPOSE 8081 9090 8080

# No HEALTHCHECK: Kubernetes probes /healthz and /readyz (the chart's Deployment), and
# Docker's HEALTHCHECK is ignored there.
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/kubeturn/bin/python", "-m", "kubeturn"]
CMD ["operator"]
