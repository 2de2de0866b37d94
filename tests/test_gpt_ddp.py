"""DDP: two processes with half the batch each end with the parameters of one process with the whole batch."""

import shutil
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.slow


def run(root, out, *launcher):
    script = root / "tools" / "train_gpt_ddp.py"
    command = [
        *launcher,
        str(script),
        "--steps",
        "5",
        "--batch-size",
        "8",
        "--out",
        str(out),
    ]
    done = subprocess.run(
        command, cwd=root, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(out, weights_only=True), done.stdout


def test_two_processes_with_half_the_batch_equal_one_with_the_whole_batch(
    root, tmp_path
):
    if (
        not torch.distributed.is_available()
        or not torch.distributed.is_gloo_available()
    ):
        pytest.skip("torch.distributed with gloo is not available")
    torchrun = shutil.which(
        "torchrun", path=str(root / ".venv" / "bin")
    ) or shutil.which("torchrun")
    launcher = (
        [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]
    )
    one, log_one = run(root, tmp_path / "one.pt", sys.executable)
    two, log_two = run(
        root,
        tmp_path / "two.pt",
        *launcher,
        "--nproc_per_node=2",
        "--master_port=29517",
    )
    assert (
        "1 process(es), 8 windows each" in log_one
        and "2 process(es), 4 windows each" in log_two
    )
    # the initial weights, to see that five steps moved them far more than the tolerance
    torch.manual_seed(0)
    from companion.gpt import GPT, GPTConfig

    start = GPT(
        GPTConfig(vocab_size=256, context_length=64, n_layers=2, n_heads=4, d_model=64)
    ).state_dict()
    moved = max((one[k] - start[k]).abs().max().item() for k in one)
    assert moved > 3e-3
    for name in one:  # float32, summed in another order: a few ulps of Adam's steps
        torch.testing.assert_close(two[name], one[name], atol=2e-5, rtol=0, msg=name)
