{{/* Names, labels and small pieces shared by the templates. */}}

{{- define "mlsandbox.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "mlsandbox.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains (include "mlsandbox.name" .) .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "mlsandbox.name" .) | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Name of one component's objects: include "mlsandbox.component" (list . "minio") */}}
{{- define "mlsandbox.component" -}}
{{- printf "%s-%s" (include "mlsandbox.fullname" (index . 0)) (index . 1) -}}
{{- end -}}

{{- define "mlsandbox.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mlsandbox.name" (index . 0) }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "mlsandbox.labels" -}}
{{ include "mlsandbox.selectorLabels" . }}
app.kubernetes.io/part-of: mlsandbox
app.kubernetes.io/version: {{ (index . 0).Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ (index . 0).Release.Service }}
helm.sh/chart: {{ printf "%s-%s" (index . 0).Chart.Name (index . 0).Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "mlsandbox.image" -}}
{{- printf "%s:%s" .repository .tag -}}
{{- end -}}

{{- define "mlsandbox.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext }}
{{- end -}}

{{- define "mlsandbox.containerSecurityContext" -}}
{{- toYaml .Values.containerSecurityContext }}
{{- end -}}

{{/* The MinIO root password: the given one, else the one already in the cluster, else a new one. */}}
{{- define "mlsandbox.minioPassword" -}}
{{- if .Values.minio.rootPassword -}}
{{- .Values.minio.rootPassword -}}
{{- else -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "mlsandbox.component" (list . "minio")) -}}
{{- if and $existing $existing.data (index $existing.data "secret-key") -}}
{{- index $existing.data "secret-key" | b64dec -}}
{{- else -}}
{{- randAlphaNum 32 -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The services' URLs by their names in every namespace (<service>.<release namespace>.svc): MLflow's
presigned artifact URLs name its S3 endpoint, and the Prefect worker's API URL reaches the flow-run Jobs,
both read from the sandboxes' namespaces, where a short name does not resolve. */}}
{{- define "mlsandbox.s3Url" -}}
{{- printf "http://%s.%s.svc:%d" (include "mlsandbox.component" (list . "minio")) .Release.Namespace (int .Values.minio.port) -}}
{{- end -}}

{{- define "mlsandbox.mlflowUrl" -}}
{{- printf "http://%s.%s.svc:%d" (include "mlsandbox.component" (list . "mlflow")) .Release.Namespace (int .Values.mlflow.port) -}}
{{- end -}}

{{- define "mlsandbox.prefectApiUrl" -}}
{{- printf "http://%s.%s.svc:%d/api" (include "mlsandbox.component" (list . "prefect-server")) .Release.Namespace (int .Values.prefect.server.port) -}}
{{- end -}}

{{/* A PersistentVolumeClaim or an emptyDir for one component's data: (list . "mlflow" .Values.mlflow.persistence) */}}
{{- define "mlsandbox.dataVolume" -}}
{{- $p := index . 2 -}}
- name: data
{{- if and $p.enabled $p.hostPath }}
  hostPath:
    path: {{ $p.hostPath | quote }}
    type: Directory
{{- else if $p.enabled }}
  persistentVolumeClaim:
    claimName: {{ include "mlsandbox.component" (list (index . 0) (index . 1)) }}
{{- else }}
  emptyDir: {}
{{- end }}
{{- end -}}

{{- define "mlsandbox.pvc" -}}
{{- $root := index . 0 -}}{{- $p := index . 2 -}}
{{- if and $p.enabled (not $p.hostPath) }}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: {{ include "mlsandbox.component" (list $root (index . 1)) }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "mlsandbox.labels" (list $root (index . 1)) | nindent 4 }}
spec:
  accessModes: [ReadWriteOnce]
  {{- if $p.storageClass }}
  storageClassName: {{ $p.storageClass | quote }}
  {{- end }}
  resources:
    requests:
      storage: {{ $p.size }}
{{- end }}
{{- end -}}

{{/* Environment of the MLflow server and its bucket-creating init container. */}}
{{- define "mlsandbox.mlflowEnv" -}}
{{- $minio := include "mlsandbox.component" (list . "minio") -}}
- name: MLFLOW_S3_ENDPOINT_URL
  value: {{ include "mlsandbox.s3Url" . | quote }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef: {name: {{ $minio }}, key: access-key}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef: {name: {{ $minio }}, key: secret-key}
- name: AWS_DEFAULT_REGION
  value: us-east-1
- name: BUCKET
  value: {{ .Values.mlflow.artifactBucket | quote }}
- name: MLFLOW_SERVER_ENABLE_JOB_EXECUTION
  value: "false"
- name: MLFLOW_DISABLE_TELEMETRY
  value: "true"
- name: HOME
  value: /tmp
{{- end -}}
