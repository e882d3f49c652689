"""MBPP (Austin et al. 2021): short Python programming problems checked by their test asserts, a held-out task of
the paper's forgetting study.

Data: a jsonl with the dataset's columns `text` (the problem), `code` (a reference solution) and `test_list` (assert
lines), strings, plus the optional `task_id` and `test_setup_code`, read from `path`, else
`$ESREASON_DATA/mbpp/<split>.jsonl` or `<repo>/../shared/data/mbpp/<split>.jsonl` when present, else
`datasets.load_dataset("google-research-datasets/mbpp", "full")` (splits "train": 374, "test": 500). A bad row
(a missing field, an assert line that is not Python) is a ValueError naming the file, the line and the field.

Prompt: the original MBPP prompt (the problem and its three asserts); the plain form ends by opening a ```python
fence, the chat form asks for the function in a ```python block.
Extraction (`extract_code`; the text after the last `</think>` when there is one, its last 100,000 characters):
  1. the first block opened by ```python / ```py (any case), up to its closing fence or the end;
  2. else, when the text starts with a ``` fence, that block;
  3. else the raw text up to the first ``` (the plain prompt opened the fence).
Empty code is no answer. Well-formed (the 0.1 reward tier) = the code compiles (in-process `compile`, code up to
`MAX_CODE_CHARS`). Correct = every assert of `test_list` holds, decided by `_sandbox.run_tests`: the code and
`test_setup_code` run in a confined child (a `timeout_s` wall-clock limit, 1 GiB of memory, bounded output, no
network, no new processes, no writes outside its directory) which only evaluates the parts of the asserts that
call the code; this process judges the asserts on the plain values it returns, so printing, exiting early or a
lying `__eq__` cannot forge a pass. Timeouts, syntax errors and crashes score 0; nothing raises.
Before any process starts, code that never mentions a function the asserts call (a non-builtin name, found in the
asserts at load time: `entry_points`) is wrong: it cannot define it short of building the name at run time.
Verdicts are cached per (code, tests, setup, timeout_s), a timeout included.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import re
import threading
import warnings
from collections import OrderedDict
from typing import Any

from ._common import check_split, dataset_rows, render_prompt, shuffled_prefix
from ._sandbox import run_tests
from .base import Example, RewardShaping, Task, check_seconds, total

__all__ = ["MBPP", "entry_points", "extract_code"]

_MAX_CHARS = 100_000
MAX_CODE_CHARS = 20_000
"""Longer code is neither compiled nor run (wrong). MBPP's longest reference solution has about 1,000 characters."""
_OPEN_TAGGED = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\n", re.IGNORECASE)
_OPEN_BARE = re.compile(r"\s*```[ \t]*\n")
_CACHE_SIZE = 8192
_BUILTINS = frozenset(dir(builtins))


def extract_code(completion: Any) -> str | None:
    """The program in `completion` by the module's rules (stripped), or None when it is empty. Never raises."""
    if not isinstance(completion, str):
        return None
    end_of_thought = completion.rfind("</think>")
    text = completion[end_of_thought + len("</think>"):] if end_of_thought >= 0 else completion
    text = text[-_MAX_CHARS:]
    opened = _OPEN_TAGGED.search(text) or _OPEN_BARE.match(text)
    if opened is not None:
        text = text[opened.end():]
    code = text.split("```", 1)[0].strip("\n").rstrip()
    return code if code.strip() else None


