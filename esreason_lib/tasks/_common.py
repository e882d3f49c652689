"""Small helpers shared by the task modules: splits, answer spans, prompts, sampling and data loading."""

from __future__ import annotations

import abc
import copy
import json
import logging
import os
import re
from pathlib import Path
from typing import Any, Callable, Hashable

import numpy as np

from ..seeding import derive_seed, numpy_rng
from .base import Example, RewardShaping, Task

SPLITS = ("train", "test")
"""The split names every task accepts."""

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
_ANSWER_MARKER = re.compile(r"\b(?i:answer)(?:\s*:|\s+is\b)")
"""An answer marker; one backtracking pass over the whitespace after each "answer": linear overall."""
_MARKER_LEAD = re.compile(r"[\s*:]*+")
"""Skipped after a marker (possessive: no backtracking)."""
_TEX_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\{([^{}]*)\}")


def check_split(split: str) -> str:
    """`split` itself when it is "train" or "test"; a ValueError naming it otherwise."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return split


def split_of(task: str, key: str, test_fraction: float) -> str:
    """The split ("train"/"test") a problem belongs to: a fixed hash of `task` and the problem `key`.

    The assignment ignores the run seed, so no test problem is ever drawn for training, under any seed.
    """
    return "test" if derive_seed(0, "split", task, key) / 2.0**63 < test_fraction else "train"


def check_fraction(test_fraction: float) -> float:
    """`test_fraction` when 0 < f < 1; a ValueError naming it otherwise."""
    if not 0.0 < float(test_fraction) < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    return float(test_fraction)


def answer_span(completion: Any) -> str:
    """The text a verifier reads, stripped: the content of the last `<answer>` (up to `</answer>` or the end,
    since generation may stop on the closing tag), else the first line. "" for a non-string. Never raises."""
    if not isinstance(completion, str):
        return ""
    i = completion.rfind(ANSWER_OPEN)
    if i >= 0:
        rest = completion[i + len(ANSWER_OPEN) :]
        j = rest.find(ANSWER_CLOSE)
        return (rest if j < 0 else rest[:j]).strip()
    return completion.split("\n", 1)[0].strip()


def after_answer_marker(text: str) -> int | None:
    """The index in `text` right after its last "answer is" / "answer:" (the word case-insensitive) and the
    spaces, "*" and ":" that follow it; None when there is no such marker. Linear time."""
    marker = None
    for marker in _ANSWER_MARKER.finditer(text):  # noqa: B007 (keeps the last match)
        pass
    return None if marker is None else _MARKER_LEAD.match(text, marker.end()).end()


def unwrap_tex_text(text: str) -> str:
    """`text` stripped, with `\\text{...}`, `\\textbf{...}`, `\\mathrm{...}`, `\\mathbf{...}` replaced by their
    content."""
    return _TEX_TEXT.sub(r"\1", text).strip()


def has_chat_template(tokenizer: Any) -> bool:
    """Whether `tokenizer` carries a chat template (so the prompt should go through it)."""
    return tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))


def render_prompt(plain: str, instruction: str, tokenizer: Any, system: str | None = None) -> str:
    """`plain` for tokenizers without a chat template; else a one-turn user chat with `instruction`, after a
    system turn holding `system` when one is given (which replaces a template's default system prompt, e.g.
    Qwen2.5's "You are Qwen, created by Alibaba Cloud...")."""
    if not has_chat_template(tokenizer):
        return plain
    messages = [] if system is None else [{"role": "system", "content": system}]
    messages.append({"role": "user", "content": instruction})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def sample_distinct(
    task: str,
    split: str,
    n: int,
    seed: int,
    draw: Callable[[np.random.Generator, str], tuple[Hashable, dict] | None],
    max_misses: int = 20000,
) -> list[dict]:
    """`n` examples with distinct problem keys from `draw(rng, split)` (which returns (key, example) or None).

    The stream is `numpy_rng(seed, task, split)`, so the list is a deterministic function of the arguments and
    a prefix of the list for a larger `n`. Raises ValueError when the split runs out of distinct problems.
    `task` must name the problem distribution completely (it seeds the stream), because results are memoised
    by (task, split, n, seed): every training run draws the same few thousand problems, which took seconds.
    Callers get fresh copies, so mutating an example never changes the cache.
    """
    check_split(split)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be a non-negative int or None, got {n!r}")
    key = (task, split, int(n), seed)
    if key not in _DISTINCT_CACHE:
        _DISTINCT_CACHE[key] = _draw_distinct(task, split, n, seed, draw, max_misses)
        while len(_DISTINCT_CACHE) > _DISTINCT_CACHE_SIZE:
            _DISTINCT_CACHE.pop(next(iter(_DISTINCT_CACHE)))
    return copy.deepcopy(_DISTINCT_CACHE[key])


_DISTINCT_CACHE: dict[tuple, list[dict]] = {}
_DISTINCT_CACHE_SIZE = 32


def _draw_distinct(task, split, n, seed, draw, max_misses) -> list[dict]:
    rng = numpy_rng(seed, task, split)
    seen: set[Hashable] = set()
    out: list[dict] = []
    misses = 0
    while len(out) < n:
        got = draw(rng, split)
        if got is None or got[0] in seen:
            misses += 1
            if misses > max_misses:
                raise ValueError(
                    f"{task}: asked for n={n} distinct {split!r} problems but found only {len(out)}; "
                    "lower n, widen the task's ranges or change test_fraction"
                )
            continue
        misses = 0
        seen.add(got[0])
        out.append(got[1])
    return out


def data_root() -> Path | None:
    """Where local datasets live: $ESREASON_DATA, else `<repo>/../shared/data` when it exists, else None."""
    env = os.environ.get("ESREASON_DATA")
    if env:
        return Path(env).expanduser()
    default = Path(__file__).resolve().parents[3] / "shared" / "data"
    return default if default.is_dir() else None


def read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """(1-based line number, object) for every non-blank line of a .jsonl file; a UTF-8 BOM is accepted.
    A line that is not UTF-8, not JSON or not a JSON object is a ValueError naming the file and the line."""
    out = []
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(f"{path}, line {number}: not valid UTF-8 (byte {err.start + 1} of the line)") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}, line {number}: not valid JSON ({err.msg}, column {err.colno})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}, line {number}: expected a JSON object, got {type(row).__name__}")
            out.append((number, row))
    return out


