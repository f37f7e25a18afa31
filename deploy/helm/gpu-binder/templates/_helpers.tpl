{{/* The chart's name, and the full name objects are named after (gpu-binder by default). */}}
{{- define "gpu-binder.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpu-binder.fullname" -}}
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

{{- define "gpu-binder.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object; selector labels of a component (binder or agent). */}}
{{- define "gpu-binder.labels" -}}
helm.sh/chart: {{ include "gpu-binder.chart" . }}
app.kubernetes.io/name: {{ include "gpu-binder.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "gpu-binder.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-binder.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "gpu-binder.componentLabels" -}}
{{ include "gpu-binder.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Names derived from the full name. */}}
{{- define "gpu-binder.binderServiceAccount" -}}
{{- default (include "gpu-binder.fullname" .) .Values.binder.serviceAccount.name }}
{{- end }}

{{- define "gpu-binder.agentServiceAccount" -}}
{{- default (printf "%s-agent" (include "gpu-binder.fullname" .)) .Values.agent.serviceAccount.name }}
{{- end }}

{{- define "gpu-binder.serviceName" -}}
{{- default (printf "%s-webhook" (include "gpu-binder.fullname" .)) .Values.service.name }}
{{- end }}

{{- define "gpu-binder.clientCASecretName" -}}
{{- default (printf "%s-webhook-client-ca" (include "gpu-binder.fullname" .)) .Values.webhook.clientAuth.caSecretName }}
{{- end }}

{{- define "gpu-binder.tlsSecretName" -}}
{{- default (printf "%s-webhook-tls" (include "gpu-binder.fullname" .)) .Values.webhook.secretName }}
{{- end }}

{{- define "gpu-binder.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* GPU_BINDER_<FLAG> variables from a map of camelCase flags to values. */}}
{{- define "gpu-binder.configEnv" -}}
{{- range $key, $value := . }}
- name: GPU_BINDER_{{ $key | snakecase | upper }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end }}
