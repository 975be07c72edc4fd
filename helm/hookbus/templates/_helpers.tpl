{{- define "hookbus.env" -}}
- name: HOOKBUS_REDIS_URL
{{- if .Values.redis.existingSecret }}
  valueFrom:
    secretKeyRef: {name: {{ .Values.redis.existingSecret }}, key: url}
{{- else }}
  value: {{ .Values.redis.url | quote }}
{{- end }}
- name: HOOKBUS_TOKENS
  valueFrom:
    secretKeyRef: {name: {{ .Values.tokens.existingSecret }}, key: tokens}
- name: HOOKBUS_CONFIG
  value: /etc/hookbus/policy.yaml
{{- end -}}
{{- define "hookbus.policyVolume" -}}
volumes:
  - name: policy
    configMap: {name: {{ .Release.Name }}-policy}
{{- end -}}
