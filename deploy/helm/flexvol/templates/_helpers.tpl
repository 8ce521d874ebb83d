{{/*
How the chart is built: every object is read from the manifests of deploy/ (files/ links to
them), so that the chart and the kustomize overlays and components render the same objects
(make check-deploy compares them); the templates set what the values choose, and flexvol.emit
gives every object the release's namespace, the chart's labels, the images of the values and the
pull secrets.
*/}}

{{/* The cluster kinds: plugin directory, attach mode (docs/install.md) */}}
{{- define "flexvol.kinds" -}}
kubeadm: {pluginDir: /usr/libexec/kubernetes/kubelet-plugins/volume/exec, attachMode: controller}
kubeadm-1.36: {pluginDir: /usr/libexec/kubernetes/kubelet-plugins/volume/exec, attachMode: node}
openshift: {pluginDir: /etc/kubernetes/kubelet-plugins/volume/exec, attachMode: node}
gke: {pluginDir: /home/kubernetes/flexvolume, attachMode: node}
rke: {pluginDir: /var/lib/kubelet/volumeplugins, attachMode: controller}
{{- end -}}

{{- define "flexvol.kind" -}}
{{- $k := get (include "flexvol.kinds" . | fromYaml) .Values.clusterKind -}}
{{- if not $k }}{{ fail (printf "clusterKind %q: one of kubeadm, kubeadm-1.36, openshift, gke, rke" .Values.clusterKind) }}{{ end -}}
{{- toYaml $k -}}
{{- end -}}

{{- define "flexvol.openshift" -}}{{ if eq .Values.clusterKind "openshift" }}true{{ end }}{{- end -}}

{{- define "flexvol.pluginDir" -}}
{{- .Values.pluginDir | default (get (include "flexvol.kind" . | fromYaml) "pluginDir") -}}
{{- end -}}

{{- define "flexvol.attachMode" -}}
{{- $m := .Values.attachMode | default (get (include "flexvol.kind" . | fromYaml) "attachMode") -}}
{{- if not (has $m (list "controller" "node")) }}{{ fail (printf "attachMode %q: controller or node" $m) }}{{ end -}}
{{- $m -}}
{{- end -}}

{{/*
The node configuration's text with nodeConfig's keys set: a key's line (set, or commented out
as the shipped file lists its defaults) becomes "key = value", a key the text does not name is
added at the end.  Args: (dict "root" $ "conf" <text>)
*/}}
{{- define "flexvol.nodeConfig" -}}
{{- $t := .conf -}}
{{- range $k, $v := .root.Values.nodeConfig -}}
{{- $re := printf `(?m)^#?[ \t]*%s[ \t]*=.*$` $k -}}
{{- if regexMatch $re $t -}}
{{- $t = regexReplaceAll $re $t (printf "%s = %v" $k $v) -}}
{{- else -}}
{{- $t = printf "%s%s = %v\n" $t $k $v -}}
{{- end -}}
{{- end -}}
{{- $t -}}
{{- end -}}

{{/* A value of the node configuration (nodeConfig, or the shipped file's).  Args: (dict "root" $ "key" "loop_root") */}}
{{- define "flexvol.confValue" -}}
{{- $conf := include "flexvol.nodeConfig" (dict "root" .root "conf" (get (.root.Files.Get "files/configmap.yaml" | fromYaml).data "flexvol.conf")) -}}
{{- $m := regexFind (printf `(?m)^%s[ \t]*=[ \t]*\S+` .key) $conf -}}
{{- regexReplaceAll `^[^=]*=[ \t]*` $m "" -}}
{{- end -}}

{{/* The chart's labels, on every object and pod (never in a selector) */}}
{{- define "flexvol.labels" -}}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name (.Chart.Version | replace "+" "_") | quote }}
{{- with .Values.customLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
An image reference of the values: an entry with repository, tag, digest; imageRegistry, when
set, replaces the registry of the repository (its first part, when that names a host: it has a
"." or a ":" or is localhost) or is put before it.  Args: (dict "root" $ "img" <entry>)
*/}}
{{- define "flexvol.imageRef" -}}
{{- $repo := .img.repository -}}
{{- with .root.Values.imageRegistry -}}
{{- $parts := splitn "/" 2 $repo -}}
{{- if and (ne $parts._1 "") (or (contains "." $parts._0) (contains ":" $parts._0) (eq $parts._0 "localhost")) -}}
{{- $repo = printf "%s/%s" (trimSuffix "/" .) $parts._1 -}}
{{- else -}}
{{- $repo = printf "%s/%s" (trimSuffix "/" .) $repo -}}
{{- end -}}
{{- end -}}
{{- if .img.digest }}{{ $repo }}@{{ .img.digest }}{{ else }}{{ $repo }}:{{ .img.tag }}{{ end -}}
{{- end -}}

{{/* The values' entry of an image of deploy/'s manifests, by its name there */}}
{{- define "flexvol.imageKey" -}}
{{- $n := regexReplaceAll "[:@].*$" . "" -}}
{{- $keys := dict "registry.example.com/flexvol/installer" "image"
    "registry.k8s.io/sig-storage/csi-node-driver-registrar" "nodeDriverRegistrar"
    "registry.k8s.io/sig-storage/csi-provisioner" "provisioner"
    "registry.k8s.io/sig-storage/csi-resizer" "resizer"
    "registry.k8s.io/sig-storage/csi-attacher" "attacher"
    "registry.k8s.io/sig-storage/csi-snapshotter" "snapshotter"
    "registry.k8s.io/sig-storage/snapshot-controller" "snapshotController" -}}
{{- $k := get $keys $n -}}
{{- if not $k }}{{ fail (printf "chart: no value for the image %s (templates/_helpers.tpl, flexvol.imageKey)" .) }}{{ end -}}
{{- $k -}}
{{- end -}}

