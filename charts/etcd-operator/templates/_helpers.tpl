{{/*
Object names are fixed, as in `etcd-operator manifests`: the operator's Lease, Events and
permission check use the name etcd-operator, so there is one release per namespace.
*/}}

{{/* The pods' selector: the label `etcd-operator manifests` puts on everything. */}}
{{- define "etcd-operator.selectorLabels" -}}
app.kubernetes.io/name: etcd-operator
{{- end }}

{{- define "etcd-operator.labels" -}}
{{ include "etcd-operator.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "etcd-operator.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default (printf "v%s" .Chart.AppVersion) }}
{{- end }}

{{/* The namespace a namespaced operator manages. */}}
{{- define "etcd-operator.watchNamespace" -}}
{{ .Values.watchNamespace | default .Release.Namespace }}
{{- end }}

{{/* Cluster-scoped RBAC: named after the install's namespace so that installs do not collide. */}}
{{- define "etcd-operator.clusterRbacName" -}}
etcd-operator-{{ .Release.Namespace }}
{{- end }}

{{/*
The rules of crates/operator/src/rbac.rs, by scope (tests/helm_chart.rs compares them with
`etcd-operator manifests`). Namespaced: in the Role, or the ClusterRole when cluster-wide.
*/}}
{{- define "etcd-operator.namespacedRules" -}}
- apiGroups: [etcd.database.coreos.com]
  resources: [etcdclusters]
  verbs: [get, list, watch, create, patch]
- apiGroups: [etcd.database.coreos.com]
  resources: [etcdclusters/status]
  verbs: [patch]
- apiGroups: [etcd.database.coreos.com]
  resources: [etcdbackups]
  verbs: [get, list, watch]
- apiGroups: [etcd.database.coreos.com]
  resources: [etcdbackups/status]
  verbs: [patch]
- apiGroups: [etcd.database.coreos.com]
  resources: [etcdrestores]
  verbs: [get, list, watch]
- apiGroups: [etcd.database.coreos.com]
  resources: [etcdrestores/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete, patch]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, patch]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, update, patch]
- apiGroups: [cert-manager.io]
  resources: [certificates]
  verbs: [get, create, update]
- apiGroups: [cert-manager.io]
  resources: [certificates/status]
  verbs: [update]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [create]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, update]
  resourceNames: [etcd-operator, etcd-operator-cluster-wide]
{{- end }}

{{/* Cluster-scoped: Nodes, read one by one when a member is not Ready (spec.recovery.nodeLoss);
the CRDs, changed only by name (the operator's own three). */}}
{{- define "etcd-operator.clusterRules" -}}
- apiGroups: [""]
  resources: [nodes]
  verbs: [get]
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [get, list, watch, create]
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  resourceNames:
    - etcdclusters.etcd.database.coreos.com
    - etcdbackups.etcd.database.coreos.com
    - etcdrestores.etcd.database.coreos.com
  verbs: [patch]
{{- if eq (toString .Values.metrics.auth) "kubernetes" }}
- apiGroups: [authentication.k8s.io]
  resources: [tokenreviews]
  verbs: [create]
- apiGroups: [authorization.k8s.io]
  resources: [subjectaccessreviews]
  verbs: [create]
{{- end }}
{{- end }}

{{- define "etcd-operator.subject" -}}
- kind: ServiceAccount
  name: etcd-operator
  namespace: {{ .Release.Namespace }}
{{- end }}
