"""What a generation draws and how its logits are computed: `Sampling` and `Forward`, passed whole from an
`EvalSpec` or a run's config to the decode loop; and `next_tokens`, a decode step's draw from its logits.

`Sampling.sampler` names how a sampled token is drawn from the (top-p cut) next-token distribution: "multinomial" is
`torch.multinomial` (one exponential draw per vocabulary entry of every running row, dealt out in running-row order,
so a row's draws depend on which rows still run); "inverse-cdf" draws one uniform u per row and position for the
whole chunk up front and takes the first token whose cumulative probability exceeds u x the total (one draw per
token instead of one per vocabulary entry, and a row's draws fixed by its place in the chunk alone). Both sample the
same distribution; their samples differ.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from esreason_lib.validation import check

FORWARDS = ("hf", "fused", "native")
"""How `generate` computes logits: the model's own modules, `models.fused_qwen2`'s forward (float32 Qwen2 or Llama),
or that forward with its attention in the C kernel of `models.native`."""
SAMPLERS = ("multinomial", "inverse-cdf")
"""How `generate` draws a sampled token (see the module docstring)."""


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclass(frozen=True)
class Sampling:
    """What each row of a generation draws: its distribution, its budget and the way tokens are drawn."""

    temperature: float = 1.0
    """Logits are divided by it before the softmax (ignored when `greedy`; must be > 0 when sampling)."""
    top_p: float = 1.0
    """Nucleus threshold in (0, 1]: sample from the smallest top set of tokens with mass >= top_p (1: all)."""
    greedy: bool = False
    """Take the argmax instead of sampling; logprobs and entropies are then those of the T = 1 distribution."""
    max_new_tokens: int = 32
    """The most tokens a row generates (its EOS included)."""
    sampler: str = "multinomial"
    """How sampled tokens are drawn, one of `SAMPLERS` (see the module docstring)."""

    def __post_init__(self):
        check(self, "greedy", isinstance(self.greedy, bool), "must be a bool")
        check(self, "temperature", self.greedy or self.temperature > 0, "must be > 0 when sampling")
        check(self, "top_p", 0.0 < self.top_p <= 1.0, "must be in (0, 1]")
        check(self, "max_new_tokens", _positive_int(self.max_new_tokens), "must be a positive int")
        check(self, "sampler", self.sampler in SAMPLERS, f"must be one of {SAMPLERS}")

    @property
    def scale(self) -> float:
        """The temperature the logits are divided by (1 when greedy)."""
        return 1.0 if self.greedy else float(self.temperature)


@dataclass(frozen=True)
class Forward:
    """How a generation computes its logits: the forward path, prefix sharing and the rows per forward batch."""

    kind: str = "hf"
    """One of `FORWARDS`: "hf" (the model's modules), "fused" (`models.fused_qwen2`, a float32 Qwen2 or Llama; equal
    to "hf" up to float rounding) or "native" (that forward with `models.native`'s attention kernel)."""
    share_prefixes: bool = False
    """Kinds "fused" and "native": forward each distinct running prefix once per step (a prompt's samples share
    their first tokens) and give its rows its logits: the same draws, equal to the unshared decode up to float
    rounding (other gemm shapes)."""
    batch_size: int = 512
    """Rows per forward batch (a generation is deterministic for a given seed and batch_size)."""
    use_cache: bool = True
    """Kind "hf" only: False recomputes the whole prefix every step (a reference for tests and benchmarks)."""

    def __post_init__(self):
        check(self, "kind", self.kind in FORWARDS, f"must be one of {FORWARDS}")
        check(self, "share_prefixes", isinstance(self.share_prefixes, bool) and (
            not self.share_prefixes or self.kind != "hf"),
            "must be a bool, False with kind 'hf' (the modules' KV cache rows are not selectable)")
        check(self, "batch_size", _positive_int(self.batch_size), "must be a positive int")
        check(self, "use_cache", isinstance(self.use_cache, bool) and (self.use_cache or self.kind == "hf"),
              "must be a bool, True with kinds 'fused' and 'native' (they decode with their own KV cache)")


DEFAULT_SAMPLING = Sampling()
"""Sampling at T = 1, top-p 1, 32 new tokens, by `torch.multinomial`."""
DEFAULT_FORWARD = Forward()
"""The model's own modules with their KV cache, 512 rows per batch."""


def inverse_cdf_tokens(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """[r] the token of each row of `weights` [r, V] (non-negative, unnormalised, a positive sum) for uniforms `u`
    [r] in [0, 1): the first whose cumulative weight exceeds u x the row's total (a zero-weight token never)."""
    cdf = weights.cumsum(-1)  # [r, V]
    tok = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(-1)  # [r]
    return tok.clamp_(max=weights.shape[-1] - 1)  # u x total rounding up to the total: the last token


def top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filtering of probs [b, V]: keep the smallest top set with mass >= top_p (at least one token)."""
    sorted_p, order = probs.sort(dim=-1, descending=True)  # [b, V]
    drop = (sorted_p.cumsum(-1) - sorted_p) >= top_p  # [b, V] mass before this token already reaches top_p
    drop[:, 0] = False
    sorted_p = sorted_p.masked_fill(drop, 0.0)
    return torch.zeros_like(probs).scatter_(-1, order, sorted_p)  # [b, V] unnormalised


def finite_rows(logits: torch.Tensor) -> torch.Tensor:
    """logits [..., V] with every row that holds a non-finite value set to 0 (a uniform distribution): what a
    diverged model (e.g. a wild ES member) samples from. Returns `logits` itself when all are finite (the common
    case: one sum, finite only if every value is, instead of a masked copy; a sum that overflows takes the per-row
    path, which finds every row finite)."""
    if bool(torch.isfinite(logits.sum())):
        return logits
    return torch.where(torch.isfinite(logits).all(-1, keepdim=True), logits, 0.0)


def next_tokens(last: torch.Tensor, sampling: Sampling, gen, uniforms) -> tuple:
    """(tokens [r], their log-probabilities [r], entropies [r]) of one decode step from the running rows' logits
    `last` [r, V]: the argmax (first of ties) when greedy, else a draw from the temperature-scaled, top-p cut
    distribution, by `gen` ("multinomial") or from `uniforms` [r] ("inverse-cdf"); the log-probabilities and
    entropies are those of the temperature-scaled distribution before the cut.

    Rows with a non-finite logit sample uniformly (`finite_rows`). Checking that costs no pass of its own: with
    every logit finite, every log-probability is finite and every entropy term p log p too, so the entropies are
    finite; a non-finite entropy (a non-finite logit, or one whose log-probability overflowed to -inf, where
    p log p is 0 x -inf) sends the step through `finite_rows` and zeroes the NaN terms (that case alone needs it)."""
    logits = last.float() if sampling.scale == 1.0 else last.float() / sampling.scale  # [r, V] (x / 1 is x)
    logp, probs, entropy = _distribution(logits, zero_nans=False)
    if not bool(torch.isfinite(entropy).all()):  # a host sync on [r] (finite_rows' own check was one on [r, V])
        logits = finite_rows(logits)
        logp, probs, entropy = _distribution(logits, zero_nans=True)
    if sampling.greedy:
        tok = logits.max(-1).indices  # argmax's tokens, at half its cost on CPU
    else:
        weights = top_p_filter(probs, sampling.top_p) if sampling.top_p < 1.0 else probs  # [r, V]
        tok = (torch.multinomial(weights, 1, generator=gen).squeeze(-1) if uniforms is None
               else inverse_cdf_tokens(weights, uniforms))  # [r]
    return tok, logp.gather(-1, tok[:, None]).squeeze(-1), entropy


def _distribution(logits: torch.Tensor, *, zero_nans: bool) -> tuple:
    """(log-probabilities [r, V], probabilities [r, V], entropies [r]) of `logits` [r, V]; with `zero_nans`, entropy
    terms p log p that are NaN (p = 0 at log p = -inf) count 0, else they are summed as they are."""
    logp = torch.log_softmax(logits, dim=-1)
    probs = logp.exp()
    terms = torch.mul(probs, logp)  # [r, V]
    return logp, probs, -(terms.nan_to_num_() if zero_nans else terms).sum(-1)