{{/*
The objects of a manifest of deploy/ (files/x.yaml) as a YAML list, kubelet's directory
replaced by kubeletDir.  Args: (dict "root" $ "file" "files/x.yaml")
*/}}
{{- define "flexvol.load" -}}
{{- $t := .root.Files.Get .file -}}
{{- if not $t }}{{ fail (printf "chart: %s is missing (helm package resolves the links of files/)" .file) }}{{ end -}}
{{- $t = replace "/var/lib/kubelet/" (printf "%s/" (trimSuffix "/" .root.Values.kubeletDir)) $t -}}
{{- $out := list -}}
{{- range $doc := splitList "\n---\n" $t }}
{{- $o := fromYaml $doc }}
{{- if $o.kind }}{{ $out = append $out $o }}{{ end }}
{{- end }}
{{- toYaml $out -}}
{{- end -}}

{{/*
A component's pod options from its values (v): replicas, priorityClassName, nodeSelector,
tolerations, affinity (an empty value removes the field), and each container's resources from
"resources", a map of container name to its resources.  Args: (dict "obj" <workload> "v" <values>
"resources" (dict ...))
*/}}
{{- define "flexvol.podOptions" -}}
{{- $spec := .obj.spec.template.spec -}}
{{- if and (eq .obj.kind "Deployment") (hasKey .v "replicas") }}{{ $_ := set .obj.spec "replicas" .v.replicas }}{{ end -}}
{{- range $f := list "priorityClassName" "nodeSelector" "tolerations" "affinity" }}
{{- if get $.v $f }}{{ $_ := set $spec $f (get $.v $f) }}{{ else }}{{ $_ := unset $spec $f }}{{ end }}
{{- end }}
{{- range $ct := concat ($spec.initContainers | default list) $spec.containers }}
{{- with get $.resources $ct.name }}{{ $_ := set $ct "resources" . }}{{ end }}
{{- end }}
{{- end -}}

{{/*
Print objects: the release's namespace for every object of flexvol's namespace (kube-system, or
flexvol on OpenShift: the same rule as the overlays' namespace and the components'
replacements), the chart's labels, the images and pull policies of the values, the pull
secrets; no ServiceAccount without serviceAccount.create, no RBAC without rbac.create, the
OpenShift SCC grants (*-scc) on OpenShift only.  Args: (dict "root" $ "objs" (list ...))
*/}}
{{- define "flexvol.emit" -}}
{{- $root := .root -}}
{{- $V := $root.Values -}}
{{- $ns := $root.Release.Namespace -}}
{{- $labels := include "flexvol.labels" $root | fromYaml -}}
{{- range $o := .objs }}
{{- $skip := or (and (eq $o.kind "ServiceAccount") (not $V.serviceAccount.create))
               (and (has $o.kind (list "Role" "RoleBinding" "ClusterRole" "ClusterRoleBinding")) (not $V.rbac.create))
               (and (has $o.kind (list "Role" "RoleBinding")) (hasSuffix "-scc" $o.metadata.name) (not (include "flexvol.openshift" $root))) }}
{{- if not $skip }}
{{- if has (toString $o.metadata.namespace) (list "kube-system" "flexvol") }}{{ $_ := set $o.metadata "namespace" $ns }}{{ end }}
{{- range $s := $o.subjects | default list }}
{{- if and (eq $s.kind "ServiceAccount") (has (toString $s.namespace) (list "kube-system" "flexvol")) }}{{ $_ := set $s "namespace" $ns }}{{ end }}
{{- end }}
{{- with $o.spec }}{{ with .paramRef }}{{ if has (toString .namespace) (list "kube-system" "flexvol") }}{{ $_ := set . "namespace" $ns }}{{ end }}{{ end }}{{ end }}
{{- $_ := set $o.metadata "labels" (merge (dict) ($o.metadata.labels | default dict) $labels) }}
{{- if and $o.spec (kindIs "map" $o.spec) $o.spec.template }}
{{- $tm := $o.spec.template.metadata }}
{{- $_ := set $tm "labels" (merge (dict) ($tm.labels | default dict) $labels) }}
{{- $spec := $o.spec.template.spec }}
{{- with $V.imagePullSecrets }}{{ $_ := set $spec "imagePullSecrets" . }}{{ end }}
{{- range $ct := concat ($spec.initContainers | default list) $spec.containers }}
{{- $k := include "flexvol.imageKey" $ct.image }}
{{- $img := ternary $V.image (get $V.sidecars $k) (eq $k "image") }}
{{- $_ := set $ct "image" (include "flexvol.imageRef" (dict "root" $root "img" $img)) }}
{{- $_ := set $ct "imagePullPolicy" $img.pullPolicy }}
{{- end }}
{{- end }}
---
{{ toYaml $o }}
{{- end }}
{{- end }}
{{- end -}}

{{/* csi.hostNamespaceProcess as HOST_NS_PID of a node plugin.  Args: (dict "root" $ "obj" <DaemonSet> "container" <name>) */}}
{{- define "flexvol.hostNs" -}}
{{- with .root.Values.csi.hostNamespaceProcess }}
{{- $p := . }}
{{- range $ct := $.obj.spec.template.spec.containers }}
{{- if eq $ct.name $.container }}{{ $_ := set $ct "env" (append $ct.env (dict "name" "HOST_NS_PID" "value" (toString $p))) }}{{ end }}
{{- end }}
{{- end }}
{{- end -}}
