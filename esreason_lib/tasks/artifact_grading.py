"""Grading as published: the paper artifact's GSM8K rules and TinyZero's Countdown reward, as task protocols.

`GSM8K(protocol="artifact")` grades like the artifact (yunpengba7/understanding-es, `es_reproduction.rewards`):
  - training reward (`gsm8k_tier`): the content of the last `\\boxed{...}` (nested braces; only `\\boxed`, then
    whitespace, then "{"), compared with the gold after the MATH-style string normalisation `normalize_latex`
    (drops `\\$`, `\\%`, `\\left`, `\\right`, `^\\circ`, a trailing `\\text{ unit}`, spaces; rewrites `a/b`,
    `\\frac12`, `\\sqrt2`, `0.5`, `x=...`): equal is correct; a box that closes, even empty, is formatted;
  - evaluation (`gsm8k_correct`): math-verify first (`_artifact_math_verify`, in the math_verify worker
    process); when it extracts nothing, a regex fallback (`regex_prediction`: the last `#### N`, else the last
    box, else the last "answer is N" / "result = N") compared after `numeric_form`.
  - the gold (`artifact_gold`) is the number after the first `####` of the reference solution, commas removed.
`Countdown(protocol="tinyzero")` scores like TinyZero's `compute_score` (`countdown_tier`): the last
`<answer>...</answer>` on the completion's last line; its `\\d+` runs must be the given numbers (as a multiset),
then it is evaluated as Python arithmetic (digits, + - * / ( ) . and whitespace; `**`, `//` and unary signs
included) and is correct within 1e-5 of the target. An answer that exists is formatted, none is invalid.

The default protocol ("strict", in `gsm8k` and `countdown`) differs (tiers 1 / 0.1 / 0 by default):

| completion (gold 18, or numbers 80 81 71 and target 72)  | strict   | artifact / tinyzero |
|----------------------------------------------------------|----------|---------------------|
| `\\boxed{18.0}`, `\\boxed{$18}`, `\\boxed{18%}`          | 1        | 0.1                 |
| `\\boxed{1,080}` (gold 1080)                             | 1        | 0.1                 |
| `\\fbox{18}`                                             | 1        | 0                   |
| `\\boxed{}`                                              | 0        | 0.1                 |
| `\\boxed{\\frac{36}{2}}` (gold 18)                       | 0.1      | 0.1                 |
| `<answer>-80 + 81 + 71</answer>` (unary minus)           | 0        | 1                   |
| `81+71-80` (no tags; the tiny models' format)            | 1        | 0                   |
| `<answer>(81+71-80)**1</answer>` (`**`, `//`, decimals)  | 0        | Python's eval: 0.1  |
| `<answer>81+71-80</answer>` then another line            | 1        | 0                   |
Evaluation: strict extraction reads `####`, a box, then "the answer is" and compares numbers exactly; the
artifact lets math-verify decide first (`$18$`, `\\boxed{18.0}`, `\\frac{36}{2}` count; `\\fbox{18}` does not).

Deviations, all on purpose: a worker overrun (`WORKER_TIMEOUT_S`) counts as "math-verify extracted nothing", as
the artifact's own parse timeout does; a Countdown power whose result would exceed `MAX_POWER_BITS` bits (Python
would compute it for hours) makes the answer formatted, not correct. Nothing here raises on model output.
"""

from __future__ import annotations

import ast
import math
import operator
import os
import re
import warnings
from typing import Any

from ._math_worker import MathWorker, WorkerUnavailable

__all__ = ["artifact_gold", "boxed_content", "countdown_tier", "gsm8k_correct", "gsm8k_tier", "normalize_latex",
           "numeric_form", "regex_prediction", "tinyzero_equation"]

WORKER_TIMEOUT_S = 15.0
"""Hard limit on one math-verify evaluation (the artifact's own limits: 5 s to parse plus 5 s to verify)."""
MAX_POWER_BITS = 100_000
"""Largest integer power a Countdown answer may compute (an estimate of the result's bits)."""

