"""GRPO: group-relative policy optimisation, the gradient baseline ES is compared against.

After DeepSeekMath (Shao et al. 2024, "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open
Language Models", arXiv 2402.03300, Sec. 4.1): for each prompt sample a group of G completions from the old
policy, score them with the verifier, use the group-normalised reward as every token's advantage, and
maximise a PPO clipped surrogate minus beta * KL(pi || pi_ref).

Deviations from the paper (all deliberate, all visible in `GRPOConfig`):
- No reward model: rewards come from the task's rule-based verifier (`Task.reward`, shaped
  correct / well-formed / invalid), i.e. outcome supervision only, no process supervision.
- No value model (as in GRPO) and no iterative reward-model retraining (the paper's "iterative RL").
- Rollout reuse: each batch of rollouts is used for `ppo_epochs` passes (the paper's mu), and each pass is
  split into minibatches of `minibatch_size` prompts (all G completions of a prompt stay together), one
  optimiser step each, so the paper's 64 prompts with minibatch 32 take two steps per rollout. The old
  log-probs pi_old are a forward pass of the rollout policy (the weights that sampled, temperature applied,
  no top-p cut, no grad) over the whole batch before the first step; the first minibatch of the first pass
  reuses its own forward for them (the same weights), so its ratio is exactly 1 and from the second step
  on the ratio and the clip are live. One minibatch for one epoch (the tiny presets) is the on-policy
  "single-sample" setting: ratio 1, and the clipped surrogate's gradient equals the plain policy gradient.
- KL: the k3 estimator exp(ref - logp) - (ref - logp) - 1 (Schulman 2020) added to the per-token loss, as
  in the paper, but only when beta > 0 (beta = 0 skips the reference model entirely, as in DAPO/Dr.GRPO).
- Aggregation: "seq-mean-token-mean" is the paper's 1/G sum_i 1/|o_i| sum_t; "token-mean" (DAPO) divides
  the sum over all tokens by the number of tokens, so long completions are not down-weighted. Either is
  normalised within each minibatch.
- Advantage scale: "group" divides by the group's standard deviation (paper); "none" only centres
  (Dr.GRPO, Liu et al. 2025), removing the difficulty bias. Std is the population std (ddof=0).
- AdamW with global grad-norm clipping. Within a minibatch, `micro_batch_size` chunks accumulate the
  gradient exactly (memory only, not a further split). A bfloat16 model keeps fp32 master weights in the
  optimiser (`optim.master_weight_adamw`): the bf16 gradients are copied into fp32, AdamW steps the fp32
  copy and the model gets it rounded to bf16, so updates far below bf16's resolution (lr 1e-6 against
  weights ~1e-2) accumulate instead of being rounded away; checkpoints keep the masters.
- Prompts: `prompt_order` "random" draws each iteration's prompts afresh; "epoch" (the paper presets) shows
  every train example once per epoch (`training.settings.prompt_indices`).
- Compute, not maths: the update (`grpo.update.policy_update`) forwards each distinct (prompt, completion,
  advantage) row once, weighted by its multiplicity, and with beta = 0 skips the rows whose advantage is 0 (their
  loss and gradient are exactly 0; they stay in the normaliser), so the loss and gradient are the full batch's up
  to float rounding; a group's repeated completions are scored once.
"""

from __future__ import annotations

import copy
import functools
import math
import time

import numpy as np
import torch

from esreason_lib.grpo.config import GRPOConfig
from esreason_lib.grpo.distributed import from_rank0, shared_checkpoint
from esreason_lib.grpo.loss import group_advantages
from esreason_lib.grpo.memory import check_grpo_fits, scoring_chunks
from esreason_lib.grpo.update import policy_update
from esreason_lib.guards import check_finite_step
from esreason_lib.learning_signal import grpo_note
from esreason_lib.metrics import mean_token_entropy
from esreason_lib.models.device import record_device
from esreason_lib.models.generation import Forward, Sampling, generate
from esreason_lib.models.hf_compat import set_checkpointing
from esreason_lib.models.optim import master_weight_adamw
from esreason_lib.models.zoo import quiet_transformers
from esreason_lib.progress import progress_bar, say_no_update
from esreason_lib.seeding import derive_seed
from esreason_lib.store.runs import Run
from esreason_lib.tasks.base import score_completion
from esreason_lib.training.run_entry import open_training_run, save_snapshot
from esreason_lib.training.settings import prompt_indices


