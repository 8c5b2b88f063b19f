"""The execution cache: when KFP's driver replays a task from an earlier run instead of running it.

A task that reads data by a URI parameter is replayed whenever the URI is the same text, whatever the data at
that URI is now: such a task must not be cached. What the cache key holds, with the upstream lines, is in the
comment below the imports.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# A task whose ``cachingOptions.enableCache`` is true (and that the run does not run with caching disabled) is
# given the outputs of the newest earlier execution, in the same pipeline and namespace, with the same fingerprint
# (kubeflow/pipelines@2.17.0:backend/src/v2/driver/cache.go:119-134, getFingerPrintsAndID;
# cacheutils/cache.go:105-138, GetExecutionCache). The fingerprint is the SHA-256 of the cache key as JSON
# (cacheutils/cache.go:151-171, GenerateFingerPrint), and the key holds (cacheutils/cache.go:173-229,
# GenerateCacheKey; driver/cache.go:83-117):
#
# - each input artifact by its name only, the MLMD id: neither its URI nor what is stored there;
# - each input parameter by its value: a URI parameter as its text;
# - each output's name and type (artifacts' URIs wiped), the command and args, the image, the PVC names.
#
# So a task that reads data by a URI parameter is replayed whenever the URI is the same text, whatever the data at
# that URI is now: such a task must not be cached (or be given the data's version as an input).


def cache_key(
    executor_input: dict[str, Any],
    component: dict[str, Any],
    container: dict[str, Any],
    pvc_names: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The cache key of a task given ``executor_input``, as ``protojson`` writes it."""
    inputs, outputs = executor_input.get("inputs", {}), executor_input.get("outputs", {})
    output_types = {
        name: spec.get("parameterType", "")
        for name, spec in component.get("outputDefinitions", {}).get("parameters", {}).items()
    }
    return {
        "inputArtifactNames": {
            name: {"artifactNames": [a.get("name", "") for a in listed.get("artifacts", [])]}
            for name, listed in inputs.get("artifacts", {}).items()
        },
        "inputParameterValues": dict(inputs.get("parameterValues", {})),
        "outputArtifactsSpec": {
            name: {k: v for k, v in listed["artifacts"][0].items() if k in ("name", "type", "metadata")}
            for name, listed in outputs.get("artifacts", {}).items()
            if listed.get("artifacts")
        },
        "outputParametersSpec": {name: output_types[name] for name in outputs.get("parameters", {})},
        "containerSpec": {
            "image": container.get("image", ""),
            "cmdArgs": [*container.get("command", []), *container.get("args", [])],
            "pvcNames": sorted(set(pvc_names)),
        },
    }


def fingerprint(key: dict[str, Any]) -> str:
    """The key's SHA-256 over ``encoding/json``'s text of it (object keys sorted, no spaces)."""
    text = json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def is_cached(task_spec: dict[str, Any]) -> bool:
    """Whether the driver looks the task up in the cache at all."""
    return bool(task_spec.get("cachingOptions", {}).get("enableCache"))
