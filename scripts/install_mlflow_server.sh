#!/usr/bin/env bash
# Install the MLflow tracking server the tests start (testbed/mlflow_server.py) into a venv of its own,
# $VENV/mlflow-server, pinned by constraints-mlflow-server.txt: the full `mlflow` (server and UI) needs a pyarrow and
# a graphql-core that constraints.txt pins otherwise, so it cannot share the kftrain venv, which holds only the client
# (mlflow-skinny, kftrain's [mlflow] extra). Idempotent: does nothing when the server is installed at the lock's
# version. Without it the tests against a real tracking server skip, naming this script.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=${VENV:-.venv}
TARGET="$VENV/mlflow-server"
LOCK=constraints-mlflow-server.txt
PYTHON=${PYTHON:-python3}
want=$(grep -E '^mlflow==' "$LOCK" | cut -d= -f3)

if [ -x "$TARGET/bin/mlflow" ] && [ "$("$TARGET/bin/python" -c 'import importlib.metadata as m; print(m.version("mlflow"))' 2>/dev/null)" = "$want" ]; then
    echo "install_mlflow_server: mlflow $want already in $TARGET"
    exit 0
fi
started=$(date +%s)
rm -rf "$TARGET"
"$PYTHON" -m venv "$TARGET"
"$TARGET/bin/pip" install --quiet --disable-pip-version-check pip==24.3.1
"$TARGET/bin/pip" install --quiet --disable-pip-version-check -c "$LOCK" "mlflow==$want"
echo "install_mlflow_server: mlflow $want in $TARGET ($(( $(date +%s) - started ))s)"
