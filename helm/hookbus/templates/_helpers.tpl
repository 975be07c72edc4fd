{{/* The chart name (nameOverride wins). */}}
{{- define "hookbus.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name, the prefix of every object name. */}}
{{- define "hookbus.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* One role's object name: dict "root" $ "component" "gateway". */}}
{{- define "hookbus.componentName" -}}
{{- printf "%s-%s" (include "hookbus.fullname" .root | trunc 52 | trimSuffix "-") .component -}}
{{- end -}}

{{- define "hookbus.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The app version label: the image tag (or appVersion), made a valid label value. */}}
{{- define "hookbus.version" -}}
{{- $v := default .Chart.AppVersion .Values.image.tag | toString -}}
{{- regexReplaceAll "[^-A-Za-z0-9_.]" $v "-" | trunc 63 | trimSuffix "-" | trimSuffix "." -}}
{{- end -}}

{{/*
Selector labels: name + instance (+ component). Immutable once installed; instance keeps two
releases in one namespace apart.
*/}}
{{- define "hookbus.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hookbus.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end -}}

{{/* Every label: dict "root" $ "component" "gateway" (component may be ""). */}}
{{- define "hookbus.labels" -}}
{{ include "hookbus.selectorLabels" . }}
app.kubernetes.io/version: {{ include "hookbus.version" .root | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: hookbus
helm.sh/chart: {{ include "hookbus.chart" .root }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "hookbus.image" -}}
{{- $img := .Values.image -}}
{{- $repo := $img.repository -}}
{{- if $img.registry }}{{ $repo = printf "%s/%s" $img.registry $img.repository }}{{ end -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $repo $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (default .Chart.AppVersion $img.tag | toString) -}}
{{- end -}}
{{- end -}}

{{- define "hookbus.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "hookbus.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* ---- Secrets and the policy ConfigMap ---- */}}

{{- define "hookbus.tokensSecretName" -}}
{{- default (printf "%s-tokens" (include "hookbus.fullname" .)) .Values.tokens.existingSecret -}}
{{- end -}}

{{- define "hookbus.tokensSecretKey" -}}
{{- if .Values.tokens.existingSecret }}{{ .Values.tokens.existingSecretKey }}{{ else }}tokens{{ end -}}
{{- end -}}

{{- define "hookbus.replyKeySecretName" -}}
{{- default (printf "%s-reply-key" (include "hookbus.fullname" .)) .Values.replyKey.existingSecret -}}
{{- end -}}

{{- define "hookbus.replyKeySecretKey" -}}
{{- if .Values.replyKey.existingSecret }}{{ .Values.replyKey.existingSecretKey }}{{ else }}reply-key{{ end -}}
{{- end -}}

{{- define "hookbus.redisSecretName" -}}
{{- printf "%s-redis" (include "hookbus.fullname" .) -}}
{{- end -}}

{{- define "hookbus.policyConfigMapName" -}}
{{- default (printf "%s-policy" (include "hookbus.fullname" .)) .Values.policy.existingConfigMap -}}
{{- end -}}

{{/* Which Redis the release uses: "redis-cluster", "redis", "existingSecret" or "url". */}}
{{- define "hookbus.redisMode" -}}
{{- if (index .Values "redis-cluster" "enabled") -}}
redis-cluster
{{- else if .Values.redis.enabled -}}
redis
{{- else if .Values.redis.existingSecret -}}
existingSecret
{{- else if .Values.redis.url -}}
url
{{- else -}}
{{- fail "hookbus: no Redis configured: set redis.url, redis.existingSecret, redis.enabled or redis-cluster.enabled" -}}
{{- end -}}
{{- end -}}

{{/* The chart-created Redis Secret holds "url" and/or "queue-url" when they are given inline. */}}
{{- define "hookbus.redisSecretNeeded" -}}
{{- if or (eq (include "hookbus.redisMode" .) "url") (and .Values.redis.queue.url (not .Values.redis.queue.existingSecret)) -}}
true
{{- end -}}
{{- end -}}

{{/* Bitnami's common.names.fullname for a subchart: dict "root" $ "chart" "redis". */}}
{{- define "hookbus.subchartFullname" -}}
{{- $values := index .root.Values .chart -}}
{{- if $values.fullnameOverride -}}
{{- $values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .chart $values.nameOverride -}}
{{- if contains $name .root.Release.Name -}}
{{- .root.Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .root.Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The Redis environment of every role. */}}
{{- define "hookbus.redisEnv" -}}
{{- $mode := include "hookbus.redisMode" . -}}
{{- if eq $mode "redis-cluster" }}
{{- $rc := index .Values "redis-cluster" -}}
{{- $host := include "hookbus.subchartFullname" (dict "root" . "chart" "redis-cluster") -}}
{{- $port := dig "service" "ports" "redis" 6379 $rc -}}
{{- if dig "usePassword" true $rc }}
# A HOOKBUS_* name so that command hooks never inherit it (they drop HOOKBUS_* variables).
- name: HOOKBUS_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ default $host $rc.existingSecret }}
      key: {{ default "redis-password" $rc.existingSecretPasswordKey }}
- name: HOOKBUS_REDIS_URL
  value: {{ printf "redis://:$(HOOKBUS_REDIS_PASSWORD)@%s:%v/0" $host $port | quote }}
{{- else }}
- name: HOOKBUS_REDIS_URL
  value: {{ printf "redis://%s:%v/0" $host $port | quote }}
{{- end }}
- name: HOOKBUS_REDIS_CLUSTER
  value: "true"
{{- else if eq $mode "redis" }}
{{- $r := .Values.redis -}}
{{- $host := printf "%s-master" (include "hookbus.subchartFullname" (dict "root" . "chart" "redis")) -}}
{{- $port := dig "master" "service" "ports" "redis" 6379 $r -}}
{{- if dig "auth" "enabled" true $r }}
# A HOOKBUS_* name so that command hooks never inherit it (they drop HOOKBUS_* variables).
- name: HOOKBUS_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ default (include "hookbus.subchartFullname" (dict "root" . "chart" "redis")) (dig "auth" "existingSecret" "" $r) }}
      key: {{ default "redis-password" (dig "auth" "existingSecretPasswordKey" "" $r) }}
- name: HOOKBUS_REDIS_URL
  value: {{ printf "redis://:$(HOOKBUS_REDIS_PASSWORD)@%s:%v/0" $host $port | quote }}
{{- else }}
- name: HOOKBUS_REDIS_URL
  value: {{ printf "redis://%s:%v/0" $host $port | quote }}
{{- end }}
{{- else }}
- name: HOOKBUS_REDIS_URL
  valueFrom:
    secretKeyRef:
      {{- if eq $mode "existingSecret" }}
      name: {{ .Values.redis.existingSecret }}
      key: {{ .Values.redis.existingSecretKey }}
      {{- else }}
      name: {{ include "hookbus.redisSecretName" . }}
      key: url
      {{- end }}
{{- if .Values.redis.cluster }}
- name: HOOKBUS_REDIS_CLUSTER
  value: "true"
{{- end }}
{{- end }}
{{- if .Values.redis.queue.existingSecret }}
- name: HOOKBUS_QUEUE_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.queue.existingSecret }}
      key: {{ .Values.redis.queue.existingSecretKey }}
{{- else if .Values.redis.queue.url }}
- name: HOOKBUS_QUEUE_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "hookbus.redisSecretName" . }}
      key: queue-url
{{- end }}
{{- end -}}

{{/* The environment of one role: dict "root" $ "component" "gateway". */}}
{{- define "hookbus.env" -}}
{{- $root := .root -}}
{{- $values := index $root.Values .component -}}
- name: HOOKBUS_CONFIG
  value: {{ printf "/etc/hookbus/%s" $root.Values.policy.key | quote }}
- name: HOOKBUS_STATE_DIR
  value: /tmp/hookbus
- name: HOOKBUS_LOG_LEVEL
  value: {{ $root.Values.config.logLevel | quote }}
{{- if ne .component "gateway" }}
# The metrics port (/metrics, /healthz) must be reachable by the kubelet and Prometheus.
- name: HOOKBUS_METRICS_HOST
  value: "0.0.0.0"
{{- end }}
{{- with $root.Values.config.keyPrefix }}
- name: HOOKBUS_KEY_PREFIX
  value: {{ . | quote }}
{{- end }}
{{- include "hookbus.redisEnv" $root }}
{{- if eq .component "gateway" }}
- name: HOOKBUS_TOKENS
  valueFrom:
    secretKeyRef:
      name: {{ include "hookbus.tokensSecretName" $root }}
      key: {{ include "hookbus.tokensSecretKey" $root }}
{{- end }}
{{- if or (eq .component "gateway") (eq .component "dispatcher") }}
- name: HOOKBUS_REPLY_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "hookbus.replyKeySecretName" $root }}
      key: {{ include "hookbus.replyKeySecretKey" $root }}
{{- end }}
{{- range $name, $value := $root.Values.config.env }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- with $root.Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- with $values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* A checksum of everything that the pods read at start-up only. */}}
{{- define "hookbus.configChecksum" -}}
{{- $parts := dict "redis" (omit .Values.redis "enabled") "redisCluster" (index .Values "redis-cluster") "config" .Values.config "tokens" .Values.tokens -}}
{{- if and .Values.policy.rollOnChange (not .Values.policy.existingConfigMap) -}}
{{- $_ := set $parts "policy" .Values.policy.content -}}
{{- end -}}
{{- toJson $parts | sha256sum -}}
{{- end -}}