_WORKER = MathWorker()
"""The artifact evaluation's math_verify worker (started on first use)."""
_VERIFY_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_artifact_math_verify.py")
_GOLD = re.compile(r"####\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)")
_NUMBER = r"(-?[\d,]+\.?\d*)"
_HASH_ANSWER = re.compile(r"####\s*" + _NUMBER)
_SAID_ANSWER = re.compile(r"(?:answer|result)\s+(?:is|=)\s*" + _NUMBER, re.IGNORECASE)
_BRACE = re.compile(r"[{}]")
_DROPPED = ("\\left", "\\right", "^{\\circ}", "^\\circ", "\\$", "\\%")
"""Removed by `normalize_latex`, in this order."""


# ------------------------------------------------------------------------------------------------- GSM8K
def boxed_content(text: str) -> str | None:
    """The stripped content of the last `\\boxed` when whitespace and a "{" follow it and its braces close
    ("" for an empty box); None otherwise (an earlier box does not count). Linear time."""
    i = text.rfind("\\boxed")
    if i < 0:
        return None
    start = i + len("\\boxed")
    while start < len(text) and text[start].isspace():
        start += 1
    if not text.startswith("{", start):
        return None
    depth = 0
    for brace in _BRACE.finditer(text, start):
        depth += 1 if brace.group() == "{" else -1
        if depth == 0:
            return text[start + 1 : brace.start()].strip()
    return None


def _braced_first(piece: str, command: str, arguments: int) -> str | None:
    """`piece` (the text after `command`) with its first `arguments` single characters braced ("12" ->
    "{1}{2}"); an argument that already opens a brace is kept as it is. None when `piece` is too short."""
    if not piece or piece[0] == "{":
        return command + piece
    if arguments == 1:
        return command + "{" + piece[0] + "}" + piece[1:]
    if len(piece) < 2:
        return None
    second = piece[1] if piece[1] == "{" else "{" + piece[1] + "}"
    return command + "{" + piece[0] + "}" + second + piece[2:]


def normalize_latex(value: str) -> str:
    """The artifact's answer normalisation (MATH-style string rewriting, see the module docstring): e.g.
    "\\$18" -> "18", "\\dfrac12" -> "\\frac{1}{2}", "x = 3/4" -> "\\frac{3}{4}", "18.0" stays "18.0"."""
    s = value.replace("\n", "").replace("\\!", "").replace("\\\\", "\\").replace("tfrac", "frac")
    s = s.replace("dfrac", "frac")
    for dropped in _DROPPED:
        s = s.replace(dropped, "")
    unit = s.split("\\text{ ")
    s = unit[0] if len(unit) == 2 else s
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    s = "0" + s if s[0] == "." else s
    sides = s.split("=")
    s = sides[1] if len(sides) == 2 and len(sides[0]) <= 2 else s
    roots = s.split("\\sqrt")
    s = roots[0] + "".join(_braced_first(piece, "\\sqrt", 1) for piece in roots[1:])
    s = s.replace(" ", "")
    fractions = s.split("\\frac")
    braced = [_braced_first(piece, "\\frac", 2) for piece in fractions[1:]]
    s = s if None in braced else fractions[0] + "".join(braced)
    if s == "0.5":
        return "\\frac{1}{2}"
    halves = s.split("/")
    if len(halves) == 2 and all(h.lstrip("-").isdigit() for h in halves):
        return "\\frac{%s}{%s}" % tuple(halves)
    return s


def artifact_gold(example: dict[str, Any]) -> str:
    """The artifact's gold: the first `#### N` of `example["solution"]` with commas removed; `example["answer"]`
    when there is no solution or no such line."""
    found = _GOLD.search(str(example.get("solution", "")))
    return found.group(1).replace(",", "") if found else str(example["answer"])


def gsm8k_tier(completion: str, gold: str) -> str:
    """The artifact's training reward tier: "correct", "formatted" or "invalid" (module docstring)."""
    boxed = boxed_content(completion)
    if boxed is None:
        return "invalid"
    return "correct" if normalize_latex(boxed) == normalize_latex(gold) else "formatted"


