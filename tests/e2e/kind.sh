#!/usr/bin/env bash
# The e2e tier: kubeturn on a real Kubernetes cluster (kind), end to end.
#
#   bash tests/e2e/kind.sh              run it (about 5-10 minutes; needs kind, docker,
#                                       kubectl, helm, and a Python with kubeturn[dev])
#   KEEP=1 bash tests/e2e/kind.sh       the same, and leave the cluster for inspection
#   bash tests/e2e/kind.sh render DIR   only write the files it would apply into DIR
#                                       (needs Python alone; nothing touches a cluster)
#
# What it does, in order:
#   1. builds the operator image and the Harness image (the Dockerfile's two targets)
#      with docker, tagged :e2e;
#   2. creates the kind cluster `kubeturn-e2e` (an existing one of that name, left by an
#      earlier KEEP=1 run, is deleted first) and `kind load`s both images into it;
#   3. in namespace kubeturn-e2e, starts the scripted model (a Deployment of the Harness
#      image running `python -m kubeturn_harness.scripted`, its script from a ConfigMap)
#      and a git server (see below), each behind a Service;
#   4. `helm install`s charts/kubeturn into kubeturn-system, watching kubeturn-e2e, with
#      the local images (imagePullPolicy Never) and one provider, `scripted`, pointing at
#      the scripted model's Service, and checks that the operator pod holds the chart's
#      Lease (leader election under the chart's real RBAC);
#   5. applies examples/task-with-review.yaml with its repo URL and its Agents' models
#      rewritten to the in-cluster ones; the scripted model plays the script of
#      tests/system/scripts.py (TASK_WITH_REVIEW): coder submits, reviewer rejects,
#      coder fixes, reviewer approves;
#   6. waits for the Run's humanReview state, sends `approve` by appending to
#      spec.signals (kubectl patch --type=json), and waits for phase Succeeded;
#   7. asserts what only a real cluster shows: four Turns recorded in Run.status, each
#      settled `ended` by its own pick, and no AgentTurn left behind (every sweep
#      finalizer ran).
# On failure it prints the kubeturn objects, pods, events and the operator's, sandbox's,
# scripted model's and git server's logs. It deletes the cluster at the end unless KEEP=1.
#
# The git server: the Workspace's init container runs `git clone` against a URL, so the
# cluster needs a repository it can reach. The simplest server that really works is git's
# "dumb" HTTP protocol: a bare repository after `git update-server-info` is a tree of plain
# files, and `python3 -m http.server` serves them. git first asks for the smart protocol
# (`info/refs?service=git-upload-pack`); http.server ignores the query and answers the
# plain file, whose content type is not the smart one, so git falls back to dumb HTTP and
# fetches HEAD, info/refs and the objects as files. The Harness image already has git and
# Debian's python3, so the server is one container of that image: it makes a one-commit
# repository (branch main, the Workspace's default ref) in an emptyDir and serves it.
# No smart-protocol server (git daemon, git http-backend + a CGI web server) is needed.
#
# kubectl and helm talk only to this cluster: the kubeconfig is a file of this run's own
# (KUBECONFIG is set to it), never ~/.kube/config.
#
# Environment (all optional):
#   KEEP=1               leave the cluster (and the work directory with its kubeconfig)
#   KIND, DOCKER, KUBECTL, HELM, PYTHON
#                        the commands to use (default: from PATH; PYTHON defaults to
#                        .venv/bin/python when present, else python3)
#   KIND_NODE_IMAGE      the kindest/node image (default: the kind release's own)
#   E2E_CA_BUNDLE        a CA bundle pip inside the image builds must trust (default:
#                        /etc/ssl/certs/ca-certificates.crt when present), passed as the
#                        build secret `ca` that both Dockerfiles document
#   E2E_WAIT_S           seconds the Run may take to reach humanReview (default 600)

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

