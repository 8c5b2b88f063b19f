"""An answer that is not JSON is one line naming what came back, wherever a generated REST client reads it: here
``kftrain submit`` (kfp's client) through the CLI's own entry; the Kubernetes backend's cases are in
tests/backends/kubernetes/test_api.py."""

from __future__ import annotations

from pathlib import Path

import kfp.client.client
import pytest

from kftrain.answers import AnswerError, expect_json
from kftrain.cli.app import main
from kftrain.cli.kfp.connection import ENV_HOST, ENV_NAMESPACE, ENV_TOKEN
from testbed.http_answer import answering

HTML = b"<!doctype html><html><head><title>Sign in</title></head><body>Please sign in</body></html>"


@pytest.mark.parametrize(("code", "content_type"), [(200, "text/html"), (200, "application/json")])
def test_submit_to_a_server_answering_html_says_so_in_one_line(
    code: int, content_type: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(kfp.client.client.Client, "_LOCAL_KFP_CONTEXT", str(tmp_path / "kfp-context.json"))
    for var in (ENV_HOST, ENV_NAMESPACE, ENV_TOKEN):
        monkeypatch.delenv(var, raising=False)
    with answering(code, content_type, HTML) as url:
        assert main(["submit", "pytorch-digits", "--host", url, "--namespace", "ns"]) == 2
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("kftrain: error:")]
    assert len(errors) == 1 and "Traceback" not in out + err, err
    assert url in errors[0] and "not a JSON" in errors[0] and "Sign in" in errors[0], err


@pytest.mark.parametrize(
    "body",
    [b"<html>", b"", b'"text"', b"3", b"[" * 100_000, b"\xff\xfe"],
    ids=["html", "empty", "str", "int", "deep", "bytes"],
)
def test_what_is_not_a_json_object_or_list_is_refused_with_what_came_back(body: bytes) -> None:
    with pytest.raises(AnswerError, match=r"^not a JSON answer \(text/html: ") as caught:
        expect_json(body, "text/html")
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 200


def test_an_object_is_taken_and_a_list_is_not_where_an_object_is_expected() -> None:
    assert expect_json(b'{"items": []}', "application/json", dict) == {"items": []}
    with pytest.raises(AnswerError, match="not a JSON object"):
        expect_json(b"[]", "application/json", dict)


def test_a_json_answer_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from kubernetes import client

    from kftrain.answers import check_answers

    parsed: list[object] = []
    loads = json.loads
    monkeypatch.setattr(json, "loads", lambda *a, **k: parsed.append(a) or loads(*a, **k))
    with answering(200, "application/json", b'{"kind": "Namespace", "metadata": {"name": "ns"}}') as url:
        cfg = client.Configuration()
        cfg.host = url
        namespace = client.CoreV1Api(check_answers(client.ApiClient(cfg))).read_namespace("ns")
    assert namespace.metadata.name == "ns" and len(parsed) == 1, parsed


@pytest.mark.parametrize("stream", [False, True], ids=["read", "followed"])
def test_a_page_where_a_log_was_expected_is_refused_naming_what_came_back(stream: bool) -> None:
    from kubernetes import client

    from kftrain.answers import check_answers

    with answering(200, "text/html; charset=utf-8", HTML) as url:
        cfg = client.Configuration()
        cfg.host = url
        core = client.CoreV1Api(check_answers(client.ApiClient(cfg), f"the API server at {url}"))
        with pytest.raises(AnswerError) as caught:
            core.read_namespaced_pod_log("p", "ns", follow=stream, _preload_content=not stream)
    said = str(caught.value)
    assert said.startswith(f"the API server at {url}: a page, not the ") and "Sign in" in said and "\n" not in said
