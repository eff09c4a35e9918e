{{/*
Sidecar mode: named templates that put the exporter into your own training pod spec.
Call them with this chart's scope. From a parent chart that depends on this one:

  {{- $trainlog := index .Subcharts "trainlog-exporter" }}
  template:
    metadata:
      labels:
        {{- include "trainlog-exporter.sidecar.podLabels" $trainlog | nindent 8 }}
    spec:
      initContainers:            # containers: when sidecar.native is false
        {{- include "trainlog-exporter.sidecar.containers" $trainlog | nindent 8 }}
      containers:
        - name: trainer
          volumeMounts:
            {{- include "trainlog-exporter.sidecar.trainerVolumeMounts" (dict "scope" $trainlog "mountPath" "/workspace/output/msrun_log") | nindent 12 }}
      volumes:
        {{- include "trainlog-exporter.sidecar.volumes" $trainlog | nindent 8 }}

The chart's README.md and docs/kubernetes.md show the whole Job.
*/}}

{{/*
The exporter container as a list item. Native sidecars (Kubernetes >= 1.29) go under
initContainers with restartPolicy Always: started before the trainer, stopped after it, and
not keeping a Job's pod alive.
*/}}
{{- define "trainlog-exporter.sidecar.containers" -}}
- {{ include "trainlog-exporter.container" . | indent 2 | trim }}
  {{- if .Values.sidecar.native }}
  restartPolicy: Always
  {{- end }}
{{- end }}

{{/*
The log volume shared by trainer and exporter (and the state file's emptyDir).
*/}}
{{- define "trainlog-exporter.sidecar.volumes" -}}
{{- include "trainlog-exporter.volumes" . }}
{{- end }}

{{/*
The trainer's read-write mount of the log volume, at msrun's --log_dir. Takes a dict:
scope (this chart's scope) and mountPath (absolute, e.g. /workspace/output/msrun_log).
*/}}
{{- define "trainlog-exporter.sidecar.trainerVolumeMounts" -}}
- name: {{ .scope.Values.logs.volumeName }}
  mountPath: {{ required "trainlog-exporter.sidecar.trainerVolumeMounts needs mountPath: the trainer's log directory" .mountPath }}
{{- end }}

{{/*
Labels that make the PodMonitor scrape the pod.
*/}}
{{- define "trainlog-exporter.sidecar.podLabels" -}}
{{- toYaml .Values.sidecar.podLabels }}
{{- end }}
