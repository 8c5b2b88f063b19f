"""P13's training function: the one both sides run as a job (kftrain's function_command, and the Kubeflow SDK's
CustomTrainer, each of which sends this function's source to the job). Self-contained, as both require: its imports
inside, no arguments."""


def allreduce_once() -> None:
    """Join the gloo group torchrun describes, all-reduce one tensor, print the sum on every rank."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    print(f"ALLREDUCE rank {rank} of {world}: sum {total.item():.0f}", flush=True)
    dist.barrier()  # every rank has printed before any leaves: the job's end never cuts a rank's line
    dist.destroy_process_group()