CLUSTER=kubeturn-e2e
NAMESPACE=kubeturn-e2e
OPERATOR_NAMESPACE=kubeturn-system
RELEASE=kubeturn
RUN=task-with-review
TAG=e2e
OPERATOR_REPOSITORY=kubeturn/operator
HARNESS_REPOSITORY=kubeturn/harness
OPERATOR_IMAGE=$OPERATOR_REPOSITORY:$TAG
HARNESS_IMAGE=$HARNESS_REPOSITORY:$TAG
# The in-cluster endpoints the Run and the chart are pointed at.
MODEL_PORT=8000
GIT_PORT=8080
PROVIDER_URL=http://scripted-model.$NAMESPACE.svc:$MODEL_PORT/v1
REPO_URL=http://git-server.$NAMESPACE.svc:$GIT_PORT/repo.git
MODEL=scripted/scripted

KEEP=${KEEP:-0}
KIND=${KIND:-kind}
DOCKER=${DOCKER:-docker}
KUBECTL=${KUBECTL:-kubectl}
HELM=${HELM:-helm}
if [[ -z ${PYTHON:-} ]]; then
  if [[ -x $ROOT/.venv/bin/python ]]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python3; fi
fi
# 600 s: once its sandbox pod runs, the Run takes about a minute; the rest is room for
# binding the PVC, cloning and starting pods on a slow 2-core runner.
WAIT_S=${E2E_WAIT_S:-600}

say() { printf '\n==> [%4ds] %s\n' "$SECONDS" "$*"; }
fail() {
  printf '\ne2e: FAILED: %s\n' "$*" >&2
  exit 1
}
kc() { "$KUBECTL" "$@"; }

# ------------------------------------------------------------------------------ render

