"""The one-device sections of scripts/gpu_check.py (versions, noise, scoring, es, es-vllm, grpo, grpo-vllm,
ray-vllm-kill, evaluate: its docstring says what each checks), mixed into `gpu_check.Checker` beside
scripts/gpu_check_multi.py's multi-process ones."""

from __future__ import annotations

import time

from gpu_check_fixtures import build_model, installed


class SingleSections:
    """The sections above, mixed into `gpu_check.Checker` (its `args`, `cuda`, `preset`, `small`, `tokenizer` and
    `fresh()`)."""

    def s_versions(self) -> dict:
        import torch

        from esreason_lib.models.device import device_record
        from esreason_lib.models.generation import Sampling, generate

        model = self.fresh()
        t0 = time.perf_counter()
        ro = generate(model, self.tokenizer, ["What is 3 + 5?"] * 2,
                      Sampling(greedy=True, max_new_tokens=self.args.max_new_tokens))
        if self.cuda:
            torch.cuda.synchronize()
        rec = device_record(next(model.parameters()).device)
        return {"generate_s": time.perf_counter() - t0, "tokens": int(ro.completion_mask.sum()),
                "params": sum(p.numel() for p in model.parameters()), "device_name": rec["name"],
                "sm_count": rec["sm_count"], **{k: installed(k) for k in ("torch", "transformers", "vllm", "ray")}}

    def s_noise(self) -> dict:
        import torch

        from esreason_lib.es.noise import counter_normal

        numel, start = 1 << 20, 3 << 30  # an offset past 2^31: the counters' int64 range
        counter_normal(5, 16, self.args.device, start=start)  # compiles the fused kernel, untimed
        t0 = time.perf_counter()
        got = counter_normal(5, numel, self.args.device, start=start)
        if self.cuda:
            torch.cuda.synchronize()
        rate = numel / (time.perf_counter() - t0) / 1e6
        want = counter_normal(5, numel, "cpu", start=start, fused=False)
        differ = int((got.cpu().view(torch.int32) != want.view(torch.int32)).sum())
        if differ:
            raise AssertionError(f"{differ} of {numel} normals differ from the CPU reference (same key and offset)")
        return {"numel": numel, "differ": differ, "mnormals_per_s": rate}

    def s_scoring(self) -> dict:
        import torch

        from esreason_lib.models.logprobs import SCORING, completion_scores, logit_bytes

        model, rows, length = self.fresh(), self.args.prompts, self.args.scoring_tokens
        vocab = model.config.vocab_size
        g = torch.Generator().manual_seed(0)
        p_ids = torch.randint(vocab, (rows, 64), generator=g).to(self.args.device)
        c_ids = torch.randint(vocab, (rows, length), generator=g).to(self.args.device)
        with torch.no_grad():
            _, ent = completion_scores(model, p_ids, torch.ones_like(p_ids, dtype=torch.bool), c_ids,
                                       torch.ones_like(c_ids, dtype=torch.bool), with_entropy=True, chunks=SCORING)
        bound = logit_bytes(SCORING, rows=rows, positions=length, vocab=vocab) / 2**20
        return {"rows": rows, "tokens": length, "logit_bound_mib": bound, "mean_entropy": float(ent.mean())}

    def _train(self, method: str, **kw) -> dict:
        from esreason_lib.methods import trainer

        config = self.preset.config(method, **{**self.small, **kw})
        run = trainer(method)(config, model=self.fresh(), tokenizer=self.tokenizer, progress=False)
        row = run.metrics().iloc[-1]
        times = {k.removeprefix("time/"): float(row[k]) for k in row.index
                 if k.startswith("time/") and k != "time/step_s"}
        return {"config": config, "step_s": float(row["time/step_s"]), "reward_mean": float(row["reward/mean"]),
                **times}

    def s_es(self) -> dict:
        out = self._train("es", population_size=self.args.population)
        out.pop("config")
        return out

    def s_es_vllm(self) -> dict:
        from esreason_lib.es.backends.vllm_engines import VLLMBackend
        from esreason_lib.es.core import ES
        from esreason_lib.es.loop import es_step
        from esreason_lib.models.weights import weights_fingerprint
        from esreason_lib.tasks import get_task

        config = self.preset.config("es", population_size=self.args.population, backend="vllm", **self.small)
        model, task = self.fresh(), get_task("gsm8k")
        examples = task.examples("train", n=64)
        es, backend = ES(config, model), VLLMBackend.from_config(config, task, self.tokenizer)
        theta0 = {k: v.detach().clone() for k, v in es.params.items()}
        try:
            steps = [es_step(es, model, self.tokenizer, task, examples, backend, theta0=theta0)[0] for _ in range(2)]
            bitwise = backend.engine.rpc("es_checksum") == weights_fingerprint(model)
        finally:
            backend.close()
        if not bitwise:
            raise RuntimeError("es-vllm: the engine's weights differ from the driver's after two iterations")
        return {"step_s": sum(m["time/population_s"] for m in steps) / 2, "sync_s": steps[1]["time/sync_s"],
                "bitwise": bitwise, "resyncs": steps[1]["es/resyncs"]}

    def s_grpo(self) -> dict:
        from esreason_lib.grpo.memory import grpo_memory
        from esreason_lib.tasks import get_task

        out = self._train("grpo", minibatch_size=max(1, self.args.prompts // 2))
        config, task = out.pop("config"), get_task("gsm8k")
        prompts = [task.prompt(ex, self.tokenizer) for ex in task.examples("train", n=64)]
        longest = max(len(x) for x in self.tokenizer(prompts, add_special_tokens=False)["input_ids"])
        est = grpo_memory(config, build_model(self.args.shape, "meta", self.tokenizer), prompt_tokens=longest,
                          device_bytes=self._device_bytes())
        return {**out, "micro_batch_size": config.micro_batch_size, "estimate_gib": est["total"]}

    def s_grpo_vllm(self) -> dict:
        out = self._train("grpo", minibatch_size=max(1, self.args.prompts // 2), backend="vllm")
        out.pop("config")
        return out

    def s_ray_vllm_kill(self) -> dict:
        import numpy as np
        import ray

        from esreason_lib.es.backends.ray_actors import RayBackend
        from esreason_lib.es.core import ES
        from esreason_lib.tasks import get_task

        config = self.preset.config("es", population_size=self.args.population, backend="ray-vllm", workers=2,
                                    gpus_per_worker=0.5 if self.cuda else None, **self.small)
        ray.init(num_cpus=2, num_gpus=1 if self.cuda else 0, include_dashboard=False, ignore_reinit_error=True)
        model, task = self.fresh(), get_task("gsm8k")
        backend = RayBackend.from_config(config, task, self.tokenizer, workers=2, engine="vllm")
        try:
            pop, batch = ES(config, model).ask(), task.examples("train", n=self.args.prompts)
            t0 = time.perf_counter()
            first = backend(model, pop, batch, iteration=0)
            start_s = time.perf_counter() - t0
            ray.kill(backend.actors[0], no_restart=True)  # dies before it scores its next member
            t0 = time.perf_counter()
            again = backend(model, pop, batch, iteration=0)
            kill_s = time.perf_counter() - t0
        finally:
            backend.close()
            ray.shutdown()
        if not np.array_equal(first.rewards, again.rewards) or backend.restarts != 1:
            raise RuntimeError(f"ray-vllm-kill: rewards {first.rewards} -> {again.rewards}, restarts "
                               f"{backend.restarts} (want equal rewards and 1 restart)")
        return {"start_s": start_s, "step_after_kill_s": kill_s, "restarts": backend.restarts}

    def s_evaluate(self) -> dict:
        from esreason_lib.evaluation import EvalSpec, evaluate
        from esreason_lib.tasks import get_task

        task, n = get_task("gsm8k"), self.args.eval_samples
        backend = "vllm" if installed("vllm") and not self.args.no_vllm else "local"
        spec = EvalSpec(n_samples=n, temperature=0.6, ks=(1, n), greedy=False, max_new_tokens=self.args.max_new_tokens,
                        backend=backend)
        res = evaluate(self.fresh(), self.tokenizer, task, task.examples("test", n=self.args.prompts), spec,
                       progress=False)
        return {"backend": backend, "samples": n, "pass_at_1": float(res.curve["pass_at_k"].iloc[0])}

    def _device_bytes(self) -> int | None:
        import torch

        return torch.cuda.get_device_properties(self.args.device).total_memory if self.cuda else None
