{{- define "situate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "situate.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "situate.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "situate.secretName" -}}
{{- .Values.secrets.existingSecret | default (printf "%s-secrets" (include "situate.fullname" .)) -}}
{{- end -}}

{{/* The queues a worker kind consumes, comma-separated: "contextualize" means every shard. */}}
{{- define "situate.queues" -}}
{{- $queues := list -}}
{{- if eq (toString .kind.queues) "contextualize" -}}
{{- range $i := until (int .root.Values.settings.shards) -}}{{- $queues = append $queues (printf "contextualize.%d" $i) -}}{{- end -}}
{{- else -}}
{{- $queues = .kind.queues -}}
{{- end -}}
{{- join "," $queues -}}
{{- end -}}

{{/* A scale-down must never cut a task short: SIGTERM starts a warm shutdown, and the pod
     has as long as the longest task may run, and a minute to hand back what it holds. */}}
{{- define "situate.gracePeriod" -}}
{{- add (int .Values.settings.taskTimeLimitS) 60 -}}
{{- end -}}

{{- define "situate.env" -}}
{{- if .Values.redis.urlSecret.name }}
- name: SITUATE_REDIS_URL
  valueFrom: { secretKeyRef: { name: {{ .Values.redis.urlSecret.name }}, key: {{ .Values.redis.urlSecret.key }} } }
{{- else if .Values.redis.enabled }}
- name: SITUATE_REDIS_URL
  value: {{ printf "redis://%s-redis:6379/0" (include "situate.fullname" .) | quote }}
{{- else }}
- name: SITUATE_REDIS_URL
  value: {{ required "redis.url (or redis.urlSecret, or redis.enabled) is required" .Values.redis.url | quote }}
{{- end }}
{{- if .Values.opensearch.urlSecret.name }}
- name: SITUATE_OPENSEARCH_URL
  valueFrom: { secretKeyRef: { name: {{ .Values.opensearch.urlSecret.name }}, key: {{ .Values.opensearch.urlSecret.key }} } }
{{- else }}
- name: SITUATE_OPENSEARCH_URL
  value: {{ required "opensearch.url (or opensearch.urlSecret) is required" .Values.opensearch.url | quote }}
{{- end }}
- name: SITUATE_SHARDS
  value: {{ .Values.settings.shards | quote }}
- name: SITUATE_TASK_TIME_LIMIT_S
  value: {{ .Values.settings.taskTimeLimitS | quote }}
{{- range $name, $value := .Values.env }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}

{{- define "situate.envFrom" -}}
- secretRef: { name: {{ include "situate.secretName" . }} }
{{- end -}}

{{- define "situate.podSpecCommon" -}}
securityContext: {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  # A read-only root: the worker's liveness file and the extraction sandbox's scratch go here.
  - { name: tmp, emptyDir: {} }
  - { name: home, emptyDir: {} }
{{- end -}}

{{- define "situate.mounts" -}}
volumeMounts:
  - { name: tmp, mountPath: /tmp }
  - { name: home, mountPath: /home/situate }
{{- end -}}