def regex_prediction(completion: str) -> str | None:
    """The artifact evaluation's fallback answer, commas removed and trailing dots stripped: the number after
    the last `####`, else the last box's content (even not a number), else the number after the last
    "answer is" / "result =" (any case); None when there is none."""
    found = None
    for found in _HASH_ANSWER.finditer(completion):  # noqa: B007 (keeps the last match)
        pass
    if found is None:
        boxed = boxed_content(completion)
        if boxed is not None:
            return boxed.replace(",", "").rstrip(".")
        for found in _SAID_ANSWER.finditer(completion):  # noqa: B007 (keeps the last match)
            pass
    return None if found is None else found.group(1).replace(",", "").rstrip(".")


def numeric_form(value: str) -> str:
    """A fallback answer as the artifact compares it: `normalize_latex` of it (commas removed), as an integer
    string when it is a whole float ("18.0" -> "18"), the float's repr when it is another finite float, the
    lower-cased text otherwise."""
    text = normalize_latex(value.strip().replace(",", ""))
    try:
        number = float(text)
    except (ValueError, OverflowError):
        return text.lower()
    if not math.isfinite(number):
        return text.lower()
    return str(int(number)) if number == int(number) else str(number)


def gsm8k_correct(completion: str, gold: str, timeout_s: float | None = None) -> bool:
    """The artifact's evaluation verdict: math-verify's when it extracts an answer (within `timeout_s`, None =
    `WORKER_TIMEOUT_S`), else the regex fallback's. Never raises."""
    try:
        limit = WORKER_TIMEOUT_S if timeout_s is None else timeout_s
        verdict = _WORKER.call(_VERIFY_FILE, "verdict", [completion, gold], limit)
    except (TimeoutError, WorkerUnavailable):
        verdict = None
    if verdict is not None:
        return bool(verdict)
    prediction = regex_prediction(completion)
    return prediction is not None and numeric_form(prediction) == numeric_form(gold)


# --------------------------------------------------------------------------------------------- Countdown
_EQUATION_CHARS = re.compile(r"[\d+\-*/().\s]+")
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow}
_SIGNS = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def tinyzero_equation(completion: str) -> str | None:
    """The stripped content of the last `<answer>...</answer>` on the completion's last line ("" for an empty
    tag pair), or None; tags pair up left to right, as a lazy regex pairs them. Linear time. The completion is
    what follows the prompt's "Assistant:" in TinyZero's input."""
    line, found, at = completion.split("\n")[-1], None, 0
    while (start := line.find("<answer>", at)) >= 0 and (end := line.find("</answer>", start + 8)) >= 0:
        found, at = line[start + 8 : end], end + 9
    return None if found is None else found.strip()


def _value(node: ast.AST):
    """The value Python's `eval` gives the arithmetic syntax tree `node`; raises on anything else or on a power
    beyond `MAX_POWER_BITS`. Chains of unary signs are unrolled (eval accepts about a thousand)."""
    signs = []
    while isinstance(node, ast.UnaryOp) and type(node.op) in _SIGNS:
        signs.append(_SIGNS[type(node.op)])
        node = node.operand
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        value = node.value
    elif isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _value(node.left), _value(node.right)
        if (isinstance(node.op, ast.Pow) and type(left) is int and type(right) is int and right > 0
                and abs(left) > 1 and right * math.log2(abs(left)) > MAX_POWER_BITS):
            raise OverflowError("power too large")
        value = _OPERATORS[type(node.op)](left, right)
    else:
        raise ValueError(f"not arithmetic: {type(node).__name__}")
    for sign in reversed(signs):
        value = sign(value)
    return value


def countdown_tier(completion: str, numbers: list[int], target: int) -> str:
    """TinyZero's Countdown reward tier: "correct", "formatted" or "invalid" (module docstring)."""
    equation = tinyzero_equation(completion)
    if equation is None:
        return "invalid"
    try:
        if sorted(int(n) for n in re.findall(r"\d+", equation)) != sorted(numbers):
            return "formatted"
        if not _EQUATION_CHARS.fullmatch(equation):
            return "formatted"
        with warnings.catch_warnings():  # "(3)(4)" warns that an int is not callable
            warnings.simplefilter("ignore")
            tree = ast.parse(equation, mode="eval")
        value = _value(tree.body)
        return "correct" if abs(value - target) < 1e-5 else "formatted"
    except Exception:
        return "formatted"
