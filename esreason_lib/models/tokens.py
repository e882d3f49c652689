"""Generation's token bookkeeping: special ids, encoding and padding prompts, position ids from masks, decoding rows
of ids, and stop strings (`StopRule`: which running rows an EOS or a stop string finishes)."""

from __future__ import annotations

import weakref

import torch
from transformers.tokenization_utils_tokenizers import TokenizersBackend


def special_ids(model, tokenizer) -> tuple[int, set[int]]:
    """(pad id, set of EOS ids): the tokenizer's EOS plus any in the model's generation config."""
    eos = set()
    if tokenizer.eos_token_id is not None:
        eos.add(int(tokenizer.eos_token_id))
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if gen_eos is not None:
        eos.update(int(e) for e in (gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]))
    if not eos:
        raise ValueError("tokenizer.eos_token_id is None: generation needs an EOS token")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos)
    return int(pad), eos


def encode_texts(tokenizer, texts: list[str], field: str) -> list[list[int]]:
    """Token ids of each text, without special tokens (chat templates already carry their own)."""
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise TypeError(f"{field} must be a list of str, got {type(texts).__name__}")
    return tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []


def left_pad(seqs: list[list[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ids [B, L] and mask [B, L]."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)  # [B, L]
    mask = torch.zeros((len(seqs), width), dtype=torch.bool)  # [B, L]
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
            mask[i, width - len(s):] = True
    return ids.to(device), mask.to(device)


def right_pad(seqs: list[list[int]], pad: int, device, width: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids [B, L] and mask [B, L], L = the longest sequence (at least `width`)."""
    width = max([width, *(len(s) for s in seqs)])
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)  # [B, L]
    mask = torch.zeros((len(seqs), width), dtype=torch.bool)  # [B, L]
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = True
    return ids.to(device), mask.to(device)


def mask_positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids [B, L] from an attention mask [B, L]: index among real tokens (pads clamp to 0)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def cut_at_stop(text: str, stop: str | None) -> str:
    """`text` up to and including the first occurrence of `stop` (the whole text when absent or stop is None)."""
    if stop:
        at = text.find(stop)
        if at >= 0:
            return text[: at + len(stop)]
    return text


def unique_rows(keys: torch.Tensor):
    """(distinct keys [U], index of one occurrence of each [U], inverse [B]) of keys [B]."""
    distinct, inverse = torch.unique(keys, return_inverse=True)  # [U], [B]
    first = torch.empty(len(distinct), dtype=torch.long, device=keys.device)
    first[inverse] = torch.arange(len(keys), device=keys.device)  # any occurrence will do
    return distinct, first, inverse


def decode_rows(tokenizer, ids: torch.Tensor) -> list[str]:
    """`tokenizer.batch_decode` of each row of ids [B, L] (special tokens skipped), decoding each distinct row
    once: rows often agree (ES members, a prompt's samples, short stop-check tails). A tokenizers-backed tokenizer
    without space clean-up is decoded by its Rust backend directly (batch_decode's per-token Python conversion
    dominated decoding)."""
    if not len(ids):
        return []
    base = int(ids.max()) + 1
    if base ** ids.shape[1] < 2**62:  # each row as one int64 number in base `base`: a 1-D unique is much faster
        keys = (ids * base ** torch.arange(ids.shape[1] - 1, -1, -1, device=ids.device)).sum(1)  # [B]
        _, first, inverse = unique_rows(keys)
        distinct = ids[first]  # [U, L]
    else:
        distinct, inverse = torch.unique(ids, dim=0, return_inverse=True)  # [U, L], [B]
    rows = distinct.tolist()
    if type(tokenizer)._decode is TokenizersBackend._decode and not tokenizer.clean_up_tokenization_spaces:
        texts = tokenizer.backend_tokenizer.decode_batch(rows, skip_special_tokens=True)  # what batch_decode does,
    else:  # without its per-token Python checks (`to_py_obj`)
        texts = tokenizer.batch_decode(rows, skip_special_tokens=True)
    return [texts[k] for k in inverse.tolist()]


_STOP_ENDS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
"""tokenizer -> {(stop, vocabulary size): `stop_end_tokens`' table}, built once per tokenizer and stop string."""


def stop_end_tokens(tokenizer, stop: str, vocab_size: int, device) -> torch.Tensor:
    """[V] bool: the tokens whose own text holds `stop`'s last character, the only tokens that can complete an
    occurrence of `stop` (the rows a decode step's stop check needs to decode); every token when that character is
    not printable ASCII (a byte-level token's text shows an ASCII character exactly when its bytes hold it), and
    every id the tokenizer does not know. Built once per (tokenizer, stop, V) (per call for a tokenizer that cannot
    be weakly referenced)."""
    try:
        tables = _STOP_ENDS.setdefault(tokenizer, {})
    except TypeError:  # a tokenizer that cannot be weakly referenced or hashed: built for this call only
        tables = {}
    table = tables.get((stop, vocab_size))
    if table is None:
        last = stop[-1]
        table = torch.ones(vocab_size, dtype=torch.bool)  # [V]
        known = min(vocab_size, len(tokenizer))
        if last.isascii() and last.isprintable() and not last.isspace() and known:
            texts = decode_rows(tokenizer, torch.arange(known)[:, None])
            table[:known] = torch.tensor([last in text for text in texts])
        tables[stop, vocab_size] = table
    return table.to(device)


class StopRule:
    """Which running rows a decode step finishes: an EOS token, or (with `stop`) a stop string completed by the
    step's token (checked on the last len(stop) tokens of the rows whose token holds the string's last character).
    """

    def __init__(self, tokenizer, stop: str | None, eos: set[int], vocab_size: int, device):
        self.tokenizer, self.stop = tokenizer, stop
        self.eos = torch.tensor(sorted(eos), device=device)  # [E]
        """The EOS ids."""
        self.window = len(stop) if stop else 0
        """Tokens a stop string spans at most (a stop string of k characters spans at most k tokens)."""
        self.ends = stop_end_tokens(tokenizer, stop, vocab_size, device) if stop else None
        """[V] the tokens that can complete `stop` (`stop_end_tokens`)."""

    def finished(self, done, tok, live, tokens, rows, t: int) -> torch.Tensor:
        """`done` [r] updated after step `t`: rows whose token `tok` [r] is an EOS, and running (`live` [r]) rows whose
        tokens so far (`tokens` [b, T] at chunk rows `rows` [r]) end in the stop string."""
        done = done | torch.isin(tok, self.eos)
        if self.window:  # every row was live at some point of this step (all-done breaks the loop)
            lo = max(0, t + 1 - self.window)
            # [c] running rows that may have hit the stop: an occurrence first completes at a token holding its
            # last character (one that completed earlier was found at that step)
            check = torch.nonzero(live & ~done & self.ends[tok]).squeeze(-1)
            if len(check):
                tails = decode_rows(self.tokenizer, tokens[rows[check], lo: t + 1])
                hit = torch.tensor([self.stop in s for s in tails], dtype=torch.bool, device=done.device)  # [c]
                done[check] = done[check] | hit
        return done
