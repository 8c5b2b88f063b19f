"""The KFP backend releases kftrain supports (2.5 through 2.17), and what differs between them.

Each field of :class:`Backend` is a rule read from kubeflow/pipelines at the release's tag (``Backend.tag``), cited
beside it. What changed at a release the others inherit is a comparison of release numbers, always through
:meth:`Backend.at_least` (never of the tag strings: ``"2.5.0" < "2.17"`` is false as text). Every release records
output artifacts in ML Metadata, 2.17.0 included (kubeflow/pipelines@2.17.0:backend/src/v2/component/
launcher_v2.go:848, RecordArtifact): :mod:`testbed.kfp_backend.mlmd` is the same for all.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    name: str
    tag: str
    # The kfp-kubernetes release whose proto is the backend's kubernetes_platform/proto/
    # kubernetes_executor_config.proto. 2.5.0's proto (secret, ConfigMap and pull secret names as parameters, node
    # selector and toleration JSON: #11621, #11770) is kfp-kubernetes 1.5.0's (the package at the 2.5.0 tag still
    # says 1.4.0, whose proto lacks them); from 2.14 the two are released together under one version. Checked field
    # by field: the messages of 1.5.0 -> 2.14.0 -> 2.15.0 -> 2.16.0 -> 2.17.0 differ exactly as the tags' protos do
    # (node_affinity_json; SecretAsEnv/ConfigMapAsEnv.optional; security_context, PvcMount.sub_path).
    kfp_kubernetes: str
    # From 2.14.0 the workflow compiler parses each executor's platform config with protojson.Unmarshal and fails the
    # run on an unknown field (kubeflow/pipelines@2.14.0:backend/src/v2/compiler/argocompiler/container.go:284-287);
    # 2.5.0 parses it with jsonpb ignoring the error (kubeflow/pipelines@2.5.0:backend/src/v2/compiler/argocompiler/
    # container.go:445) and its driver drops unknown fields (@2.5.0:backend/src/common/util/json.go:72-74,
    # AllowUnknownFields: true).
    strict_platform_parse: bool
    # From 2.15.0 the launcher skips downloading an input artifact whose metadata has _kfp_workspace: true
    # (kubeflow/pipelines@2.15.0:backend/src/v2/component/launcher_v2.go:720); the driver sets the flag for a
    # workspace importer's artifacts only, and never persists it (@2.17.0:backend/src/v2/metadata/
    # converter.go:122-126; driver/resolve.go:39-46).
    workspace_marker: bool
    # dsl.TaskConfig inputs are filled by the driver from 2.15.0
    # (kubeflow/pipelines@2.15.0:backend/src/v2/driver/container.go:264).
    task_config: bool
    # The store a minio:// root without a kfp-launcher provider uses (kubeflow/pipelines@2.5.0:backend/src/v2/
    # objectstore/config.go:32; @2.15.0 objectstore/config.go:29; @2.16.0 objectstore/config.go:29). Before 2.15 the
    # root driver, which picks the run's store, first takes MINIO_SERVICE_SERVICE_HOST/_PORT from its pod's
    # environment (@2.5.0 and @2.14.0 objectstore/config.go:166-180, MinioDefaultEndpoint, called by
    # config/env.go:169); from 2.15 the constant alone (@2.15.0 config/env.go:182): service_env_store.
    default_store: str

    def at_least(self, tag: str) -> bool:
        """Whether this release is ``tag`` or later (``at_least("2.15")``: 2.15.0, 2.16.0, 2.17.0)."""
        return release(self.tag) >= release(tag)

    @property
    def service_env_store(self) -> bool:
        """Whether a ``minio://`` root with no provider first uses the pod's ``minio-service`` variables."""
        return not self.at_least("2.15")

    @property
    def launcher_image(self) -> str:
        """The kfp-launcher image the release's manifests run (its tag is the release)."""
        return f"ghcr.io/kubeflow/kfp-launcher:{self.tag}"

    def __str__(self) -> str:
        return f"KFP {self.tag}"


def release(tag: str) -> tuple[int, ...]:
    """A release tag's numbers (``"2.5.0"`` -> ``(2, 5, 0)``; a missing patch is 0), for comparing releases."""
    numbers = tuple(int(part) for part in tag.split("."))
    return numbers + (0,) * (3 - len(numbers))


MINIO = "minio-service.kubeflow:9000"
SEAWEEDFS = "seaweedfs.kubeflow:9000"

BACKENDS = {
    "2.5": Backend("2.5", "2.5.0", "1.5.0", False, False, False, MINIO),
    "2.14": Backend("2.14", "2.14.0", "2.14.0", True, False, False, MINIO),
    "2.15": Backend("2.15", "2.15.0", "2.15.0", True, True, True, MINIO),
    "2.16": Backend("2.16", "2.16.0", "2.16.0", True, True, True, SEAWEEDFS),
    "2.17": Backend("2.17", "2.17.0", "2.17.0", True, True, True, SEAWEEDFS),
}
OLDEST = BACKENDS["2.5"]
NEWEST = BACKENDS["2.17"]
