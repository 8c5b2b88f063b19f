"""Launch a PyTorchJob: one Master and `workers` Workers running `command` + `args` (DDP); fail when the job fails.

With `elastic_max_workers` set the job is elastic: Workers only (no Master), starting with `workers`, between
`elastic_min_workers` and `elastic_max_workers` as workers are lost or added (or an HPA with `elastic_metrics`
scales it), re-forming at each torchrun rendezvous; the default program then runs under torchrun.
"""

from kftrain_components.training.launch_inputs import Input, launch_component

pytorchjob_launch = launch_component(
    __name__,
    Input("workers", int, 1, "Worker replicas besides the Master; elastic: the Workers to start with."),
    Input("nproc_per_node", str, "1", "Processes per replica (auto, cpu, gpu or a number)."),
    Input("elastic_min_workers", int, 0, "Elastic: the fewest Workers the job trains with (0: 1)."),
    Input("elastic_max_workers", int, 0, "Elastic: the most Workers (0: not elastic); sets the elasticPolicy."),
    Input("elastic_max_restarts", int, 3, "Elastic: worker-group restarts torchrun allows (a lost worker is one)."),
    Input("elastic_rdzv_backend", str, "c10d", "Elastic: the rendezvous backend (c10d, etcd, etcd-v2, static)."),
    Input(
        "elastic_rdzv_conf",
        dict,
        {},
        'Elastic: rendezvous settings, e.g. {"join_timeout": "600", "last_call_timeout": "30"} (rdzvConf).',
    ),
    Input("elastic_metrics", list, [], "Elastic: autoscaling/v2 MetricSpecs for an HPA on the Workers (metrics)."),
    shm_size="2Gi",  # PyTorch's data loader workers and NCCL share memory through /dev/shm
)
