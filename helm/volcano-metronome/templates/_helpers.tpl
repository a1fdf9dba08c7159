{{/* Chart name, overridable. */}}
{{- define "metronome.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix of every object name: the release name, plus the chart name unless the release name has it.
Kept to 40 characters so that the longest suffix ("-controller-metrics") stays within 63. */}}
{{- define "metronome.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "metronome.webhookName" -}}{{ include "metronome.fullname" . }}-webhook{{- end -}}
{{- define "metronome.controllerName" -}}{{ include "metronome.fullname" . }}-controller{{- end -}}
{{- define "metronome.certsName" -}}{{ include "metronome.fullname" . }}-certs{{- end -}}
{{- define "metronome.tlsSecretName" -}}{{ include "metronome.fullname" . }}-webhook-tls{{- end -}}
{{- define "metronome.leaseName" -}}{{ include "metronome.fullname" . }}-controller{{- end -}}
{{/* The MutatingWebhookConfiguration is cluster-scoped: the release name keeps releases apart. */}}
{{- define "metronome.webhookConfigurationName" -}}{{ include "metronome.fullname" . }}{{- end -}}

{{- define "metronome.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "metronome.labels" -}}
helm.sh/chart: {{ include "metronome.chart" . }}
app.kubernetes.io/name: {{ include "metronome.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: volcano-metronome
{{- end -}}

{{/* Selector labels of one component; call with (dict "root" $ "component" "webhook"). */}}
{{- define "metronome.selectorLabels" -}}
app.kubernetes.io/name: {{ include "metronome.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "metronome.componentLabels" -}}
{{ include "metronome.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "metronome.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Pod Security Standard "restricted": the pod part. The image runs as uid/gid 65532. */}}
{{- define "metronome.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Pod Security Standard "restricted": the container part. */}}
{{- define "metronome.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Environment common to every container: who and where the pod is (leader election, events). */}}
{{- define "metronome.podEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: PYTHONDONTWRITEBYTECODE
  value: "1"
- name: PYTHONUNBUFFERED
  value: "1"
- name: HOME
  value: /tmp
{{- end -}}

{{/* Default pod anti-affinity: replicas of one component prefer different nodes. */}}
{{- define "metronome.affinity" -}}
{{- if .affinity -}}
{{ toYaml .affinity }}
{{- else -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "metronome.selectorLabels" (dict "root" .root "component" .component) | nindent 12 }}
{{- end -}}
{{- end -}}

{{/* The namespaces the webhook sees: everything but kube-system (by default) and the release namespace. */}}
{{- define "metronome.webhookNamespaceSelector" -}}
namespaceSelector:
  {{- with .Values.webhook.namespaceLabels }}
  matchLabels:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values:
        {{- range (append .Values.webhook.excludedNamespaces .Release.Namespace | uniq) }}
        - {{ . | quote }}
        {{- end }}
{{- end -}}

{{/* Fields every webhook of the configuration shares. */}}
{{- define "metronome.webhookCommon" -}}
admissionReviewVersions: ["v1"]
sideEffects: None
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
matchPolicy: Equivalent
clientConfig:
  service:
    name: {{ include "metronome.webhookName" . }}
    namespace: {{ .Release.Namespace }}
    path: /mutate
    port: 443
{{ include "metronome.webhookNamespaceSelector" . }}
{{- end -}}

{{/* controller.yaml: the values' settings, with the keys the chart must own to stay consistent with
the objects it renders (the Lease RBAC is limited to one name; probes and Service use port 8080). */}}
{{- define "metronome.controllerConfig" -}}
{{- $owned := dict "namespace" .Release.Namespace "healthPort" 8080 "leaderElection" (dict "leaseName" (include "metronome.leaseName" .)) -}}
{{- toYaml (mergeOverwrite (deepCopy .Values.controller.config) $owned) -}}
{{- end -}}

{{/*
The webhook's settings: its values plus two of the controller's, each with one source: the hyperperiod
cap, so that the webhook refuses exactly the periods the controller could never place
(controller.config.maxHyperperiodMs), and the NIC line rate catalog models are resolved at
(controller.config.defaultCapacities.nicGbps).
*/}}
{{- define "metronome.webhookConfig" -}}
{{- $caps := .Values.controller.config.defaultCapacities | default dict -}}
{{- $owned := dict "maxHyperperiodMs" (.Values.controller.config.maxHyperperiodMs | default 25200) "lineRateGbps" ($caps.nicGbps | default 100) -}}
{{- toYaml (mergeOverwrite (deepCopy .Values.webhook.config) $owned) -}}
{{- end -}}
