"""Generation throughput: KV-cached vs uncached decoding, measured side by side in one run (a script, not a test).

    .venv/bin/python benchmarks/bench_generation.py                 # random qwen2-s-sized model, 200 x 16
    .venv/bin/python benchmarks/bench_generation.py --model qwen2-s # a zoo model / local dir (trains if absent)

Prints wall time, generated tokens/s and completions/s for both paths, and the speed-up of the cache.
A random model rarely emits EOS, so its rows run to `--max-new-tokens`: an upper bound on the work.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import transformers

from esreason_lib.models.generation import Forward, Sampling, generate


def _random_model(vocab_size: int, hidden: int, layers: int, mlp: int) -> transformers.Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True,
        pad_token_id=0, eos_token_id=1, bos_token_id=None)
    return transformers.Qwen2ForCausalLM(config).eval()


def _prompts(count: int, seed: int) -> list[str]:
    """Countdown-shaped prompts like "03 12 07>022=" (13 characters)."""
    rng = np.random.default_rng(seed)
    return [" ".join(f"{x:02d}" for x in rng.integers(1, 16, 3)) + f">{rng.integers(1, 200):03d}="
            for _ in range(count)]


def _time(fn, repeats: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="zoo name or model dir (default: a random qwen2-s-sized model)")
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--mlp", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=2, help="best of this many runs per path")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    ap.add_argument("--skip-uncached", action="store_true")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.model is None:
        from esreason_lib.models.zoo import build_char_tokenizer
        tok = build_char_tokenizer()
        model = _random_model(len(tok), args.hidden, args.layers, args.mlp)
    else:
        from esreason_lib.models.load import load_model
        model, tok = load_model(args.model)
    prompts = _prompts(args.prompts, 0)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {args.model or 'random'} ({n_params / 1e6:.3f}M params), torch threads {torch.get_num_threads()}, "
          f"{len(prompts)} prompts x n={args.n}, max_new_tokens={args.max_new_tokens}, batch_size={args.batch_size}")
    results = {}
    for use_cache in ([True] if args.skip_uncached else [True, False]):
        def run():
            return generate(model, tok, prompts, Sampling(temperature=1.0, max_new_tokens=args.max_new_tokens),
                            n=args.n, seed=0, forward=Forward(batch_size=args.batch_size, use_cache=use_cache))
        seconds, ro = _time(run, args.repeats)
        tokens = int(ro.completion_mask.sum())
        results[use_cache] = (seconds, ro)
        label = "cached  " if use_cache else "uncached"
        print(f"{label}: {seconds:7.3f} s  {tokens / seconds:10.0f} tokens/s  "
              f"{len(ro.completions) / seconds:8.0f} completions/s  (mean length "
              f"{tokens / len(ro.completions):.1f} tokens)")
    if len(results) == 2:
        same = torch.equal(results[True][1].completion_ids, results[False][1].completion_ids)
        print(f"speed-up of the KV cache: {results[False][0] / results[True][0]:.2f}x  (identical tokens: {same})")


if __name__ == "__main__":
    main()
