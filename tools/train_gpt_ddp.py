"""Train a GPT data-parallel with PyTorch's DistributedDataParallel (gloo backend, CPU), or in one process.

    python tools/train_gpt_ddp.py --out /tmp/one.pt                              # one process, whole batch
    torchrun --nproc_per_node=2 tools/train_gpt_ddp.py --out /tmp/two.pt         # two processes, half each

The training step is chapter 6's, unchanged: ``companion.training.train`` with ``companion.gpt.next_token_loss``.
Every process draws the same global batch of windows of Python's documentation (UTF-8 bytes as tokens) and keeps
its own slice; DDP averages the gradients over the processes during ``backward()``, so every process takes the
same optimizer step as one process with the whole batch would. On several machines, start the same command on
each with the rendezvous address of one of them::

    torchrun --nnodes=2 --node_rank=0 --nproc_per_node=2 --master_addr=HOST --master_port=29500 tools/train_gpt_ddp.py
    torchrun --nnodes=2 --node_rank=1 --nproc_per_node=2 --master_addr=HOST --master_port=29500 tools/train_gpt_ddp.py
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from companion.gpt import GPT, GPTConfig, next_token_loss  # noqa: E402
from companion.training import train  # noqa: E402
from companion.training.gpt_pretraining import pydoc_text, random_windows  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=8,
        help="the global batch, split over the processes",
    )
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        help="where process 0 saves the final state dict",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)

    distributed = "WORLD_SIZE" in os.environ  # set by torchrun
    if distributed:
        dist.init_process_group("gloo")  # CPU; "nccl" on GPUs
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    if args.batch_size % world:
        raise ValueError(
            f"--batch-size {args.batch_size} must be divisible by the {world} processes"
        )
    share = args.batch_size // world

    # the same initial weights in every process (DDP also broadcasts rank 0's)
    torch.manual_seed(0)
    config = GPTConfig(
        vocab_size=256, context_length=args.length, n_layers=2, n_heads=4, d_model=64
    )
    # dropout 0: with dropout every process would draw its own masks
    model = GPT(config)
    ids = torch.tensor(list(pydoc_text().encode("utf-8")[:200_000]))
    # the same global batches in every process
    generator = torch.Generator().manual_seed(1)

    def my_slice(step: int) -> torch.Tensor:
        # (batch_size, length + 1)
        batch = random_windows(ids, args.batch_size, args.length, generator)
        return batch[rank * share : (rank + 1) * share]

    wrapped = DistributedDataParallel(model) if distributed else model
    losses = train(
        wrapped,
        my_slice,
        next_token_loss,
        steps=args.steps,
        lr=1e-3,
        progress=False,
        seed=0,
    )
    if rank == 0:
        torch.save(model.state_dict(), args.out)
        print(
            f"{world} process(es), {share} windows each: losses {[round(x, 4) for x in losses]}"
        )
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
