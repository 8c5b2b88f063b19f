"""TensorFlow through the local backend: TF_CONFIG per role, a real MWMS job, a real PS job, SavedModel export."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from kftrain import storage
from kftrain.backends import LocalConfig
from kftrain.backends.local import LocalBackend
from kftrain.contract import CHECKPOINT_ENV, DATASET_ENV, MODEL_ENV
from kftrain.job.kinds.tfjob import TFJobOptions
from kftrain.job.request import JobRequest
from kftrain.launch.step import Artifacts, inject_artifact_env
from testbed.needs import requires

pytestmark = requires("tf_keras", reason="the TensorFlow trainer needs tensorflow + tf_keras")

TRAINER = ["python", "-m", "kftrain.programs.tf_distributed"]
CKPT_FILES = ("data-00000-of-00001", "index")
ARGS = ["--dataset", f"$({DATASET_ENV})", "--model-dir", f"$({MODEL_ENV})", "--checkpoint-dir", f"$({CHECKPOINT_ENV})"]


def tf_job(name: str, workers: int, extra: dict[str, int] | None = None, args: list[str] | None = None):
    request = JobRequest(
        kind="TFJob",
        image="example.com/tf:1",
        command=TRAINER,
        args=[*ARGS, *(args or [])],
        options=TFJobOptions(workers=workers, **{k.lower(): v for k, v in (extra or {}).items()}),
        restart_policy="Never",
    )
    return request.to_job(name)


def run_local(job, artifacts: Artifacts | None = None, timeout: float = 240, **options):
    if artifacts:
        inject_artifact_env(job, artifacts)
    out = io.StringIO()
    backend = LocalBackend(LocalConfig(out=out, **options))
    handle = backend.submit(job)
    result = backend.wait(handle, timeout)
    return result, out.getvalue()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> str:
    from kftrain.steps.prep import prepare_dataset

    uri = str(tmp_path_factory.mktemp("tfdata") / "dataset")
    prepare_dataset(uri, seed=42)
    return uri


# --- TF_CONFIG of every role ----------------------------------------------------------------------

# Each replica dumps its TF_CONFIG; the chief (whose exit ends the job) waits until every replica has.
DUMP = """
import glob, json, os, sys, time
t = json.loads(os.environ["TF_CONFIG"])["task"]
path = os.path.join(sys.argv[1], f"{t['type']}-{t['index']}.json")
with open(path + ".tmp", "w") as f:
    f.write(os.environ["TF_CONFIG"])
os.rename(path + ".tmp", path)
deadline = time.time() + 30
while t["type"] == "chief" and len(glob.glob(os.path.join(sys.argv[1], "*.json"))) < int(sys.argv[2]):
    if time.time() > deadline:
        sys.exit(1)
    time.sleep(0.05)
