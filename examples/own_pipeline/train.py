"""A training script that knows nothing of kftrain: the operator's environment (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT) for DDP, $KFTRAIN_MODEL_URI for the model (TorchScript, as the model contract asks), and metric lines
on standard output for the launch step's curves."""

import argparse
import json
import os

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    steps = parser.parse_args().steps
    dist.init_process_group("gloo")  # reads the variables the operator sets
    rank = dist.get_rank()
    torch.manual_seed(0)
    x = torch.randn(256, 4)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1 * torch.randn(256)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, steps + 1):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
        loss.backward()
        optimizer.step()
        if rank == 0 and step % 10 == 0:
            print("KFTRAIN_METRICS " + json.dumps({"step": step, "loss": round(loss.item(), 5)}), flush=True)
    if rank == 0:
        out = os.environ["KFTRAIN_MODEL_URI"]
        os.makedirs(out, exist_ok=True)
        torch.jit.save(torch.jit.script(model.module), os.path.join(out, "model.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