{{/*
One role's Deployment: dict "root" $ "component" NAME "args" LIST "portName" NAME "port" N
"livenessPath" PATH "readinessPath" PATH.
*/}}
{{- define "hookbus.deployment" -}}
{{- $root := .root -}}
{{- $component := .component -}}
{{- $values := index $root.Values $component -}}
{{- $ctx := dict "root" $root "component" $component -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "hookbus.componentName" $ctx }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "hookbus.labels" $ctx | nindent 4 }}
spec:
  {{- if not (and $values.autoscaling $values.autoscaling.enabled) }}
  replicas: {{ $values.replicas }}
  {{- end }}
  revisionHistoryLimit: 5
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 25%
      maxUnavailable: 0
  selector:
    matchLabels:
      {{- include "hookbus.selectorLabels" $ctx | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "hookbus.labels" $ctx | nindent 8 }}
        {{- with $values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        checksum/config: {{ include "hookbus.configChecksum" $root }}
        {{- if $root.Values.metrics.podAnnotations }}
        prometheus.io/scrape: "true"
        prometheus.io/port: {{ .port | quote }}
        prometheus.io/path: /metrics
        {{- end }}
        {{- with $values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "hookbus.serviceAccountName" $root }}
      automountServiceAccountToken: {{ $root.Values.automountServiceAccountToken }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $values.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      terminationGracePeriodSeconds: {{ $values.terminationGracePeriodSeconds }}
      containers:
        - name: {{ $component }}
          image: {{ include "hookbus.image" $root | quote }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            {{- range (concat .args $values.extraArgs) }}
            - {{ . | toString | quote }}
            {{- end }}
          env:
            {{- include "hookbus.env" $ctx | nindent 12 }}
          {{- with $root.Values.extraEnvFrom }}
          envFrom:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          ports:
            - name: {{ .portName }}
              containerPort: {{ .port }}
              protocol: TCP
          startupProbe:
            httpGet:
              path: {{ .livenessPath }}
              port: {{ .portName }}
            {{- toYaml $values.startupProbe | nindent 12 }}
          livenessProbe:
            httpGet:
              path: {{ .livenessPath }}
              port: {{ .portName }}
            {{- toYaml $values.livenessProbe | nindent 12 }}
          readinessProbe:
            httpGet:
              path: {{ .readinessPath }}
              port: {{ .portName }}
            {{- toYaml $values.readinessProbe | nindent 12 }}
          {{- if $values.preStopSleepSeconds }}
          lifecycle:
            preStop:
              exec:
                command: ["sleep", {{ $values.preStopSleepSeconds | toString | quote }}]
          {{- end }}
          resources:
            {{- toYaml $values.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            - name: policy
              mountPath: /etc/hookbus
              readOnly: true
            - name: tmp
              mountPath: /tmp
      volumes:
        - name: policy
          configMap:
            name: {{ include "hookbus.policyConfigMapName" $root }}
        - name: tmp
          emptyDir:
            {{- with $root.Values.tmpVolume.sizeLimit }}
            sizeLimit: {{ . }}
            {{- end }}
      {{- with $values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $values.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}
