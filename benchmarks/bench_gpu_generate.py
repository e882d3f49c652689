"""Per-step decode time on a CUDA GPU at Qwen2.5-1.5B's shape (random bf16 model, 2 rows, 128 steps): the library's
`generate` (first call and again, greedy; sampled at T = 0.6) against transformers' `generate` and a bare cached
forward loop, printed side by side. Run from the repository root: `python benchmarks/bench_gpu_generate.py`.
Measured on an H200: docs/gpu_check_h200/gen_speed_output.txt."""
import argparse
import sys
import time
from pathlib import Path

import torch
from transformers import DynamicCache

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from gpu_check_fixtures import build_model, build_tokenizer  # noqa: E402

from esreason_lib.models.generation import Sampling, generate  # noqa: E402


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu_generate: needs a CUDA GPU (torch.cuda.is_available() is False here); "
                         "on a CPU, benchmarks/bench_llama_generate.py and run_all.py time the CPU paths")
    tok = build_tokenizer(151_936)
    model = build_model("qwen2.5-1.5b", "cuda", tok)
    prompts = ["What is 3 + 5?"] * 2
    T = 128

    def timed(fn):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t) / T * 1e3

    generate(model, tok, prompts, Sampling(greedy=True, max_new_tokens=8))
    first = timed(lambda: generate(model, tok, prompts, Sampling(greedy=True, max_new_tokens=T)))
    ours = timed(lambda: generate(model, tok, prompts, Sampling(greedy=True, max_new_tokens=T)))
    ours_s = timed(lambda: generate(model, tok, prompts, Sampling(greedy=False, temperature=0.6, max_new_tokens=T)))
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to("cuda")
    model.generate(**enc, max_new_tokens=8, do_sample=False)
    hf = timed(lambda: model.generate(**enc, max_new_tokens=T, min_new_tokens=T, do_sample=False))

    def bare():
        cache = DynamicCache(config=model.config)
        out = model(**enc, past_key_values=cache, use_cache=True, logits_to_keep=1)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        mask = enc["attention_mask"]
        for _ in range(T - 1):
            mask = torch.cat([mask, torch.ones_like(nxt)], 1)
            out = model(input_ids=nxt, attention_mask=mask, past_key_values=out.past_key_values, use_cache=True,
                        logits_to_keep=1)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    with torch.no_grad():
        bare()
        b = timed(bare)
    print(f"ms per decoding step, batch 2, Qwen2.5-1.5B shape bf16: esreason greedy first call {first:.1f}, "
          f"again {ours:.1f}, esreason sampled {ours_s:.1f}, "
          f"transformers generate {hf:.1f}, bare cached forward loop {b:.1f}")


if __name__ == "__main__":
    main()
