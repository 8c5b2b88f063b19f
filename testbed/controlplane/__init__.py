"""A real Kubernetes control plane (etcd, kube-apiserver) built from Go modules: build.sh builds it,
cluster.py runs it."""
