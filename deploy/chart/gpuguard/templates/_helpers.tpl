{{/*
Refuse values that would install a gpuguard the apiserver cannot reach: an unknown certificate
mode, or the self-managed mode, which the server does not offer yet (install with `secret` or
`certManager`: docs/admin.md "With Helm").
*/}}
{{- define "gpuguard.checkCertificates" -}}
{{- $mode := .Values.certificates.mode -}}
{{- if eq $mode "selfManaged" -}}
{{- fail "certificates.mode=selfManaged is not available yet: use certificates.mode=secret (gpuguard certs create + webhook.caBundle) or certificates.mode=certManager" -}}
{{- else if not (has $mode (list "secret" "certManager")) -}}
{{- fail (printf "certificates.mode must be secret or certManager, not %q" $mode) -}}
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