def local_file(path: str | os.PathLike | None, subdir: str, split: str) -> Path | None:
    """The local jsonl for `split`: `path` itself if it is a file (it then serves every split),
    `path/<split>.jsonl` if `path` is a folder, else `<data_root>/<subdir>/<split>.jsonl` when present.
    An explicit `path` that does not exist is a FileNotFoundError."""
    if path is not None:
        p = Path(path).expanduser()
        if p.is_file():
            return p
        if p.is_dir():
            f = p / f"{split}.jsonl"
            if f.is_file():
                return f
            raise FileNotFoundError(f"path={str(p)!r} is a folder without {split}.jsonl")
        raise FileNotFoundError(f"path={str(p)!r} does not exist")
    root = data_root()
    if root is not None and (root / subdir / f"{split}.jsonl").is_file():
        return root / subdir / f"{split}.jsonl"
    return None


def hub_rows(repo_id: str, config: str | None, split: str) -> list[dict]:
    """Rows of a Hugging Face dataset split via `datasets`; a ValueError of one line when they cannot be had
    (offline, unknown dataset or split, `datasets` not installed)."""
    hint = "pass path= or set ESREASON_DATA to a folder holding a local copy"
    try:
        import datasets  # noqa: PLC0415 (heavy: imported only when no local file is found)
    except ImportError:
        raise ValueError(f"no local copy of {repo_id!r} (split {split!r}) and the package `datasets` is not "
                         f"installed: `pip install 'datasets>=3.0'`, or {hint}") from None
    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)  # offline, the hub logs a warning per retry before failing
    try:
        ds = datasets.load_dataset(repo_id, config, split=split)
    except Exception as err:  # noqa: BLE001 (network, hub and cache errors all have one remedy)
        reason = (str(err).strip().splitlines() or [""])[0][:200]
        raise ValueError(f"could not load {repo_id!r} (split {split!r}) through `datasets` "
                         f"({type(err).__name__}: {reason}); {hint}") from None
    finally:
        hub_log.setLevel(level)
    return [dict(row) for row in ds]


def dataset_rows(
    path: str | os.PathLike | None,
    subdir: str,
    split: str,
    repo_id: str,
    config: str | None,
    fields: dict[str, tuple[type, ...]],
    hub_split: str | None = None,
) -> list[tuple[str, dict]]:
    """(where, row) for every row of `split`: from the local jsonl (see `local_file`) when there is one, else
    from the hub's split `hub_split` (default `split`; e.g. "validation" where the hub's test split has no
    answers) through `hub_rows`. `where` names the source for messages ("<file>, line 3" or "<repo_id> split
    'test', row 3", 1-based). Every row must hold each of `fields` as one of its types (never null or a bool):
    a ValueError naming the source, the line and the field otherwise."""
    f = local_file(path, subdir, split)
    if f is not None:
        located = [(f"{f}, line {number}", row) for number, row in read_jsonl(f)]
    else:
        hub_split = split if hub_split is None else hub_split
        located = [(f"{repo_id} split {hub_split!r}, row {i}", row)
                   for i, row in enumerate(hub_rows(repo_id, config, hub_split), 1)]
    for where, row in located:
        for name, types in fields.items():
            value = row.get(name)
            if value is None:
                raise ValueError(f"{where}: field {name!r} is {'null' if name in row else 'missing'}")
            if isinstance(value, bool) or not isinstance(value, types):
                allowed = " or ".join(t.__name__ for t in types)
                raise ValueError(f"{where}: field {name!r} must be {allowed}, got {type(value).__name__} {value!r:.80}")
    return located


def shuffled_prefix(rows: list[dict], n: int | None, seed: int, *names: object) -> list[dict]:
    """The first `n` of `rows` (all when None) in an order shuffled by `numpy_rng(seed, *names)`."""
    if n is not None and (isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0):
        raise ValueError(f"n must be a non-negative int or None, got {n!r}")
    order = numpy_rng(seed, *names).permutation(len(rows))
    return [rows[i] for i in order[: len(rows) if n is None else int(n)]]


class FileTask(Task):
    """A task whose examples are the rows of a data file (`path`, see `local_file`) or of the hub: a subclass
    implements `_read(split)`; each split is read once, and `examples` shuffles it by `seed` (ids do not depend on
    the seed)."""

    def __init__(self, path: str | None = None, *, shaping: RewardShaping = RewardShaping()):
        super().__init__(shaping)
        self.path = path
        self._rows: dict[str, list[Example]] = {}

    @abc.abstractmethod
    def _read(self, split: str) -> list[Example]:
        """The validated examples of `split` ("train" or "test") in file order."""

    def examples(self, split: str = "test", n: int | None = None, seed: int = 0) -> list[Example]:
        """The first `n` (all when None) of `split`'s examples in a `seed`-shuffled order (`shuffled_prefix`)."""
        if check_split(split) not in self._rows:
            self._rows[split] = self._read(split)
        return shuffled_prefix(self._rows[split], n, seed, self.name, split)
