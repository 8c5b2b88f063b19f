"""A program that reports its progress to Kubeflow Trainer as Trainer's guide shows (docs/user-guides/
trainjob-progress.md, "Raw HTTP"): POST trainerStatus to KUBEFLOW_TRAINER_SERVER_URL with the CA and token it names."""

import json
import os
import ssl
import urllib.error
import urllib.request
from datetime import UTC, datetime

url = os.environ["KUBEFLOW_TRAINER_SERVER_URL"]
context = ssl.create_default_context(cafile=os.environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"])
with open(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]) as f:
    token = f.read().strip()


def post(status, bearer=token):
    body = json.dumps({"trainerStatus": status}).encode()
    request = urllib.request.Request(url, data=body, headers={"Authorization": f"Bearer {bearer}"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


for epoch in (1, 2):
    status = {
        "progressPercentage": epoch * 50,
        "estimatedRemainingSeconds": 60 * (2 - epoch),
        "metrics": [{"name": "loss", "value": str(1 / (epoch * 4))}, {"name": "epoch", "value": str(epoch)}],
        "lastUpdatedTime": datetime.now(UTC).isoformat(),
    }
    print(f"epoch {epoch} posted: {post(status)}", flush=True)
print(f"a wrong token: {post(None, bearer='not-the-token')}", flush=True)
print(f"no lastUpdatedTime: {post({'progressPercentage': 1})}", flush=True)
os.makedirs(os.environ["KFTRAIN_MODEL_URI"], exist_ok=True)