def grpo_step(model, ref, opt, tokenizer, task, examples, prompts, config: GRPOConfig, iteration: int, *,
              rollout=generate) -> dict:
    """One GRPO iteration: draw prompts, sample G completions each with `rollout` (`generate` or a callable that
    takes its arguments, e.g. `models.rollouts_vllm.VLLMRollouts`), score, and take the `policy_update` steps.

    Returns the metrics for this iteration (see `train_grpo`; the policy metrics are means over the steps that
    report them: `policy/ratio_mean` is absent from a step with no row to forward).
    Deterministic in (config.seed, iteration).
    """
    t0 = time.perf_counter()
    c, G = config, config.group_size
    device = next(model.parameters()).device
    idx = prompt_indices(len(examples), c.prompts_per_step, iteration, c.seed, "grpo", c.prompt_order)  # [P]
    t_rollout = time.perf_counter()
    sampling = Sampling(temperature=c.temperature, top_p=c.top_p,
                        max_new_tokens=c.max_new_tokens or task.max_new_tokens, sampler=c.sampler)
    ro = rollout(model, tokenizer, [prompts[i] for i in idx], sampling, n=G, stop=task.stop,
                 seed=derive_seed(c.seed, "grpo", "sample", iteration))
    t_rollout = time.perf_counter() - t_rollout
    scored: dict[tuple[int, str], tuple[float, bool]] = {}  # a group's repeated completions are scored once
    for i, s in enumerate(ro.completions):
        if (i // G, s) not in scored:
            scored[i // G, s] = score_completion(task, s, examples[idx[i // G]])  # (reward, correct)
    rewards = np.array([scored[i // G, s][0] for i, s in enumerate(ro.completions)])  # [B]
    correct = np.array([scored[i // G, s][1] for i, s in enumerate(ro.completions)], dtype=np.float64)  # [B]
    adv = group_advantages(rewards, G, c.scale).to(device)  # [B]
    c_mask = ro.completion_mask.to(device)  # [B, Lc]
    steps = policy_update(model, ref, opt, ro.prompt_ids.to(device), ro.prompt_mask.to(device),
                          ro.completion_ids.to(device), c_mask, adv, c)
    groups = rewards.reshape(-1, G)  # [P, G]
    means = {k: float(np.mean([s[k] for s in steps if k in s])) for k in dict.fromkeys(k for s in steps for k in s)}
    return {
        "reward/mean": float(rewards.mean()),
        "reward/std": float(rewards.std()),
        "reward/correct_frac": float(correct.mean()),
        "policy/entropy": float(mean_token_entropy(ro.entropies, ro.completion_mask)),
        **{k: v for k, v in means.items() if not math.isnan(v)},
        "grpo/zero_std_frac": float((groups.max(axis=1) == groups.min(axis=1)).mean()),
        "completion/length": float(c_mask.sum(dim=1).float().mean()),
        "grpo/generations": (iteration + 1) * len(ro.completions),
        "time/rollout_s": t_rollout,
        "time/step_s": time.perf_counter() - t0,
    }


def rollout_sampler(config: GRPOConfig):
    """What samples `config`'s rollouts: `generate` (with the `Forward` of `config.forward` and `share_prefixes` when
    they are not the defaults; `grpo_step` passes `config.sampler` in its `Sampling`), or a
    `models.rollouts_vllm.VLLMRollouts` (to be closed) for "vllm"."""
    if config.backend == "vllm":
        from esreason_lib.models.rollouts_vllm import VLLMRollouts

        share = config.gpu_memory_utilization
        return VLLMRollouts(engine_seed=config.seed, chunks=scoring_chunks(config),
                            check_every=config.check_every, sleep=config.engine_sleep,
                            engine_kwargs=None if share is None else {"gpu_memory_utilization": share})
    if config.forward == "hf":
        return generate
    return functools.partial(generate, forward=Forward(kind=config.forward, share_prefixes=config.share_prefixes))


def fit_check(config: GRPOConfig, model, tokenizer, prompts: list[str]) -> dict[str, float] | None:
    """On a CUDA model, `memory.check_grpo_fits` for the longest of `prompts` (ValueError naming the knob when the
    estimate exceeds the device); None elsewhere (host memory is not estimated)."""
    device = next(model.parameters()).device
    if device.type != "cuda":
        return None
    longest = max(len(x) for x in tokenizer(list(prompts), add_special_tokens=False)["input_ids"])
    return check_grpo_fits(config, model, prompt_tokens=longest,
                           device_bytes=torch.cuda.get_device_properties(device).total_memory)


def train_grpo(config: GRPOConfig, *, model=None, tokenizer=None, task=None, home=None, resume: bool = True,
               progress: bool = True) -> Run:
    """Train `config.model` on `config.task` with GRPO; returns the `Run` (immediately if already complete).

    `model`/`tokenizer` override loading `config.model` (the model is moved to config.device/dtype and
    trained in place); `task` (a `Task`) overrides `get_task(config.task, ...)` and its own reward shaping
    is then used. With `resume`, training
    continues from the run's last checkpoint and ends bit-identical to an uninterrupted run; without it, any
    earlier metrics are dropped and training starts from the base model. Logs per iteration (step = 1-based
    iteration): reward/mean, reward/std, reward/correct_frac (verified-correct completions), policy/entropy,
    policy/kl (beta > 0), policy/clip_frac,
    policy/ratio_mean, policy/grad_norm, loss/policy, grpo/zero_std_frac, completion/length,
    grpo/generations (cumulative), time/rollout_s (sampling, inside time/step_s), time/step_s. With `progress`, a
    run whose groups' samples all scored alike in most iterations (advantage 0) ends with one line saying
    so and why it may be (`learning_signal.grpo_note`, `progress.say_no_update`). With `config.engine` "trl", TRL's
    `GRPOTrainer` trains instead (`grpo.trl_engine.train_grpo_trl`).
    """
    if config.engine == "trl":
        from esreason_lib.grpo.trl_engine import train_grpo_trl

        return train_grpo_trl(config, model=model, tokenizer=tokenizer, task=task, home=home, resume=resume,
                              progress=progress)
    run, inputs = open_training_run("grpo", config, model=model, tokenizer=tokenizer, task=task, home=home,
                                    progress=progress)
    if from_rank0(inputs is None):  # process 0's run is complete: every process of a torchrun launch ends
        return run
    model, tokenizer, task, examples = inputs
    prompts = [task.prompt(ex, tokenizer) for ex in examples]
    ref = copy.deepcopy(model).eval().requires_grad_(False) if config.beta > 0 else None
    fit_check(config, model, tokenizer, prompts)
    record_device(run, model)
    if config.gradient_checkpointing:  # after the reference copy, which only runs forward
        set_checkpointing(model, True)
    opt = master_weight_adamw(model, lr=config.lr, weight_decay=config.weight_decay)
    masters = [m for group in opt.param_groups for m in group["params"]]

    start = 0
    ckpt = shared_checkpoint(run, resume)  # under torchrun: process 0's, on every process
    if ckpt is not None:
        step, state = ckpt
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        with torch.no_grad():
            for m, saved in zip(masters, state["masters"]):
                m.copy_(saved)
        torch.set_rng_state(state["torch_rng"])
        start = int(state["iteration"])
        run.truncate_metrics(step)
    else:
        run.truncate_metrics(0)

    bar = progress_bar(range(start, config.iterations), initial=start, total=config.iterations,
                       disable=not progress, desc=f"grpo {config.task}")
    rollout = rollout_sampler(config)
    try:
        for it in bar:
            m = grpo_step(model, ref, opt, tokenizer, task, examples, prompts, config, it, rollout=rollout)
            run.log(it + 1, m)
            check_finite_step(model, m, where=f"train_grpo iteration {it + 1}", run=run)
            bar.set_postfix(reward=f"{m['reward/mean']:.3f}", ent=f"{m['policy/entropy']:.2f}")
            save_snapshot(run, config, it + 1, model, tokenizer)
            if config.checkpoint_every and (it + 1) % config.checkpoint_every == 0 and it + 1 < config.iterations:
                run.save_checkpoint(it + 1, {"model": model.state_dict(), "optimizer": opt.state_dict(),
                                             "masters": [m.detach() for m in masters],
                                             "iteration": it + 1, "torch_rng": torch.get_rng_state()})
    finally:  # a sampler made here may hold an engine (vLLM): released even when a step fails
        if hasattr(rollout, "close"):
            rollout.close()
        if config.gradient_checkpointing:  # the caller's model is handed back as it came
            set_checkpointing(model, False)
    with quiet_transformers():
        model.save_pretrained(run.model_dir)
        tokenizer.save_pretrained(run.model_dir)
    run.finish()
    metrics = run.metrics()
    note = grpo_note(metrics["grpo/zero_std_frac"], metrics.get("reward/correct_frac")) if progress else None
    if note:
        say_no_update(note)
    return run
