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

{{/* the namespace of the installer and its configuration: kube-system, flexvol on OpenShift */}}
{{- define "flexvol.namespace" -}}{{ if include "flexvol.openshift" . }}flexvol{{ else }}kube-system{{ end }}{{- end -}}

{{- define "flexvol.pluginDir" -}}
{{- .Values.pluginDir | default (get (include "flexvol.kind" . | fromYaml) "pluginDir") -}}
{{- end -}}

{{- define "flexvol.attachMode" -}}
{{- $m := .Values.attachMode | default (get (include "flexvol.kind" . | fromYaml) "attachMode") -}}
{{- if not (has $m (list "controller" "node")) }}{{ fail (printf "attachMode %q: controller or node" $m) }}{{ end -}}
{{- $m -}}
{{- end -}}

{{- define "flexvol.image" -}}
{{- if .Values.image.digest -}}{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}{{ .Values.image.repository }}:{{ .Values.image.tag }}{{- end -}}
{{- end -}}

{{/*
The text of a manifest of deploy/ (files/: links to deploy/) with the chart's image where
it names flexvol's (every `image:` of ours, as kustomize's images: entry moves them) and
csi.nfs's share where deploy/csi/nfs has its example.  Args: (dict "root" $ "file" "files/x.yaml")
*/}}
{{- define "flexvol.file" -}}
{{- $t := regexReplaceAll "registry\\.example\\.com/flexvol/installer:[0-9A-Za-z._-]+" (.root.Files.Get .file) (include "flexvol.image" .root) -}}
{{- if hasPrefix "files/csi-nfs-" .file -}}
{{- $n := .root.Values.csi.nfs -}}
{{- $t = $t | replace "nfs.example.com:/exports/k8s" (printf "%s:%s" $n.server $n.path) | replace "server: nfs.example.com" (printf "server: %s" $n.server) | replace "path: /exports/k8s" (printf "path: %s" $n.path) -}}
{{- end -}}
{{- $t -}}
{{- end -}}

{{/*
The items of a CSI component's DaemonSet patch (files/csi-*daemonset*.yaml) under "key"
(containers or volumes) but those named in "skip", as a YAML list for the DaemonSet.
kustomize's strategic merge puts a patch's items before those already there, a later
component's first, and an item two patches name once, where the later one puts it:
templates/installer.yaml lists them in that order.  Args: (dict "root" $ "file" "..." "key" "..." "skip" (list ...))
*/}}
{{- define "flexvol.patchItems" -}}
{{- $spec := (include "flexvol.file" . | fromYaml).spec.template.spec -}}
{{- $items := list -}}
{{- range (get $spec .key) }}{{ if not (has .name $.skip) }}{{ $items = append $items . }}{{ end }}{{ end -}}
{{- if $items }}{{ toYaml $items }}{{ end -}}
{{- end -}}

{{/*
The objects of a manifest of deploy/ (flexvol.file), namespaced ones
moved to "ns" as kustomize's namespace transformer would, and the subjects naming the
installer's ServiceAccount (deploy/loop's replacements) in "subjectNs" when given.  Args: (dict "root" $ "file" "files/x.yaml" "ns" "..." "subjectNs" "...")
*/}}
{{- define "flexvol.manifest" -}}
{{- range $doc := splitList "\n---\n" (include "flexvol.file" .) }}
{{- $o := fromYaml $doc }}
{{- if $o.kind }}
{{- if and $.ns $o.metadata.namespace }}{{ $_ := set $o.metadata "namespace" $.ns }}{{ end }}
{{- if and $.subjectNs $o.subjects }}
{{- range $s := $o.subjects }}{{ if and (eq $s.kind "ServiceAccount") (eq $s.name "flexvol-installer") }}{{ $_ := set $s "namespace" $.subjectNs }}{{ end }}{{ end }}
{{- end }}
---
{{ toYaml $o }}
{{- end }}
{{- end }}
{{- end -}}

{{/* env, ports and probes of both provisioner Deployments */}}
{{- define "flexvol.provisionerCommon" -}}
env:
  - name: POD_NAME
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
  - name: POD_NAMESPACE
    valueFrom:
      fieldRef:
        fieldPath: metadata.namespace
ports:
  - name: http-metrics
    containerPort: 8080
    protocol: TCP
livenessProbe:
  httpGet:
    path: /healthz
    port: http-metrics
  initialDelaySeconds: 10
  periodSeconds: 20
  timeoutSeconds: 5
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: http-metrics
  periodSeconds: 10
  timeoutSeconds: 5
{{- end -}}