# The Run, the scripted model's script and the chart's values, written into $1.
render() {
  local out=$1
  mkdir -p "$out"
  # The example Run with the in-cluster repo and model, and the system tier's script,
  # both checked here (the Run as the operator validates it) so that a mistake fails
  # before a cluster is made. The YAML goes through JSON the way kubectl sends it: a bare
  # `on` key is YAML 1.1's true, and becomes "true", which kubeturn reads as `on`.
  "$PYTHON" - "$ROOT" "$out" "$REPO_URL" "$MODEL" <<'PY'
import json
import sys
from pathlib import Path

import yaml

root, out, repo_url, model = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
sys.path.insert(0, str(root))

from kubeturn.api.validation import validate_run
from kubeturn_harness.scripted.script import parse_script
from tests.system.scripts import TASK_WITH_REVIEW

parse_script(TASK_WITH_REVIEW, source="TASK_WITH_REVIEW")
(out / "script.yaml").write_text(TASK_WITH_REVIEW + "\n")

run = yaml.safe_load((root / "examples" / "task-with-review.yaml").read_text())
spec = run["spec"]
spec["workspace"]["template"]["repos"]["target"]["url"] = repo_url
for agent in spec["agents"].values():
    agent["model"] = model
spec["signals"] = []  # so that approving is an append: /spec/signals/-
run = json.loads(json.dumps(run))
validate_run(run)  # what the operator does with the object kubectl sends
(out / "run.json").write_text(json.dumps(run, indent=2) + "\n")
PY

  cat >"$out/values.yaml" <<EOF
# The chart's values for the e2e run: the images kind.sh built and loaded (never
# pulled), one watched namespace, and the scripted model as the only provider.
image:
  repository: $OPERATOR_REPOSITORY
  tag: $TAG
  pullPolicy: Never
harnessImage:
  repository: $HARNESS_REPOSITORY
  tag: $TAG
watchNamespaces:
  - $NAMESPACE
providers:
  scripted:
    type: openai
    baseUrl: $PROVIDER_URL
# The sandboxes reach the in-cluster model and git server (private addresses, which the
# default egress denies), as a cluster's own model or git host would be allowed.
sandbox:
  egress:
    rules:
      - to:
          - podSelector: {matchLabels: {app.kubernetes.io/part-of: kubeturn-e2e}}
        ports: [{port: $MODEL_PORT, protocol: TCP}, {port: $GIT_PORT, protocol: TCP}]
logFormat: text
EOF

  # The scripted model and the git server: each a Deployment of the Harness image (with
  # another command) and a Service. Non-root like the sandbox pods. The Harness image is
  # tagged :e2e, not :latest, so the sandbox pods' default pull policy (IfNotPresent)
  # uses the loaded image too.
  cat >"$out/support.yaml" <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: scripted-model
  namespace: $NAMESPACE
  labels: {app.kubernetes.io/name: scripted-model, app.kubernetes.io/part-of: kubeturn-e2e}
spec:
  replicas: 1
  selector:
    matchLabels: {app.kubernetes.io/name: scripted-model}
  template:
    metadata:
      labels: {app.kubernetes.io/name: scripted-model, app.kubernetes.io/part-of: kubeturn-e2e}
    spec:
      automountServiceAccountToken: false
      enableServiceLinks: false
      securityContext:
        runAsNonRoot: true
        runAsUser: 10001
        runAsGroup: 10001
        seccompProfile: {type: RuntimeDefault}
      containers:
        - name: scripted-model
          image: $HARNESS_IMAGE
          imagePullPolicy: Never
          command: [/usr/bin/tini, --, /opt/kubeturn/bin/python, -m, kubeturn_harness.scripted]
          args: [--host, 0.0.0.0, --port, "$MODEL_PORT", --script, /etc/script/script.yaml, --log-level, info]
          ports:
            - {name: http, containerPort: $MODEL_PORT}
          readinessProbe:
            httpGet: {path: /_health, port: http}
            periodSeconds: 2
          securityContext:
            allowPrivilegeEscalation: false
            capabilities: {drop: [ALL]}
          volumeMounts:
            - {name: script, mountPath: /etc/script, readOnly: true}
      volumes:
        - name: script
          configMap: {name: scripted-model-script}
---
apiVersion: v1
kind: Service
metadata:
  name: scripted-model
  namespace: $NAMESPACE
  labels: {app.kubernetes.io/name: scripted-model, app.kubernetes.io/part-of: kubeturn-e2e}
spec:
  selector: {app.kubernetes.io/name: scripted-model}
  ports:
    - {name: http, port: $MODEL_PORT, targetPort: http}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: git-server
  namespace: $NAMESPACE
  labels: {app.kubernetes.io/name: git-server, app.kubernetes.io/part-of: kubeturn-e2e}
spec:
  replicas: 1
  selector:
    matchLabels: {app.kubernetes.io/name: git-server}
  template:
    metadata:
      labels: {app.kubernetes.io/name: git-server, app.kubernetes.io/part-of: kubeturn-e2e}
    spec:
      automountServiceAccountToken: false
      enableServiceLinks: false
      securityContext:
        runAsNonRoot: true
        runAsUser: 10001
        runAsGroup: 10001
        seccompProfile: {type: RuntimeDefault}
      containers:
        - name: git-server
          image: $HARNESS_IMAGE
          imagePullPolicy: Never
          command: [/usr/bin/tini, --, sh, -c]
          # A one-commit repository on branch main, cloned bare, made servable over dumb
          # HTTP by update-server-info (info/refs, objects/info/packs), then served.
          args:
            - |
              set -eu
              export HOME=/srv
              git init --quiet -b main /srv/src
              printf '# kubeturn e2e\n\nThe repository the e2e Run works in.\n' >/srv/src/README.md
              git -C /srv/src add README.md
              git -C /srv/src config user.name kubeturn-e2e
              git -C /srv/src config user.email e2e@kubeturn.invalid
              git -C /srv/src commit --quiet -m 'Initial commit'
              git clone --quiet --bare /srv/src /srv/www/repo.git
              git -C /srv/www/repo.git update-server-info
              exec python3 -m http.server $GIT_PORT --bind 0.0.0.0 --directory /srv/www
          ports:
            - {name: http, containerPort: $GIT_PORT}
          readinessProbe:
            httpGet: {path: /repo.git/info/refs, port: http}
            periodSeconds: 2
          securityContext:
            allowPrivilegeEscalation: false
            capabilities: {drop: [ALL]}
          volumeMounts:
            - {name: srv, mountPath: /srv}
      volumes:
        - name: srv
          emptyDir: {}
---
apiVersion: v1
kind: Service
metadata:
  name: git-server
  namespace: $NAMESPACE
  labels: {app.kubernetes.io/name: git-server, app.kubernetes.io/part-of: kubeturn-e2e}
spec:
  selector: {app.kubernetes.io/name: git-server}
  ports:
    - {name: http, port: $GIT_PORT, targetPort: http}
EOF
}

# ------------------------------------------------------------------------------ checks

