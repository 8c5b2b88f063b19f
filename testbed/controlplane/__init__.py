"""A real Kubernetes control plane built from Go modules: build.sh and operators/build.sh build it, cluster.py runs
it, one module per part (etcd.py, apiserver.py, controllers.py, operators.py; host.py their shape, pki.py their
certificates)."""
