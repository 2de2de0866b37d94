"""The companion's GPT against Hugging Face's GPT2LMHeadModel: training step time, and the key/value cache.

1. **Training step** (forward, next-token cross-entropy, backward, AdamW step) of the same configuration, the
   same weights (ported with ``companion.interop.hf_gpt.gpt_from_hf``), the same batch of token ids and the same
   thread count. Rows: the companion with its own attention function (softmax of explicit scores, as chapter 4
   writes it), the companion with PyTorch's fused ``F.scaled_dot_product_attention`` through the attention
   seam, and Hugging Face with its ``"eager"`` and ``"sdpa"`` attention. Each row gives milliseconds per step
   (median of the repeats, interleaved so that a change of load hits every row alike), tokens per second and
   the ratio to Hugging Face's default (``sdpa``) on the same thread count.
2. **Generation**: greedy decoding of ``--new-tokens`` tokens after a short prompt, with the key/value cache
   and recomputing the whole prefix at every step (the same tokens come out; checked).

Usage::

    python benchmarks/gpt_vs_transformers.py                    # chapter 6's model size, 1 and 2 threads
    python benchmarks/gpt_vs_transformers.py --threads 1 --repeat 20 --d-model 256 --layers 6

Times move with the machine's load; compare within one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from companion.gpt import GPT, Sampling, generate  # noqa: E402
from companion.interop.hf_gpt import gpt_from_hf  # noqa: E402


def fused_attention(q, k, v, mask=None, causal=False):
    """The attention seam over PyTorch's fused kernel (training only: n_q = n_k, so causal needs no offset)."""
    if causal and q.shape[-2] != k.shape[-2]:
        raise ValueError("fused_attention: causal with a cache is not supported here")
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)


def hf_model(args, attn_implementation: str, context: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=args.vocab_size, n_positions=context, n_embd=args.d_model, n_layer=args.layers,
        n_head=args.heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    config._attn_implementation = attn_implementation
    return GPT2LMHeadModel(config)


def training_steps(args, threads: int) -> list[tuple[str, float]]:
    torch.set_num_threads(threads)
    hf = {name: hf_model(args, name, args.length) for name in ("eager", "sdpa")}
    hf["sdpa"].load_state_dict(hf["eager"].state_dict())
    ours = gpt_from_hf(hf["eager"])
    fused = GPT(ours.config, attention=fused_attention)
    fused.load_state_dict(ours.state_dict())
    ids = torch.randint(
        0,
        args.vocab_size,
        (args.batch_size, args.length + 1),
        generator=torch.Generator().manual_seed(0),
    )
    inputs, targets = ids[:, :-1], ids[:, 1:].flatten()

    def step_fn(model, logits_of):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            loss = F.cross_entropy(logits_of(model).flatten(0, 1), targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            return loss

        return step

    steps = {
        "companion (its attention)": step_fn(ours, lambda m: m(inputs)),
        "companion (fused attention)": step_fn(fused, lambda m: m(inputs)),
        "transformers (eager)": step_fn(hf["eager"], lambda m: m(inputs).logits),
        "transformers (sdpa)": step_fn(hf["sdpa"], lambda m: m(inputs).logits),
    }
    # one warm-up step each: equal losses
    first = {name: float(step().detach()) for name, step in steps.items()}
    assert max(first.values()) - min(first.values()) < 1e-4, first
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.repeat):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return [(name, statistics.median(t)) for name, t in times.items()]


def generation(args, threads: int) -> list[tuple[str, float]]:
    torch.set_num_threads(threads)
    context = args.prompt + args.new_tokens
    hf = hf_model(args, "sdpa", context).eval()
    ours = gpt_from_hf(hf)
    prompt = torch.randint(
        0, args.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(1)
    )
    out = {}
    times = {}
    greedy = Sampling(args.new_tokens, temperature=0)
    for name, fn in {
        "companion, KV cache": lambda: generate(ours, prompt, greedy),
        "companion, recompute the prefix": lambda: generate(ours, prompt, greedy, use_cache=False),
        "transformers, KV cache": lambda: hf.generate(prompt, max_new_tokens=args.new_tokens, do_sample=False,
                                                      pad_token_id=0, min_new_tokens=args.new_tokens),
    }.items():  # fmt: skip
        best = float("inf")
        for _ in range(args.generation_repeat):
            start = time.perf_counter()
            with torch.no_grad():
                out[name] = fn()
            best = min(best, time.perf_counter() - start)
        times[name] = best
    first = next(iter(out.values()))
    assert all(torch.equal(o, first) for o in out.values()), (
        "the three generations differ"
    )
    return list(times.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--repeat", type=int, default=10, help="timed training steps per row (median)"
    )
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument(
        "--generation-repeat", type=int, default=3, help="best of this many generations"
    )
    args = parser.parse_args()
    import transformers

    tokens = args.batch_size * args.length
    print(
        f"GPT: V={args.vocab_size}, d={args.d_model}, h={args.heads}, L={args.layers}; batch {args.batch_size} x "
        f"{args.length} = {tokens} tokens; torch {torch.__version__}, transformers {transformers.__version__}; "
        f"median of {args.repeat} steps."
    )
    print()
    print("| threads | model | ms / step | tokens / s | ratio to transformers (sdpa) |")
    print("|---:|---|---:|---:|---:|")
    for threads in args.threads:
        rows = training_steps(args, threads)
        baseline = dict(rows)["transformers (sdpa)"]
        for name, seconds in rows:
            print(
                f"| {threads} | {name} | {1e3 * seconds:.1f} | {tokens / seconds:,.0f} | {seconds / baseline:.2f}x |"
            )
    print()
    print(f"Greedy generation of {args.new_tokens} tokens after a {args.prompt}-token prompt (best of "
          f"{args.generation_repeat}; the same tokens in every row):")  # fmt: skip
    print()
    print("| threads | generation | seconds | tokens / s | speed-up over recomputing |")
    print("|---:|---|---:|---:|---:|")
    for threads in args.threads:
        rows = generation(args, threads)
        slow = dict(rows)["companion, recompute the prefix"]
        for name, seconds in rows:
            print(
                f"| {threads} | {name} | {seconds:.2f} | {args.new_tokens / seconds:,.0f} | {slow / seconds:.1f}x |"
            )


if __name__ == "__main__":
    main()
