{{/*
Names, labels and the operator's RBAC rules, shared by every template.
*/}}

{{/* The chart's name: `kubeturn` unless overridden. */}}
{{- define "kubeturn.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name: `<release>-kubeturn`, or the release name alone when it already holds the
chart's name. Kept to 50 characters so `<fullname>-orchestrator` stays a valid Service
name (63).
*/}}
{{- define "kubeturn.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The name of cluster-scoped objects (ClusterRole, ClusterRoleBinding): the full name plus
the release's namespace, so releases of one name in two namespaces do not collide.
*/}}
{{- define "kubeturn.clusterName" -}}
{{- printf "%s-%s" (include "kubeturn.fullname" .) .Release.Namespace }}
{{- end }}

{{- define "kubeturn.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels of the operator pods. `component: operator` keeps them apart from the
sandbox pods (`component: sandbox`) and push pods (`component: delivery`), which share
app.kubernetes.io/name.
*/}}
{{- define "kubeturn.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubeturn.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Labels of every object the chart renders. */}}
{{- define "kubeturn.labels" -}}
helm.sh/chart: {{ include "kubeturn.chart" . }}
{{ include "kubeturn.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kubeturn
{{- end }}

{{/* The operator's ServiceAccount name. */}}
{{- define "kubeturn.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kubeturn.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* `repository:tag`, the tag defaulting to the chart's appVersion. */}}
{{- define "kubeturn.image" -}}
{{- printf "%s:%s" .image.repository (default .chart.AppVersion .image.tag) }}
{{- end }}

{{/* The Lease the operator pods elect their leader by (in the release's namespace). */}}
{{- define "kubeturn.leaseName" -}}
{{- default (include "kubeturn.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/* Where Harness pods reach the Orchestrator API. */}}
{{- define "kubeturn.orchestratorUrl" -}}
{{- printf "http://%s-orchestrator.%s.svc:8081" (include "kubeturn.fullname" .) .Release.Namespace }}
{{- end }}

{{/*
The providers file, in the Harness's format (name → {type, baseUrl, apiKeyEnv?,
maxTokens?, retry?, timeouts?, pricing?}); the Harness refuses unknown keys, so apiKeySecret stays
out of it.
*/}}
{{- define "kubeturn.providersYaml" -}}
{{- $providers := dict }}
{{- range $name, $provider := .Values.providers }}
{{- $entry := dict "type" (default "openai" $provider.type) "baseUrl" $provider.baseUrl }}
{{- if $provider.apiKeyEnv }}
{{- $_ := set $entry "apiKeyEnv" $provider.apiKeyEnv }}
{{- end }}
{{- if $provider.maxTokens }}
{{- $_ := set $entry "maxTokens" $provider.maxTokens }}
{{- end }}
{{- if $provider.retry }}
{{- $_ := set $entry "retry" $provider.retry }}
{{- end }}
{{- if $provider.timeouts }}
{{- $_ := set $entry "timeouts" $provider.timeouts }}
{{- end }}
{{- if $provider.pricing }}
{{- $_ := set $entry "pricing" $provider.pricing }}
{{- end }}
{{- $_ := set $providers $name $entry }}
{{- end }}
{{- if $providers }}
{{- toYaml $providers }}
{{- else }}
{{- "{}" }}
{{- end }}
{{- end }}

{{/*
The operator's rules in a watched namespace (a Role there, or the ClusterRole when every
namespace is watched): what its requests use, and nothing more. One list, so the two
shapes cannot drift apart; the operator tier runs the operator with these rules in both
shapes and fails on a request they refuse, or on a rule no request used
(tests/operator/test_chart_rbac.py). ADR 0039.
- runs: kopf watches them and patches its finalizer and annotations; the operator reads
  them (a Run's Workspace lists them) and patches their status. Never made or deleted.
- workspaces: watched; made from a Run's template; patched by kopf; status patched.
- agentturns (one per Turn): the whole lifecycle (a sweep deletes one).
- runs/finalizers, workspaces/finalizers, update: the objects the operator makes name
  their owner with blockOwnerDeletion, which the OwnerReferencesPermissionEnforcement
  admission plugin allows only to who may update the owner's finalizers.
- pods: the sandbox Pod, and the short-lived Pod that pushes a Run's delivered branch
  (ADR 0065), read, made and deleted by name; list and watch for kopf's watch of sandbox
  Pods, which a label selector narrows but RBAC cannot (it does not see labels).
- secrets: the Workspace's token Secret, read, made and deleted by name (deleted when its
  tokens are rotated, or when it is an earlier Workspace's of the name, ADR 0043). Never
  listed or watched: RBAC cannot narrow those to kubeturn's Secrets, so that would be
  reading every Secret there (ADR 0040).
- configmaps (the providers file) and networkpolicies (the sandbox's): read, made, and
  patched when they drift; persistentvolumeclaims: read and made. By name; the garbage
  collector deletes them with their Workspace, and a Workspace made again waits for an
  earlier one's rather than delete it (ADR 0043).
- events, core: the operator's and kopf's Events are created, never patched.
*/}}
{{- define "kubeturn.namespacedRules" -}}
- apiGroups: ["kubeturn.dev"]
  resources: ["runs"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["kubeturn.dev"]
  resources: ["workspaces"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["kubeturn.dev"]
  resources: ["agentturns"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["kubeturn.dev"]
  resources: ["runs/status", "workspaces/status", "agentturns/status"]
  verbs: ["patch"]
- apiGroups: ["kubeturn.dev"]
  resources: ["runs/finalizers", "workspaces/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "delete"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "create", "patch"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "create", "patch"]
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "create"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end }}

{{/*
The label selector of the operator's pods as `k=v,k=v`, for the operator's per-Workspace
NetworkPolicy (KUBETURN_OPERATOR_LABELS).
*/}}
{{- define "kubeturn.selectorString" -}}
{{- $labels := include "kubeturn.selectorLabels" . | fromYaml }}
{{- $pairs := list }}
{{- range $key := keys $labels | sortAlpha }}
{{- $pairs = append $pairs (printf "%s=%s" $key (get $labels $key)) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}
