"""Distributed XGBoost as Kubeflow Trainer's example trains it (examples/xgboost/distributed-training/
xgboost-distributed.ipynb, ``xgboost_train_classification``), written again for this test: each node reads the
DMLC_* variables the xgboost plugin gives it, node 0 runs the Rabit tracker, all join one collective, train on their
own shard, and node 0 saves the model to /workspace."""

import os

import xgboost as xgb
from sklearn.datasets import make_classification
from xgboost import collective
from xgboost.tracker import RabitTracker

rank = int(os.environ["DMLC_TASK_ID"])
workers = int(os.environ["DMLC_NUM_WORKER"])
host, port = os.environ["DMLC_TRACKER_URI"], int(os.environ["DMLC_TRACKER_PORT"])
tracker = None
if rank == 0:
    tracker = RabitTracker(host_ip="0.0.0.0", n_workers=workers, port=port)
    tracker.start()
with collective.CommunicatorContext(dmlc_tracker_uri=host, dmlc_tracker_port=port, dmlc_task_id=str(rank)):
    print(f"worker {collective.get_rank()} of {collective.get_world_size()} connected", flush=True)
    x, y = make_classification(n_samples=2000, n_features=10, n_informative=5, random_state=42 + rank)
    train = xgb.QuantileDMatrix(x, label=y)  # inside the communicator: quantiles are agreed across workers
    params = {"objective": "binary:logistic", "tree_method": "hist", "max_depth": 4, "eval_metric": "logloss"}
    booster = xgb.train(params, train, num_boost_round=10, evals=[(train, "train")], verbose_eval=5)
    if collective.get_rank() == 0:
        booster.save_model("/workspace/xgboost_model.json")
        print("model saved to /workspace/xgboost_model.json", flush=True)
if tracker is not None:
    tracker.wait_for()
print(f"worker {rank} done", flush=True)
