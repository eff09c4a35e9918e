{{/*
Names and labels, following the prometheus-community charts.
Every template here takes this chart's scope: the root context inside this chart, or
(index .Subcharts "trainlog-exporter") from a parent chart.
*/}}

{{- define "trainlog-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name, truncated to 63 characters (the DNS label limit).
*/}}
{{- define "trainlog-exporter.fullname" -}}
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

{{- define "trainlog-exporter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "trainlog-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trainlog-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "trainlog-exporter.labels" -}}
helm.sh/chart: {{ include "trainlog-exporter.chart" . }}
{{ include "trainlog-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: trainlog-exporter
{{- end }}

{{- define "trainlog-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "trainlog-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "trainlog-exporter.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
The followed directories, one a line: logs.dirs under logs.mountPath, or mountPath itself.
*/}}
{{- define "trainlog-exporter.logDirs" -}}
{{- $mountPath := trimSuffix "/" .Values.logs.mountPath }}
{{- $dirs := list }}
{{- range (.Values.logs.dirs | default (list $mountPath)) }}
{{- $dirs = append $dirs (ternary . (printf "%s/%s" $mountPath .) (isAbs .)) }}
{{- end }}
{{- join "\n" $dirs }}
{{- end }}

{{/*
The command line: every followed directory, then the user's extra options.
*/}}
{{- define "trainlog-exporter.args" -}}
{{- range (include "trainlog-exporter.logDirs" . | splitList "\n") }}
- {{ printf "--log-dir=%s" . | quote }}
{{- end }}
- {{ printf "--web.listen-address=:%v" .Values.port | quote }}
{{- with .Values.run }}
- {{ printf "--run=%s" . | quote }}
{{- end }}
{{- if .Values.stateFile.enabled }}
- {{ printf "--state-file=%s/state.json" (trimSuffix "/" .Values.stateFile.mountPath) | quote }}
{{- end }}
{{- if .Values.webConfig.secretName }}
- {{ printf "--web.config.file=%s/web-config.yml" (trimSuffix "/" .Values.webConfig.mountPath) | quote }}
{{- end }}
{{- include "trainlog-exporter.hostLogArgs" . }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
The node's own logs (hostLogs): CANN's process logs as another log directory of the run, the
kernel log as a single file. Each needs the job's run label on every source (a plog counts on
the rank of its worker's log only within one run): `run`, or the sidecar's pod label.
*/}}
{{- define "trainlog-exporter.hostLogArgs" -}}
{{- $process := .Values.hostLogs.processLogs }}
{{- $kernel := .Values.hostLogs.kernelLog }}
{{- if and (or $process.enabled $kernel.enabled) (not .Values.run) (not (and (eq .Values.mode "sidecar") .Values.sidecar.runFromPodLabel)) }}
{{- fail "hostLogs: set run (or, in sidecar mode, sidecar.runFromPodLabel): the node's logs and the worker logs must be one run" }}
{{- end }}
{{- if $process.enabled }}
- {{ printf "--log-dir=%s" (trimSuffix "/" $process.mountPath) | quote }}
{{- if $process.pidRanks }}
- "--plog-ranks"
{{- end }}
{{- end }}
{{- if $kernel.enabled }}
- {{ printf "--log-file=%s/%s" (trimSuffix "/" $kernel.mountPath) $kernel.file | quote }}
{{- end }}
{{- end }}

{{/*
Downward API: NODE_NAME is the exporter's default node label; POD_NAME and POD_NAMESPACE
tell which pod a series came from when reading logs; TRAINLOG_RUN from a pod label.
*/}}
{{- define "trainlog-exporter.env" -}}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- if and (eq .Values.mode "sidecar") (not .Values.run) .Values.sidecar.runFromPodLabel }}
- name: TRAINLOG_RUN
  valueFrom:
    fieldRef:
      fieldPath: metadata.labels['{{ .Values.sidecar.runFromPodLabel }}']
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The exporter container, shared by the standalone pods and the sidecar.
*/}}
{{- define "trainlog-exporter.container" -}}
name: trainlog-exporter
image: {{ include "trainlog-exporter.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
args:
  {{- include "trainlog-exporter.args" . | trim | nindent 2 }}
env:
  {{- include "trainlog-exporter.env" . | nindent 2 }}
ports:
  - name: {{ .Values.portName }}
    containerPort: {{ .Values.port }}
    protocol: TCP
{{- with .Values.livenessProbe }}
livenessProbe:
  {{- include "trainlog-exporter.probe" (list $ .) | nindent 2 }}
{{- end }}
{{- with .Values.readinessProbe }}
readinessProbe:
  {{- include "trainlog-exporter.probe" (list $ .) | nindent 2 }}
{{- end }}
resources:
  {{- toYaml .Values.resources | nindent 2 }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
volumeMounts:
  - name: {{ .Values.logs.volumeName }}
    mountPath: {{ .Values.logs.mountPath }}
    readOnly: true
  {{- if .Values.stateFile.enabled }}
  - name: trainlog-state
    mountPath: {{ .Values.stateFile.mountPath }}
  {{- end }}
  {{- if .Values.webConfig.secretName }}
  - name: trainlog-web-config
    mountPath: {{ .Values.webConfig.mountPath }}
    readOnly: true
  {{- end }}
  {{- if .Values.hostLogs.processLogs.enabled }}
  - name: trainlog-process-logs
    mountPath: {{ .Values.hostLogs.processLogs.mountPath }}
    readOnly: true
  {{- end }}
  {{- if .Values.hostLogs.kernelLog.enabled }}
  - name: trainlog-kernel-log
    mountPath: {{ .Values.hostLogs.kernelLog.mountPath }}
    readOnly: true
  {{- end }}
{{- end }}

{{/*
A probe from values: an httpGet probe switches to HTTPS when the web config serves TLS.
Takes (list scope probe).
*/}}
{{- define "trainlog-exporter.probe" -}}
{{- $scope := index . 0 }}
{{- $probe := deepCopy (index . 1) }}
{{- if and $scope.Values.webConfig.tls $probe.httpGet }}
{{- $_ := set $probe.httpGet "scheme" "HTTPS" }}
{{- end }}
{{- toYaml $probe }}
{{- end }}

{{/*
Where the logs come from: standalone.logVolume or sidecar.logVolume, with the defaults
documented in values.yaml.
*/}}
{{- define "trainlog-exporter.logVolumeSource" -}}
{{- if eq .Values.mode "sidecar" }}
{{- toYaml (.Values.sidecar.logVolume | default (dict "emptyDir" dict)) }}
{{- else }}
{{- toYaml (.Values.standalone.logVolume | default (dict "hostPath" (dict "path" "/var/log/training" "type" "DirectoryOrCreate"))) }}
{{- end }}
{{- end }}

{{/*
The pod's volumes: the logs (read by the exporter), the state file's emptyDir, the web config's
Secret and the node's own logs (hostLogs).
*/}}
{{- define "trainlog-exporter.volumes" -}}
- name: {{ .Values.logs.volumeName }}
  {{- toYaml (include "trainlog-exporter.logVolumeSource" . | fromYaml) | nindent 2 }}
{{- if .Values.stateFile.enabled }}
- name: trainlog-state
  emptyDir: {}
{{- end }}
{{- with .Values.webConfig.secretName }}
- name: trainlog-web-config
  secret:
    secretName: {{ . }}
{{- end }}
{{- if .Values.hostLogs.processLogs.enabled }}
- name: trainlog-process-logs
  hostPath:
    # Created if missing: the trainer's CANN writes its process logs there once it starts.
    path: {{ .Values.hostLogs.processLogs.hostPath }}
    type: DirectoryOrCreate
{{- end }}
{{- if .Values.hostLogs.kernelLog.enabled }}
- name: trainlog-kernel-log
  hostPath:
    path: {{ .Values.hostLogs.kernelLog.hostPath }}
    type: Directory
{{- end }}
{{- end }}

{{/*
The standalone pod template of the Deployment or DaemonSet.
*/}}
{{- define "trainlog-exporter.podTemplate" -}}
metadata:
  labels:
    {{- include "trainlog-exporter.selectorLabels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  serviceAccountName: {{ include "trainlog-exporter.serviceAccountName" . }}
  automountServiceAccountToken: {{ .Values.serviceAccount.automountServiceAccountToken }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  containers:
    - {{ include "trainlog-exporter.container" . | indent 6 | trim }}
  volumes:
    {{- include "trainlog-exporter.volumes" . | nindent 4 }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/*
Labels of a Prometheus Operator object: the chart's plus the user's selector labels.
*/}}
{{- define "trainlog-exporter.monitorLabels" -}}
{{- $scope := index . 0 }}
{{- include "trainlog-exporter.labels" $scope }}
{{- with index . 1 }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Scrape settings shared by the ServiceMonitor and PodMonitor endpoints.
*/}}
{{- define "trainlog-exporter.scrapeSettings" -}}
{{- $scope := index . 0 }}
{{- $monitor := index . 1 }}
{{- if $scope.Values.webConfig.tls }}
scheme: https
{{- end }}
{{- with $scope.Values.webConfig.scrape }}
{{ toYaml . }}
{{- end }}
{{- with $monitor }}
interval: {{ .interval }}
scrapeTimeout: {{ .scrapeTimeout }}
{{- with .relabelings }}
relabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- end }}
