{{/*
Names are fixed, not derived from the release name: the admission policy, the agents and the
allocator know their ServiceAccounts, Leases and labels by these names, and they are the
kustomization's (deploy/), so that an install can move from one to the other. One release per
cluster.
*/}}

{{/* The labels of every object: the kustomization's, and Helm's own. */}}
{{- define "announcer.labels" -}}
app.kubernetes.io/name: announcer
app.kubernetes.io/part-of: announcer
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The image: repository@digest when a digest is given, else repository:tag (tag defaults to the chart's appVersion). */}}
{{- define "announcer.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion | toString }}
{{- end -}}
{{- end }}

{{/* config.yaml of the agents, from .Values.config (stateDir and
announcement.refreshInterval only when set: empty means the agent's default). */}}
{{- define "announcer.config" -}}
{{- $config := omit .Values.config "stateDir" "announcement" -}}
{{- if .Values.config.stateDir -}}
{{- $_ := set $config "stateDir" .Values.config.stateDir -}}
{{- end -}}
{{- $announcement := omit .Values.config.announcement "refreshInterval" -}}
{{- if .Values.config.announcement.refreshInterval -}}
{{- $_ := set $announcement "refreshInterval" .Values.config.announcement.refreshInterval -}}
{{- end -}}
{{- $_ := set $config "announcement" $announcement -}}
{{ toYaml $config }}
{{- end }}