def entry_points(tests: list[str]) -> tuple[str, ...]:
    """The non-builtin names the assert lines call (sorted): `assert f(x) == 1` -> ("f",). SyntaxError when a
    line is not Python."""
    names = set()
    for line in tests:
        for node in ast.walk(ast.parse(line)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in _BUILTINS:
                names.add(node.func.id)
    return tuple(sorted(names))


def compiles(code: str) -> bool:
    """Whether `code` (at most `MAX_CODE_CHARS`) compiles as a Python module. Never raises."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning ("is" with a literal, invalid escapes, ...)
            return len(code) <= MAX_CODE_CHARS and compile(code, "solution.py", "exec", dont_inherit=True) is not None
    except BaseException:  # noqa: BLE001 (SyntaxError, ValueError on NUL, RecursionError, MemoryError)
        return False


class MBPP(Task):
    """MBPP problems; ids are `mbpp-<task_id>` (else `mbpp-<split>-<row index>`). Examples are shuffled by `seed`."""

    name = "mbpp"
    stop = None
    max_new_tokens = 512

    def __init__(self, path: str | None = None, *, timeout_s: float = 5.0, shaping: RewardShaping = RewardShaping()):
        super().__init__(shaping)
        self.path, self.timeout_s = path, check_seconds(timeout_s, "timeout_s", 60)
        self._rows: dict[str, list[Example]] = {}
        self._verdicts: OrderedDict[bytes, bool] = OrderedDict()
        self._lock = threading.Lock()

    def _load(self, split: str) -> list[Example]:
        if check_split(split) not in self._rows:
            out = []
            rows = dataset_rows(self.path, self.name, split, "google-research-datasets/mbpp", "full",
                                {"text": (str,), "code": (str,), "test_list": (list,)})
            for i, (where, row) in enumerate(rows):
                tests, setup = row["test_list"], row.get("test_setup_code", "")
                bad = [j for j, t in enumerate(tests) if not isinstance(t, str)]
                if not tests or bad:
                    raise ValueError(f"{where}: field 'test_list' must be a non-empty list of strings, "
                                     f"got {tests!r:.120}")
                if not isinstance(setup, str):
                    raise ValueError(f"{where}: field 'test_setup_code' must be str, got {type(setup).__name__}")
                try:
                    names = entry_points(tests)
                except SyntaxError as err:
                    raise ValueError(f"{where}: field 'test_list' holds a line that is not Python "
                                     f"({err.msg})") from None
                task_id = row.get("task_id")
                ident = f"mbpp-{task_id}" if isinstance(task_id, int) and not isinstance(task_id, bool) else \
                    f"mbpp-{split}-{i}"
                out.append({"id": ident, "text": row["text"], "code": row["code"], "test_list": list(tests),
                            "test_setup_code": setup, "entry_points": list(names)})
            self._rows[split] = out
        return self._rows[split]

    def examples(self, split: str = "test", n: int | None = None, seed: int = 0) -> list[Example]:
        """Keys `id`, `text`, `code` (reference), `test_list`, `test_setup_code`, `entry_points`."""
        return shuffled_prefix(self._load(split), n, seed, self.name, split)

    def prompt(self, example: Example, tokenizer: Any = None) -> str:
        """MBPP's prompt: the problem and its asserts; plain text opens a ```python fence, chat asks for one."""
        task = (f"You are an expert Python programmer, and here is your task: {example['text'].strip()} "
                "Your code should pass these tests:\n\n" + "\n".join(example["test_list"]) + "\n")
        plain = task + "```python\n"
        instruction = task + "\nWrite the complete solution in a single ```python code block."
        return render_prompt(plain, instruction, tokenizer)

    @total(None)
    def extract_answer(self, completion: str) -> str | None:
        """The program by the module's extraction rules, or None."""
        return extract_code(completion)

    def is_well_formed(self, completion: str, example: Example) -> bool:
        """A program was extracted and compiles."""
        code = self.extract_answer(completion)
        return code is not None and compiles(code)

    @total(False)
    def is_correct(self, completion: str, example: Example) -> bool:
        """The program passes every assert of `test_list` in the sandbox within `timeout_s`. Never raises."""
        code = self.extract_answer(completion)
        tests, setup = [str(t) for t in example["test_list"]], str(example.get("test_setup_code", ""))
        names = example.get("entry_points")
        names = entry_points(tests) if names is None else names
        if code is None or not compiles(code) or not all(name in code for name in names):
            return False
        key = hashlib.sha256(repr((code, tests, setup, self.timeout_s)).encode("utf-8", "replace")).digest()
        with self._lock:
            if key in self._verdicts:
                self._verdicts.move_to_end(key)
                return self._verdicts[key]
        verdict = run_tests(code, tests, setup, timeout_s=self.timeout_s).passed
        with self._lock:
            self._verdicts[key] = verdict
            while len(self._verdicts) > _CACHE_SIZE:
                self._verdicts.popitem(last=False)
        return verdict
