{{/*
Refuse values that would install a gpuguard the apiserver cannot reach: an unknown certificate
mode, a failure policy or timeout the apiserver refuses (docs/admin.md "With Helm").
*/}}
{{- define "gpuguard.checkCertificates" -}}
{{- $mode := .Values.certificates.mode -}}
{{- if not (has $mode (list "secret" "certManager" "selfManaged")) -}}
{{- fail (printf "certificates.mode must be secret, certManager or selfManaged, not %q" $mode) -}}
{{- end -}}
{{- if not (has .Values.webhook.failurePolicy (list "Fail" "Ignore")) -}}
{{- fail (printf "webhook.failurePolicy must be Fail or Ignore, not %q" .Values.webhook.failurePolicy) -}}
{{- end -}}
{{- if not (has .Values.webhook.scaleFailurePolicy (list "Fail" "Ignore")) -}}
{{- fail (printf "webhook.scaleFailurePolicy must be Fail or Ignore, not %q" .Values.webhook.scaleFailurePolicy) -}}
{{- end -}}
{{- if or (lt (int .Values.webhook.timeoutSeconds) 1) (gt (int .Values.webhook.timeoutSeconds) 30) -}}
{{- fail "webhook.timeoutSeconds must be 1-30 (the apiserver's bounds)" -}}
{{- end -}}
{{- end -}}
