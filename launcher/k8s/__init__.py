"""Render a cluster spec as Kubernetes manifests (`launch export k8s`): JobSet or TFJob."""
