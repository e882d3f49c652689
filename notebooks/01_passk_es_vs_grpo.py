# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version,-jupytext.text_representation.format_version
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · ES vs GRPO: Pass@K, token entropy and reasoning coverage
#
# The paper's main result: post-training the same base model with Evolution Strategies (ES: perturb the weights,
# score each perturbed copy by its greedy answers, move along the reward-weighted noise) raises Pass@1 over the
# base *and* keeps Pass@K high at large K, while GRPO (sample groups, policy-gradient on group-normalised
# advantages) sharpens the distribution: it may win at K = 1, but its token entropy collapses and its Pass@K at
# large K falls to, or below, the base's. ES covers more of the base's reasoning paths.
#
# Here both methods start from the same tiny Qwen2 base on Countdown, with the preset's hyperparameters, for
# every training seed of the preset. Each trained model and the base are evaluated on the same held-out problems
# with `n_samples` samples per problem at one fixed temperature. All runs and evaluations are cached in the run
# store, so re-running this notebook only redraws.

# %% tags=["parameters"]
preset = "tiny"

# %%
import matplotlib.pyplot as plt

from esreason_lib.claims import record_finding
from esreason_lib.experiments.comparison import comparison_report, describe_comparison, format_spread
from esreason_lib.plots import plot_bars_spread, plot_metric_curves, plot_pass_at_k_seeds, save_figure
from esreason_lib.presets import get_preset

config = get_preset(preset)
report = comparison_report(config)

# %% [markdown]
# **Cost of each run.** Generations are the sampled completions each method's updates consumed (ES: population
# members x prompts per iteration; GRPO: group size x prompts per iteration); seconds are the summed wall time of
# the training steps on this machine. Both methods see the same training split and train for the preset's
# number of iterations.

# %%
cost = report["cost"]
cost.groupby("method")[["iterations", "generations", "seconds"]].agg(["mean", "min", "max"]).round(1)

# %% [markdown]
# **Pass@K.** Thick lines: the mean over training seeds of the unbiased Pass@K estimate, with a 95% bootstrap
# band over problems (of the per-problem seed mean). Thin lines: the individual seeds. The base has no seed. The
# table gives each method's seed mean with the seed [min, max].

# %%
fig, ax = plot_pass_at_k_seeds(report["mean_curves"], report["curves"])
ax.set_title(f"{config.task}: Pass@K at T={config.eval.temperature}, n={config.eval.n_samples}")
_ = save_figure(fig, "01_passk")
format_spread(report["summary"])

# %% [markdown]
# Paired differences (seed means, paired by problem) with 95% bootstrap intervals over problems, at K = 1 and the
# largest K.

# %%
report["diffs"].round(3)

# %% [markdown]
# **Token entropy.** Left: `policy/entropy` logged during training against normalised progress (step /
# iterations). The two curves measure slightly different things: GRPO logs the entropy of its T = 1 sampling
# distribution at the positions it sampled; ES logs the centre model's full next-token entropy at the positions of
# its own greedy answers. Read each curve's *trend* (does it collapse?), not the level between methods. Right: the
# comparable measure, the mean token entropy of the evaluation samples (same temperature, same problems) for base,
# GRPO and ES (bars: seed mean; whiskers: seed min-max).

# %%
summary = report["summary"]
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
plot_metric_curves(report["traces"], "policy/entropy", x="progress", smooth=9, ax=axes[0],
                   ylabel="token entropy (nats)")
axes[0].set_xlabel("training progress (step / iterations)")
plot_bars_spread(summary, "method", "eval_entropy", ax=axes[1])
axes[1].set_ylabel(f"eval token entropy at T={config.eval.temperature}")
_ = save_figure(fig, "01_entropy")
report["entropy_change"].round(3)

# %% [markdown]
# **Reasoning coverage.** Left: distinct correct Countdown expressions found per problem among the `n_samples`
# samples (canonical forms, so `3+4` and `4+3` count once). Right: the fraction of problems solved at least once
# (Pass@n). Bars: seed mean; whiskers: seed min-max.

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
plot_bars_spread(summary, "method", "distinct_correct", ax=axes[0])
axes[0].set_ylabel("distinct correct answers / problem")
plot_bars_spread(summary, "method", "solved", ax=axes[1])
axes[1].set_ylabel(f"solved at least once (pass@{config.eval.n_samples})")
_ = save_figure(fig, "01_coverage")

# %%
finding = describe_comparison(report["summary"], report["diffs"], n_seeds=len(config.seeds))
record_finding("01_passk_es_vs_grpo", finding, preset=preset)
print(finding)

# %% [markdown]
# **What this run shows.** The printed line is computed from the tables above. It gives Pass@1 and Pass@K at the
# largest K for base / GRPO / ES (seed means), the distinct correct answers per problem, the evaluation token
# entropy, and the ratio of the last to the first tenth of each method's training entropy (x1.00 = no change;
# a GRPO ratio well below ES's is the paper's "entropy collapse"). The three yes/no checks carry paired
# differences with 95% bootstrap intervals over problems: "ES pass@1 above base" and "ES above GRPO at K=max"
# are the paper's claims; "GRPO wins at K=1" is what the paper allows. A "no", or an interval that straddles
# zero, means this miniature does not reproduce (or cannot resolve) that part of the claim at this scale: the
# tiny models, few iterations and 200 held-out problems leave differences of a few points within noise, and the
# seed spread in the figures shows how much a single run could mislead.