preflight() {
  local tool missing=()
  for tool in "$KIND" "$DOCKER" "$KUBECTL" "$HELM" "$PYTHON"; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  ((${#missing[@]} == 0)) || fail "not found: ${missing[*]} (kind, docker, kubectl, helm and python are needed)"
  "$DOCKER" info >/dev/null 2>&1 || fail "\`$DOCKER info\` fails: no working Docker engine"
  # kubectl wait --for=jsonpath=... needs kubectl 1.23 or later (Debian 12's is 1.20).
  local minor
  minor=$("$KUBECTL" version --client -o json 2>/dev/null |
    "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["clientVersion"]["minor"].rstrip("+"))') ||
    minor=0
  ((minor >= 23)) || fail "$KUBECTL is too old (client 1.$minor); kubectl 1.23 or later is needed"
}

run_field() { kc -n "$NAMESPACE" get run "$RUN" -o "jsonpath=$1"; }

# Wait until the Run's active state is $1, printing each change; fail at once when the
# Run ends first, or after $2 seconds.
wait_state() {
  local want=$1 deadline=$((SECONDS + $2)) seen="" now phase state
  while :; do
    phase=$(run_field '{.status.phase}' 2>/dev/null || true)
    state=$(run_field '{.status.state}' 2>/dev/null || true)
    now="phase=${phase:-?} state=${state:-?}"
    if [[ $now != "$seen" ]]; then
      printf '    [%4ds] run/%s %s\n' "$SECONDS" "$RUN" "$now"
      seen=$now
    fi
    [[ $state == "$want" ]] && return 0
    case $phase in
      Succeeded | Failed | Cancelled) fail "the Run ended ($phase, in state '$state') before reaching $want" ;;
      *) ;;
    esac
    ((SECONDS < deadline)) || fail "the Run did not reach $want within $2 s ($now)"
    sleep 2
  done
}

# Wait until the Run has recorded $1 Turns: a Turn is recorded when its AgentTurn's
# finalizer has swept it and read its settlement, which may land just after the state
# change that ended it.
wait_turns() {
  local want=$1 deadline=$((SECONDS + $2)) outcomes words
  while :; do
    outcomes=$(run_field '{.status.turns[*].outcome}' 2>/dev/null || true)
    read -r -a words <<<"$outcomes"
    ((${#words[@]} >= want)) && return 0
    ((SECONDS < deadline)) || fail "the Run recorded ${#words[@]} Turns within $2 s, not $want: '$outcomes'"
    sleep 2
  done
}

# Wait until every AgentTurn in the namespace is settled and held by the retain finalizer
# alone: its sweep finalizer ran, just after its settlement was recorded in the Run, and
# it stays listed for the chart's turnRetention (ADR 0106).
wait_agentturns_settled() {
  local deadline=$((SECONDS + $1)) left
  local shown='{range .items[*]}{.metadata.name}:{.status.phase}:{.metadata.finalizers}{"\n"}{end}'
  while :; do
    left=$(kc -n "$NAMESPACE" get agentturns -o "jsonpath=$shown" 2>/dev/null |
      grep -v ':Settled:\["kubeturn.dev/retain"\]$' || true)
    [[ -z $left ]] && return 0
    ((SECONDS < deadline)) || fail "AgentTurns not settled after $1 s: $left"
    sleep 2
  done
}

expect() {
  local what=$1 got=$2 want=$3
  if [[ $got == "$want" ]]; then
    printf '    ok: %s = "%s"\n' "$what" "$got"
  else
    fail "$what: got \"$got\", expected \"$want\""
  fi
}

# ------------------------------------------------------------------------------ diagnostics

diagnostics() {
  set +e
  section() { printf '\n----- %s\n' "$*"; }
  section "kubectl get agentturns,runs,workspaces -A"
  kc get agentturns,runs,workspaces -A -o wide
  section "pods, PVCs and services"
  kc get pods,pvc,svc -A -o wide
  section "run/$RUN status"
  kc -n "$NAMESPACE" get run "$RUN" -o jsonpath='{.status}'
  echo
  section "workspaces"
  kc -n "$NAMESPACE" describe workspaces
  section "events in $NAMESPACE"
  kc -n "$NAMESPACE" get events --sort-by=.lastTimestamp
  section "events in $OPERATOR_NAMESPACE"
  kc -n "$OPERATOR_NAMESPACE" get events --sort-by=.lastTimestamp
  section "the operator's Lease"
  kc -n "$OPERATOR_NAMESPACE" get leases -o yaml
  section "operator pods"
  kc -n "$OPERATOR_NAMESPACE" describe pods -l "app.kubernetes.io/instance=$RELEASE"
  section "operator logs"
  kc -n "$OPERATOR_NAMESPACE" logs -l "app.kubernetes.io/instance=$RELEASE,app.kubernetes.io/component=operator" \
    --all-containers --prefix --tail=2000
  section "operator logs, previous container (after a restart)"
  kc -n "$OPERATOR_NAMESPACE" logs -l "app.kubernetes.io/instance=$RELEASE,app.kubernetes.io/component=operator" \
    --all-containers --prefix --tail=500 --previous
  section "sandbox pods"
  kc -n "$NAMESPACE" describe pods -l app.kubernetes.io/component=sandbox
  section "sandbox logs (clone init containers and the Harness)"
  kc -n "$NAMESPACE" logs -l app.kubernetes.io/component=sandbox --all-containers --prefix --tail=2000
  section "scripted model logs"
  kc -n "$NAMESPACE" logs deployment/scripted-model --tail=500
  section "git server logs"
  kc -n "$NAMESPACE" logs deployment/git-server --tail=200
}

# ------------------------------------------------------------------------------ main

cluster_made=0
WORK=""

on_exit() {
  local status=$?
  set +e
  if ((status != 0)) && ((cluster_made)); then
    say "diagnostics"
    diagnostics
  fi
  if ((cluster_made)); then
    if [[ $KEEP == 1 ]]; then
      say "KEEP=1: the cluster $CLUSTER is kept; delete it with: $KIND delete cluster --name $CLUSTER"
      echo "    export KUBECONFIG=$WORK/kubeconfig   (or: $KIND export kubeconfig --name $CLUSTER)"
    else
      say "deleting the cluster $CLUSTER"
      "$KIND" delete cluster --name "$CLUSTER"
    fi
  fi
  if [[ -n $WORK && $KEEP != 1 ]]; then rm -rf "$WORK"; fi
  if ((status == 0)); then
    say "e2e: PASSED"
  else
    say "e2e: FAILED (exit $status)"
  fi
  exit "$status"
}

main() {
  trap on_exit EXIT
  # A signal (Ctrl-C, a test runner's timeout) still deletes the cluster.
  trap 'exit 130' INT
  trap 'exit 143' TERM

  preflight
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/kubeturn-e2e.XXXXXX")
  export KUBECONFIG=$WORK/kubeconfig

  say "rendering the Run, the script, the chart values and the support services into $WORK"
  render "$WORK"

  say "building $OPERATOR_IMAGE and $HARNESS_IMAGE"
  local ca=${E2E_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt} build=()
  [[ -s $ca ]] && build+=(--secret "id=ca,src=$ca")
  export DOCKER_BUILDKIT=1
  "$DOCKER" build ${build[@]+"${build[@]}"} -t "$OPERATOR_IMAGE" -f "$ROOT/Dockerfile" "$ROOT"
  "$DOCKER" build ${build[@]+"${build[@]}"} -t "$HARNESS_IMAGE" --target harness -f "$ROOT/Dockerfile" "$ROOT"

  if "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    say "deleting the cluster $CLUSTER left by an earlier run"
    "$KIND" delete cluster --name "$CLUSTER"
  fi
  say "creating the kind cluster $CLUSTER"
  cluster_made=1
  "$KIND" create cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG" --wait 180s \
    ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
  kc version
  say "loading the images into the cluster"
  "$KIND" load docker-image --name "$CLUSTER" "$OPERATOR_IMAGE" "$HARNESS_IMAGE"

  say "starting the scripted model and the git server in $NAMESPACE"
  kc create namespace "$NAMESPACE"
  kc -n "$NAMESPACE" create configmap scripted-model-script --from-file=script.yaml="$WORK/script.yaml"
  kc apply -f "$WORK/support.yaml"

  say "installing the chart into $OPERATOR_NAMESPACE (watching $NAMESPACE)"
  "$HELM" install "$RELEASE" "$ROOT/charts/kubeturn" --namespace "$OPERATOR_NAMESPACE" \
    --create-namespace --values "$WORK/values.yaml" --wait --timeout 5m
  kc -n "$NAMESPACE" rollout status deployment/scripted-model --timeout=180s
  kc -n "$NAMESPACE" rollout status deployment/git-server --timeout=180s

  # The operator pod turns Ready once it leads (helm's --wait need not wait for it: the
  # chart's maxUnavailable is 100%); the Lease (named as the release, its full name)
  # then holds its name, followed by the per-process suffix.
  kc -n "$OPERATOR_NAMESPACE" wait --for=condition=Ready pod \
    -l "app.kubernetes.io/instance=$RELEASE,app.kubernetes.io/component=operator" --timeout=180s
  local holder leader
  holder=$(kc -n "$OPERATOR_NAMESPACE" get lease "$RELEASE" -o 'jsonpath={.spec.holderIdentity}')
  leader=$(kc -n "$OPERATOR_NAMESPACE" get pods \
    -l "app.kubernetes.io/instance=$RELEASE,app.kubernetes.io/component=operator" \
    -o 'jsonpath={.items[?(@.status.containerStatuses[0].ready==true)].metadata.name}')
  [[ -n $leader && $holder == "${leader}_"* ]] ||
    fail "the Lease $RELEASE is held by '$holder', not by the ready operator pod '$leader'"
  printf '    ok: the operator pod %s holds the Lease %s\n' "$leader" "$RELEASE"

  say "applying run/$RUN"
  kc -n "$NAMESPACE" apply -f "$WORK/run.json"
  wait_state humanReview "$WAIT_S"

  say "approving at humanReview"
  kc -n "$NAMESPACE" patch run "$RUN" --type=json \
    -p '[{"op": "add", "path": "/spec/signals/-", "value": {"id": "approve-1", "event": "approve"}}]'
  kc -n "$NAMESPACE" wait --for=jsonpath='{.status.phase}'=Succeeded "run/$RUN" --timeout=180s
  wait_turns 4 120
  wait_agentturns_settled 60

  say "checking the settlements"
  kc get agentturns,runs,workspaces -A
  kc -n "$NAMESPACE" get run "$RUN" -o \
    jsonpath='{range .status.turns[*]}{.agent}{"\t"}{.state}{"\t"}{.outcome}{"\t"}{.cause}{"\n"}{end}'
  local outcomes causes states signals
  outcomes=$(run_field '{.status.turns[*].outcome}')
  causes=$(run_field '{.status.turns[*].cause}')
  states=$(run_field '{.status.turns[*].state}')
  signals=$(run_field '{range .status.processedSignals[*]}{.id}:{.result}{end}')
  # Each Turn ended by its own pick: the sweep named the running Submission, and the
  # Harness settled it `ended` (the outcome table of docs/turn-semantics.md), across real pods and Services.
  expect "Turn outcomes" "$outcomes" "ended ended ended ended"
  expect "Turn causes" "$causes" "pick pick pick pick"
  expect "Turn states" "$states" "implementing reviewing fixing reviewing"
  expect "processed signals" "$signals" "approve-1:handled"
  # And wait_agentturns_settled saw every AgentTurn's sweep finalizer run: no Turn is
  # left running on a Harness; each stays listed, Settled, with its outcome and cause.
  local listed left
  listed=$(kc -n "$NAMESPACE" get agentturns --no-headers | awk '{print $5, $6, $7}' | sort | uniq -c |
    awk '{print $1, $2, $3, $4}')
  expect "AgentTurns listed" "$listed" "4 Settled ended pick"
  say "deleting run/$RUN: its kept AgentTurns go with it"
  kc -n "$NAMESPACE" delete run "$RUN" --timeout=120s
  left=$(kc -n "$NAMESPACE" get agentturns -o name)
  expect "AgentTurns left" "$left" ""
}

if [[ ${1:-} == render ]]; then
  [[ -n ${2:-} ]] || fail "usage: $0 render DIR"
  render "$2"
  echo "wrote run.json, script.yaml, values.yaml and support.yaml into $2"
elif [[ $# -eq 0 ]]; then
  main
else
  fail "usage: $0 [render DIR]"
fi
