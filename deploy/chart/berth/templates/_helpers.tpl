{{/*
<fullname>: fullnameOverride, else the release name if it contains "berth", else
<release>-berth. Kept to 40 characters so "<fullname>-plugin-server" fits a label value.
*/}}
{{- define "berth.fullname" -}}
{{- $name := .Values.fullnameOverride -}}
{{- if not $name -}}
{{- if contains "berth" .Release.Name -}}
{{- $name = .Release.Name -}}
{{- else -}}
{{- $name = printf "%s-berth" .Release.Name -}}
{{- end -}}
{{- end -}}
{{- $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "berth.scheduler.name" -}}
{{- printf "%s-scheduler" (include "berth.fullname" .) -}}
{{- end -}}

{{- define "berth.server.name" -}}
{{- printf "%s-plugin-server" (include "berth.fullname" .) -}}
{{- end -}}

{{- define "berth.config.name" -}}
{{- printf "%s-scheduler-config" (include "berth.fullname" .) -}}
{{- end -}}

{{- define "berth.server.secret" -}}
{{- .Values.tls.serverSecretName | default (printf "%s-tls" (include "berth.server.name" .)) -}}
{{- end -}}

{{- define "berth.scheduler.secret" -}}
{{- .Values.tls.schedulerSecretName | default (printf "%s-tls" (include "berth.scheduler.name" .)) -}}
{{- end -}}

{{/* The plugin servers' Service host: the name the shim dials and verifies. */}}
{{- define "berth.server.host" -}}
{{- printf "%s.%s.svc.%s" (include "berth.server.name" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{- define "berth.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "berth.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: berth
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Selectors: the name label (which deploy/base selects by) and the release. */}}
{{- define "berth.scheduler.selector" -}}
app.kubernetes.io/name: {{ include "berth.scheduler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "berth.server.selector" -}}
app.kubernetes.io/name: {{ include "berth.server.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* A Deployment's (and its pods' and Service's) labels: the common ones and the name. */}}
{{- define "berth.scheduler.labels" -}}
{{ include "berth.labels" . }}
app.kubernetes.io/name: {{ include "berth.scheduler.name" . }}
app.kubernetes.io/component: scheduler
{{- end -}}

{{- define "berth.server.labels" -}}
{{ include "berth.labels" . }}
app.kubernetes.io/name: {{ include "berth.server.name" . }}
app.kubernetes.io/component: plugin-server
{{- end -}}

{{/*
The KubeSchedulerConfiguration: .Values.config with the chart's apiVersion, kind and
leaderElection.
*/}}
{{- define "berth.schedulerConfig" -}}
{{- range $key := list "apiVersion" "kind" "leaderElection" -}}
{{- if hasKey $.Values.config $key -}}
{{- fail (printf "values: config.%s is set by the chart (leaderElection from scheduler.leaderElection); remove it from config" $key) -}}
{{- end -}}
{{- end -}}
{{- if not .Values.config.profiles -}}
{{- fail "values: config.profiles is empty; name at least one profile (schedulerName) for Berth to schedule" -}}
{{- end -}}
{{- range .Values.config.profiles -}}
{{- if or (not .schedulerName) (eq .schedulerName "default-scheduler") -}}
{{- fail "values: every config.profiles entry needs a schedulerName other than default-scheduler (kube-scheduler's); Berth runs beside it as a second scheduler" -}}
{{- end -}}
{{- end -}}
{{- if and (gt (int .Values.scheduler.replicas) 1) (not .Values.scheduler.leaderElection.enabled) -}}
{{- fail "values: scheduler.replicas > 1 needs scheduler.leaderElection.enabled: without it every replica would schedule the same pods" -}}
{{- end -}}
{{- $le := dict "leaderElect" .Values.scheduler.leaderElection.enabled "resourceLock" "leases" "resourceNamespace" .Release.Namespace "resourceName" (include "berth.scheduler.name" .) -}}
{{- range $key := list "leaseDuration" "renewDeadline" "retryPeriod" -}}
{{- with (index $.Values.scheduler.leaderElection $key) -}}
{{- $_ := set $le $key . -}}
{{- end -}}
{{- end -}}
{{- $cfg := merge (dict "apiVersion" "kubescheduler.config.k8s.io/v1" "kind" "KubeSchedulerConfiguration" "leaderElection" $le) (deepCopy .Values.config) -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* The out-of-tree plugin image volumes' mounts and PYTHONPATH, for both containers. */}}
{{- define "berth.plugins.env" -}}
{{- with .Values.outOfTreePlugins.images }}
env:
  - name: PYTHONPATH
    value: {{ include "berth.plugins.paths" $ | quote }}
{{- end }}
{{- end -}}

{{- define "berth.plugins.paths" -}}
{{- $paths := list -}}
{{- range .Values.outOfTreePlugins.images -}}
{{- $paths = append $paths (printf "/opt/berth-plugins/%s" .name) -}}
{{- end -}}
{{- join ":" $paths -}}
{{- end -}}

{{- define "berth.plugins.mounts" -}}
{{- range .Values.outOfTreePlugins.images }}
- name: plugin-{{ .name }}
  mountPath: /opt/berth-plugins/{{ .name }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "berth.plugins.volumes" -}}
{{- range .Values.outOfTreePlugins.images }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,45}[a-z0-9])?$" (.name | default "")) }}
{{- fail (printf "values: outOfTreePlugins.images: name %q must be lower-case letters, digits and '-', at most 47 characters (it names a volume and a directory)" (.name | default "")) }}
{{- end }}
{{- if not .reference }}
{{- fail (printf "values: outOfTreePlugins.images %s: reference (the image) is required" .name) }}
{{- end }}
- name: plugin-{{ .name }}
  image:
    reference: {{ .reference | quote }}
    pullPolicy: {{ .pullPolicy | default "IfNotPresent" }}
{{- end }}
{{- end -}}