"""


def test_tf_config_for_every_role_of_a_chief_ps_worker_evaluator_job(tmp_path):
    job = tf_job("tfconfig", workers=2, extra={"Chief": 1, "PS": 2, "Evaluator": 1})
    result, log = run_local(job, timeout=60, commands={"*": [sys.executable, "-c", DUMP, str(tmp_path), "6"]})
    assert result.succeeded, log
    dumped = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert sorted(dumped) == ["chief-0", "evaluator-0", "ps-0", "ps-1", "worker-0", "worker-1"], log
    cluster = dumped["chief-0"]["cluster"]
    assert list(cluster) == ["chief", "evaluator", "ps", "worker"], "Go's encoder sorts the replica types"
    assert [len(cluster[k]) for k in cluster] == [1, 1, 2, 2]
    addresses = [a for v in cluster.values() for a in v]
    assert all(re.fullmatch(r"localhost:\d+", a) for a in addresses)
    assert len(set(addresses)) == len(addresses), "every replica gets its own free port"
    for label, config in dumped.items():
        rtype, index = label.rsplit("-", 1)
        assert config["task"] == {"type": rtype, "index": int(index)}
        assert config["cluster"] == cluster, f"{label} sees another cluster"
        assert config["environment"] == "cloud"


def test_one_replica_gets_no_tf_config(tmp_path):
    code = "import os, sys; open(sys.argv[1], 'w').write(os.environ.get('TF_CONFIG', '<unset>'))"
    job = tf_job("tfconfig-one", workers=1)
    result, log = run_local(job, timeout=60, commands={"*": [sys.executable, "-c", code, str(tmp_path / "out")]})
    assert result.succeeded, log
    assert (tmp_path / "out").read_text() == "<unset>"


# --- real jobs --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mwms_run(dataset, tmp_path_factory):
    root = tmp_path_factory.mktemp("mwms")
    uris = Artifacts(dataset, str(root / "model"), str(root / "ckpt"))
    job = tf_job("tf-mwms", workers=2, args=["--epochs", "3", "--checkpoint-every-steps", "20"])
    result, log = run_local(job, uris)
    return result, log, root


def _summaries(log: str) -> dict[str, dict]:
    """The JSON line each replica prints last, by replica."""
    found = {}
    for line in log.splitlines():
        m = re.match(r"^\[([a-z]+-\d+)\] (\{\"task\".*)$", line)
        if m:
            found[m.group(1)] = json.loads(m.group(2))
    return found


@pytest.mark.slow
def test_multi_worker_mirrored_job_trains_in_sync_and_writes_the_model_once(mwms_run):
    result, log, root = mwms_run
    assert result.succeeded, log[-4000:]
    assert "mode multi_worker_mirrored" in log
    summaries = _summaries(log)
    assert set(summaries) == {"worker-0", "worker-1"}, log[-4000:]
    w0, w1 = summaries["worker-0"], summaries["worker-1"]
    # Synchronous all-reduce: both workers end with the same weights, hence the same loss history.
    assert w0["final_loss"] == pytest.approx(w1["final_loss"], rel=1e-5)
    assert w0["val_accuracy"] == w1["val_accuracy"]
    assert w0["final_loss"] < w0["first_loss"]
    assert log.count("model written to") == 1 and "[worker-0]" in log.split("model written to")[0].splitlines()[-1]
    manifest = storage.require_complete(str(root / "model"), verify=True)
    assert "saved_model.pb" in manifest["files"] and "model.json" in manifest["files"]
    assert not any("workertemp" in f for f in manifest["files"])
    info = json.loads((root / "model" / "model.json").read_text())
    assert info["framework"] == "tensorflow" and info["classes"] == list(range(10))
    assert len(info["feature_names"]) == 64 and info["strategy"] == "multi_worker_mirrored"
    assert list((root / "ckpt").glob("chief/ckpt-*.index")), "BackupAndRestore checkpoints under the URI"
    assert not list((root / "ckpt").glob("workertemp*")), "non-chief temp checkpoints are removed"


@pytest.mark.slow
def test_saved_model_export_round_trip(mwms_run, dataset, tmp_path):
    from kftrain.models import load_predictor
    from kftrain.steps.export import export_model

    result, log, root = mwms_run
    assert result.succeeded, log[-4000:]
    report = export_model(str(root / "model"), dataset, str(tmp_path / "export"), model_name="digits")
    assert [(e.target, e.format) for e in report.exports] == [("triton", "savedmodel"), ("tfserving", "savedmodel")]
    version = tmp_path / "export" / "tfserving" / "digits" / "1"
    assert (version / "saved_model.pb").is_file() and (version / "variables" / "variables.index").is_file()
    storage.require_complete(str(tmp_path / "export"), verify=True)

    import tensorflow as tf

    from kftrain.data.dataset import load_split

    loaded = tf.saved_model.load(str(version))
    serve = loaded.signatures["serving_default"]
    (spec,) = serve.structured_input_signature[1].values()
    assert spec.dtype == tf.float32 and spec.shape.as_list() == [None, 64]
    x, _ = load_split(dataset, "test")
    exported = next(iter(serve(tf.constant(x)).values())).numpy()
    predict, _ = load_predictor(str(root / "model"))
    original = predict(x)
    np.testing.assert_allclose(exported, original, atol=1e-5)
    assert (exported.argmax(1) == original.argmax(1)).all()


@pytest.mark.slow
def test_parameter_server_job_with_chief_ps_workers_and_evaluator(dataset, tmp_path):
    uris = Artifacts(dataset, str(tmp_path / "model"), str(tmp_path / "ckpt"))
    args = ["--epochs", "2", "--checkpoint-every-steps", "20", "--eval-poll-seconds", "0.5"]
    job = tf_job("tf-ps", workers=2, extra={"Chief": 1, "PS": 1, "Evaluator": 1}, args=args)
    result, log = run_local(job, uris)
    assert result.succeeded, log[-4000:]
    assert "[chief-0]" in log and "mode parameter_server" in log
    for server in ("ps-0", "worker-0", "worker-1"):
        assert f"[{server}] " in log and re.search(rf"\[{server}\] .*serving at grpc://localhost:\d+", log), server
    chief = _summaries(log)["chief-0"]
    assert chief["steps"] >= 80 and chief["final_loss"] < chief["first_loss"]
    assert "[evaluator-0]" in log and re.search(r"\[evaluator-0\] .*checkpoint ckpt-\d+ val_accuracy", log)
    assert log.count("model written to") == 1
    info = json.loads((tmp_path / "model" / "model.json").read_text())
    assert info["framework"] == "tensorflow" and info["strategy"] == "parameter_server"
    assert (tmp_path / "ckpt" / "_TRAINING_DONE.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("store", ["local", "s3"])
def test_a_restarted_job_resumes_from_its_checkpoint(dataset, tmp_path, store, request):
    import subprocess

    ckpt = str(tmp_path / "ckpt") if store == "local" else f"{request.getfixturevalue('s3_env')}/ckpt"
    base = [sys.executable, "-m", "kftrain.programs.tf_distributed", "--dataset", dataset]
    base += ["--model-dir", str(tmp_path / "model"), "--checkpoint-dir", ckpt]
    base += ["--checkpoint-every-steps", "10"]
    first = subprocess.run([*base, "--epochs", "1"], capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "no checkpoint, starting at step 0" in first.stdout
    # What the next run resumes from: one checkpoint (Keras keeps one), the index naming it, the done marker.
    fs, root = storage.filesystem(ckpt)
    kept = sorted(str(path)[len(root) :].lstrip("/") for path in fs.find(root))
    assert kept == ["_TRAINING_DONE.json", "chief/checkpoint", *(f"chief/ckpt-4.{e}" for e in CKPT_FILES)], kept
    again = subprocess.run([*base, "--epochs", "2"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    m = re.search(r"resumed from checkpoint at step (\d+)", again.stdout)
    assert m and int(m.group(1)) == 40, again.stdout[-3000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["steps"] == 80
    assert Path(tmp_path / "model" / "saved_model.pb").is_file()


class Chief:
    """The chief's side of the race: Keras's BackupAndRestore keeps one checkpoint, synced to its URI."""

    def __init__(self, dataset: str, uri: str) -> None:
        import tensorflow as tf

        from kftrain.data.dataset import read_info
        from kftrain.models import tensorflow as tf_models
        from kftrain.programs.tf_distributed import CheckpointDir

        info = read_info(dataset)
        self.uri = uri
        self.folder = CheckpointDir(uri, is_chief=True)
        model = tf_models.build_model(info.num_features, info.num_classes)
        self.manager = tf.train.CheckpointManager(
            tf.train.Checkpoint(model=model), str(self.folder.path / "chief"), max_to_keep=1
        )

    def save(self) -> None:
        self.manager.save()
        self.folder.sync()

    def finish(self) -> None:
        from kftrain.programs.tf_distributed import DONE_MARKER

        with storage.open_uri(storage.join(self.uri, DONE_MARKER), "wb") as marker:
            marker.write(b"{}")
        self.folder.close()


def evaluate(dataset: str, tmp_path: Path, uri: str, caplog) -> dict[str, float]:
    from kftrain.programs import tf_distributed

    flags = ["--dataset", dataset, "--model-dir", str(tmp_path / "model"), "--checkpoint-dir", uri]
    args = tf_distributed.parse_args([*flags, "--eval-poll-seconds", "0"])
    with caplog.at_level("INFO", logger=tf_distributed.log.name):
        return tf_distributed.evaluate_checkpoints(args, tf_distributed.Role("evaluator", 0, {}))


def test_the_evaluator_reads_the_next_checkpoint_when_the_chief_deletes_the_one_it_named(
    dataset, tmp_path, caplog, monkeypatch
):
    """The chief keeps one checkpoint: its next save can delete the one the evaluator was about to read."""
    import tensorflow as tf

    chief = Chief(dataset, str(tmp_path / "ckpt"))
    chief.save()
    named: list[str] = []
    real_latest = tf.train.latest_checkpoint

    def latest_then_the_chief_saves_again(directory: str) -> str | None:
        latest = real_latest(directory)
        if not named:  # the race, once: named, then deleted by the chief's next save, then training ends
            named.append(Path(latest).name)
            chief.save()
            chief.finish()
        return latest

    monkeypatch.setattr(tf.train, "latest_checkpoint", latest_then_the_chief_saves_again)
    metrics = evaluate(dataset, tmp_path, chief.uri, caplog)
    assert named == ["ckpt-1"] and not (tmp_path / "ckpt" / "chief" / "ckpt-1.index").exists()
    assert "checkpoint ckpt-1 went away while read (NotFoundError)" in caplog.text
    assert "checkpoint ckpt-2 val_accuracy" in caplog.text
    assert 0.0 <= metrics["val_accuracy"] <= 1.0


def test_the_evaluator_downloads_again_when_the_chief_prunes_during_the_download(
    dataset,
    tmp_path,
    caplog,
    monkeypatch,
    s3_env,
):
    """On an object store the evaluator downloads the folder each round; the chief's sync removes the files of
    the checkpoint it no longer keeps, which can be between the download's listing and its copy."""
    from kftrain.storage import artifact

    chief = Chief(dataset, f"{s3_env}/ckpt")
    chief.save()
    listed: list[list[str]] = []
    real_list_files = artifact.list_files

    def listed_then_the_chief_saves_again(uri: str) -> list[str]:
        found = real_list_files(uri)
        if not listed:  # the race, once: listed, then pruned by the chief's next sync, then training ends
            listed.append(list(found))
            chief.save()
            chief.finish()
        return found

    # The listing a download copies from (storage.download lists a folder without a marker, then copies each file).
    monkeypatch.setattr(artifact, "list_files", listed_then_the_chief_saves_again)
    metrics = evaluate(dataset, tmp_path, chief.uri, caplog)
    assert listed == [[f"chief/{name}" for name in ("checkpoint", "ckpt-1.data-00000-of-00001", "ckpt-1.index")]]
    assert "the checkpoints changed while downloaded" in caplog.text
    assert "checkpoint ckpt-1 val_accuracy" not in caplog.text
    assert "checkpoint ckpt-2 val_accuracy" in caplog.text
    assert 0.0 <= metrics["val_accuracy"] <= 1.0
