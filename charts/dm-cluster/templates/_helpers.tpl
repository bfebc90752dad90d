{{- define "dm.operatorName" -}}
{{- printf "%s-operator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "dm.clusterName" -}}
{{- default .Release.Name .Values.cluster.name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "dm.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "dm.labels" -}}
app.kubernetes.io/name: dm
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: dm
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "dm.operatorSelector" -}}
app.kubernetes.io/name: dm
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/* The namespaces the operator serves (watch.allNamespaces aside): the list, or the release's. */}}
{{- define "dm.watchedNamespaces" -}}
{{- if .Values.watch.namespaces -}}
{{- join "," .Values.watch.namespaces -}}
{{- else -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* The names of .Values.imagePullSecrets, comma-separated (brokers pull with the same Secrets). */}}
{{- define "dm.pullSecretNames" -}}
{{- $names := list -}}
{{- range .Values.imagePullSecrets -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- join "," $names -}}
{{- end -}}
