"""Pretrain chapter 6's GPT on Python's documentation and save it as the package's checkpoint.

    .venv/bin/python tools/pretrain_gpt.py                      # writes companion/data/gpt_pydoc.pt
    .venv/bin/python tools/pretrain_gpt.py --steps 50 --out /tmp/x.pt   # a quick try

Everything is seeded and runs on one CPU thread (measured faster than two for this model size on a shared
2-core machine), so the same command with the same torch version on the same CPU writes the same file; the text is
the shipped snapshot ``companion.data.python_docs``. ``companion/data/gpt_pydoc.pt.sha256`` holds the file's SHA-256,
and chapter 6 reproduces the first training steps itself.
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from companion.bpe import BPETokenizer  # noqa: E402
from companion.training.gpt_pretraining import (  # noqa: E402
    PRETRAINED_PATH,
    RECIPE,
    pretrain,
    pydoc_text,
    save_checkpoint,
    text_sha256,
    train_val_split,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--out", type=Path, default=PRETRAINED_PATH)
    args = parser.parse_args()
    torch.set_num_threads(1)
    text = pydoc_text()
    start = time.perf_counter()
    tokenizer = BPETokenizer.train(text, RECIPE["vocab_size"])
    train_ids, val_ids = train_val_split(tokenizer.encode(text))
    model, history = pretrain(RECIPE, args.steps, train_ids, val_ids)
    seconds = time.perf_counter() - start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(
        args.out, model, tokenizer, recipe=RECIPE, steps=args.steps, history=history,
        text_sha256=text_sha256(text), python=platform.python_version(), torch=torch.__version__.split("+")[0],
        command=f"python tools/pretrain_gpt.py --steps {args.steps}",
    )  # fmt: skip
    digest = hashlib.sha256(args.out.read_bytes()).hexdigest()
    Path(str(args.out) + ".sha256").write_text(f"{digest}  {args.out.name}\n")
    print(
        f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB, sha256 {digest}, {seconds:.0f} s"
    )
    print(
        f"validation loss {history['val_loss'][0]:.3f} -> {history['val_loss'][-1]:.3f} nats/token"
    )


if __name__ == "__main__":
    main()
