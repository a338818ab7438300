{{/* The release's base name: every object's name starts with it. */}}
{{- define "kiln.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kiln.labels" -}}
app.kubernetes.io/part-of: kiln
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: kiln, etcd or store. */}}
{{- define "kiln.selector" -}}
app.kubernetes.io/name: {{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{- define "kiln.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "kiln.credentialsSecret" -}}
{{- default (printf "%s-credentials" (include "kiln.fullname" .)) .Values.credentials.existingSecret -}}
{{- end -}}

{{- define "kiln.storeSecret" -}}
{{- default (printf "%s-store-credentials" (include "kiln.fullname" .)) .Values.store.existingSecret -}}
{{- end -}}

{{/* etcd's client URLs, comma separated: every member's, by its stable name. */}}
{{- define "kiln.etcdEndpoints" -}}
{{- if .Values.etcd.enabled -}}
{{- $fullname := include "kiln.fullname" . -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.etcd.replicas) -}}
{{- $urls = append $urls (printf "http://%s-etcd-%d.%s-etcd-peers.%s.svc:2379" $fullname $i $fullname $.Release.Namespace) -}}
{{- end -}}
{{- join "," $urls -}}
{{- else -}}
{{- if not .Values.etcd.endpoints -}}
{{- fail "etcd.endpoints is needed with etcd.enabled=false" -}}
{{- end -}}
{{- join "," .Values.etcd.endpoints -}}
{{- end -}}
{{- end -}}

{{- define "kiln.storeEndpoint" -}}
{{- if .Values.store.enabled -}}
{{- printf "http://%s-store.%s.svc:9001" (include "kiln.fullname" .) .Release.Namespace -}}
{{- else -}}
{{- if not .Values.store.existingSecret -}}
{{- fail "store.existingSecret (access-key, secret-key) is needed with store.enabled=false" -}}
{{- end -}}
{{- required "store.endpoint is needed with store.enabled=false" .Values.store.endpoint -}}
{{- end -}}
{{- end -}}
