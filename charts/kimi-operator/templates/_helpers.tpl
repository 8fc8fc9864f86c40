{{/* Chart name, truncated to a DNS label. */}}
{{- define "kimi-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects. */}}
{{- define "kimi-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kimi-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Standard labels of every object. */}}
{{- define "kimi-operator.labels" -}}
helm.sh/chart: {{ include "kimi-operator.chart" . }}
{{ include "kimi-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kimi-operator
{{- end }}

{{/* Labels that select the operator's pods. */}}
{{- define "kimi-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kimi-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "kimi-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kimi-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag, or repository@digest when a digest is set. */}}
{{- define "kimi-operator.imageRef" -}}
{{- if .digest }}
{{- printf "%s@%s" .repository .digest }}
{{- else }}
{{- printf "%s:%s" .repository .tag }}
{{- end }}
{{- end }}

{{- define "kimi-operator.image" -}}
{{- $image := .Values.image }}
{{- include "kimi-operator.imageRef" (dict "repository" $image.repository "tag" (default .Chart.AppVersion $image.tag) "digest" $image.digest) }}
{{- end }}

{{- define "kimi-operator.servingImage" -}}
{{- include "kimi-operator.imageRef" .Values.servingImage }}
{{- end }}

{{/*
What the operator does in the namespaces it watches, as RBAC rules: exactly the API calls of
operator/kimi_operator/k8s/ (tests/chart/test_rbac.py compares them with the calls an
operator run makes). No wildcards.
*/}}
{{- define "kimi-operator.namespacedRules" -}}
# Watch KimiDeployments; read one before a resync.
- apiGroups: ["kimi-operator.io"]
  resources: ["kimideployments"]
  verbs: ["get", "list", "watch"]
# The operator writes the status (conditions, observedGeneration, endpoint).
- apiGroups: ["kimi-operator.io"]
  resources: ["kimideployments/status"]
  verbs: ["patch"]
# Children carry ownerReferences with blockOwnerDeletion: true, which the
# OwnerReferencesPermissionEnforcement admission plugin (OpenShift, hardened clusters) allows only
# to who may update the owner's finalizers.
- apiGroups: ["kimi-operator.io"]
  resources: ["kimideployments/finalizers"]
  verbs: ["update"]
# The children of a KimiDeployment: listed by label and deleted once the spec no longer has them
# (and adopting one whose ownerReference was removed needs delete on it, by the same plugin); the
# groups and domains are watched too (their status changes refresh the owner's status at once).
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["resource.nvidia.com"]
  resources: ["computedomains"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "create", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "create", "patch", "delete"]
- apiGroups: ["monitoring.coreos.com"]
  resources: ["podmonitors"]
  verbs: ["get", "list", "create", "patch", "delete"]
# The weights caches of Hugging Face sources (docs/weights.md): resolve and download Jobs and
# the claims they fill, watched (their status refreshes the deployments using them), listed by
# label and deleted or released when no longer used (ownerReferences are changed, hence delete).
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# A stored calibration's schedule (spec.autoscaling.slo.calibration.schedule): its CronJob,
# listed by label and deleted with the schedule; its ServiceAccount, Role and RoleBinding are
# those below (the Role grants get and patch on the one ConfigMap, and create on ConfigMaps,
# which the operator holds). Its running Jobs (above) are listed: their load is not demand.
- apiGroups: ["batch"]
  resources: ["cronjobs"]
  verbs: ["get", "list", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# spec.autoscaling: a KEDA ScaledObject, or an HPA where KEDA is not installed; with its slo,
# listed: another one on the deployment's count is refused (docs/scaling.md).
- apiGroups: ["keda.sh"]
  resources: ["scaledobjects"]
  verbs: ["get", "list", "create", "patch", "delete"]
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["get", "list", "create", "patch", "delete"]
# spec.routing.mode InferencePool (docs/routing.md): the pool and the route from a Gateway, and
# the endpoint picker's Deployment, Service (above), ConfigMap, ServiceAccount, Role and
# RoleBinding; the Gateway is read for its address (status.endpoint).
- apiGroups: ["inference.networking.k8s.io"]
  resources: ["inferencepools"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["httproutes"]
  verbs: ["get", "list", "create", "patch", "delete"]
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["gateways"]
  verbs: ["get"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["configmaps", "serviceaccounts"]
  verbs: ["get", "list", "create", "patch", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "create", "patch", "delete"]
# What the endpoint picker's Role grants, which Kubernetes lets the operator grant only if it
# holds it too: its InferenceObjectives and InferenceModelRewrites (either group), read.
- apiGroups: ["inference.networking.x-k8s.io", "llm-d.ai"]
  resources: ["inferenceobjectives", "inferencemodelrewrites"]
  verbs: ["get", "list", "watch"]
# Pods, listed: a weights Job's result (commit, size, progress, failure) is its pod's termination
# message (the Job itself gets no API access); and whether the scheduler left a group's pods
# Pending (InsufficientCapacity). get and watch: the endpoint picker's Role grants them. patch:
# a group leaving is taken out of routing before it is deleted, its leaders' label
# kimi-operator.io/routable set to "false" (docs/group-lifecycle.md, "Leaving").
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "patch"]
# Warning Events on KimiDeployments.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end }}


{{/* The admission webhook's objects: its name, and the labels that select its pods. */}}
{{- define "kimi-operator.webhookName" -}}
{{- printf "%s-webhook" (include "kimi-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kimi-operator.webhookSelectorLabels" -}}
app.kubernetes.io/name: {{ include "kimi-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: admission-webhook
{{- end }}

{{- define "kimi-operator.webhookLabels" -}}
helm.sh/chart: {{ include "kimi-operator.chart" . }}
{{ include "kimi-operator.webhookSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kimi-operator
{{- end }}
