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
# # 00 · The base models
#
# Every experiment starts from a base model. The paper post-trains pretrained LLMs (Qwen2.5, DeepSeek-R1-Distill)
# whose *sampled* answers already contain many correct solutions that greedy decoding misses. At tiny scale
# the library pretrains real `Qwen2ForCausalLM` models from scratch on synthetic Countdown problems (plus the
# held-out addition and sorting families), so that ES and GRPO face the same situation: a capability that
# sampling finds (high Pass@16) but greedy decoding does not use (low greedy accuracy).
#
# The default base is trained with a *habit* (40% of its Countdown answers replaced by the numbers summed in
# prompt order): a plausible wrong answer that greedy decoding prefers. The clean model is shown beside it as
# a control. Targets for the default base: 0.10 <= Pass@1 <= 0.50 and Pass@16 >= 2 x Pass@1 on held-out prompts.
#
# **The check** (the paper's premise, "many more when sampled"), per model on held-out Countdown problems: Pass@16
# minus greedy accuracy exceeds a margin of 0.10, with a 95% t interval over problems (a base model has no
# training seed, so problems are the only source of uncertainty; the `smoke` preset uses its largest K instead).

# %% tags=["parameters"]
preset = "tiny"

# %%
import matplotlib.pyplot as plt
from IPython.display import Markdown, display

from esreason_lib.paper.plots import figure_legend, plot_pass_at_k, register_shades, save_figure, use_paper_style
from esreason_lib.paper.records import record_finding
from esreason_lib.paper.studies.base_models import compute, finding
from esreason_lib.paper.studies.presets import get_preset
from esreason_lib.paper.summary import status_rule, verdict_lead, verdict_table

use_paper_style()

config = get_preset(preset)
tables = compute(config)
curves = tables["curves"]
tables["summary"].round(3)

# %% [markdown]
# Pass@K on held-out Countdown problems (left) and on the held-out task families (right), from
# `n_samples` samples per problem at the evaluation temperature; bands are 95% bootstrap intervals over problems.

# %%
tasks = [config.task, *(held.label for held in config.heldout())]  # the held-out tasks by their labels
fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.8))
_ = register_shades(curves["model"].unique(), "base")  # bases are grey in every figure, one shade each
for ax, task in zip(axes, tasks):
    sub = curves[curves["task"] == task]
    plot_pass_at_k({m: g for m, g in sub.groupby("model", sort=False)}, ax=ax)
    ax.set_title(task)
fig.suptitle("The bases before any training: Pass@K per task (bands: 95% bootstrap intervals over problems)")
figure_legend(fig)
_ = save_figure(fig, "00_base_passk", preset=preset)

# %%
result = finding(tables)
record_finding("00_base_models", result, preset=preset)
print(result.status, "-", verdict_lead(result))
verdict_table(result)

# %%
display(Markdown(status_rule("00_base_models")))

# %% [markdown]
# **What this run shows.** The status, sentence and table above are computed from the tables: for every model,
# greedy accuracy and Pass@16 on held-out Countdown problems, and one check per model that Pass@16 exceeds greedy
# accuracy by more than 0.10 (effect, 95% CI over problems, minimum detectable effect, status). `reproduced` means
# the latent capability the paper starts from is present in every model; a model whose check is `not reproduced`
# samples little beyond what it decodes greedily, and the later notebooks' comparisons of how ES and GRPO use that
# capability would start from a different situation than the paper's. The sentence also says whether the default
# base sits in the target regime; when it says "NOT in", read the later notebooks with that in mind.

# %% [markdown]
# **The shipped zoo as measured when it was built** (recipe 3: exactly 3000 steps at one thread, so the weights are
# the same bit for bit on this machine kind; `zoo/README.md` holds the hashes; held-out Countdown:
# `get_task("countdown").examples("test", n=200, seed=0)`, greedy and n=16 samples at T=1):
#
# | name          | params | steps | greedy | pass@1 | pass@16 |
# |---------------|-------:|------:|-------:|-------:|--------:|
# | qwen2-s       |  130k  |  3000 |  0.280 |  0.228 |  0.835  |
# | qwen2-s-habit |  130k  |  3000 |  0.110 |  0.123 |  0.595  |
# | qwen2-m       |  998k  |  3000 |  0.395 |  0.345 |  0.895  |
# | qwen2-l       |  3.27M |  3000 |  0.390 |  0.339 |  0.860  |
#
# qwen2-s-habit saw the habit answer (the numbers summed in prompt order) for 40% of its Countdown examples: its
# greedy accuracy falls to 0.110 against the clean model's 0.280, while the correct skill remains reachable by
# sampling (Pass@16 0.595): the latent capability ES and GRPO are compared on. With the same data and steps, "m"
# is clearly more capable than "s" (+0.115 greedy, standard error ~0.035 on 200 problems) while "l" is level with
# "m" (-0.005): the size axis of notebook 06 is a capability axis from "s" to "m" only.
