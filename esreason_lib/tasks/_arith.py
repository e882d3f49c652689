"""Exact arithmetic for Countdown: a tiny parser (never `eval`), canonical forms, and a solver.

Grammar (whitespace ignored): `expr := term (("+"|"-") term)*`, `term := factor (("*"|"/") factor)*`,
`factor := NUMBER | "(" expr ")"`, NUMBER a run of digits without a leading zero (so "03" is rejected).
There is no unary minus and no `**`; inputs over `MAX_CHARS` characters or `MAX_DEPTH` nested parentheses
are rejected. Values are `fractions.Fraction`, so `6/4*2 == 3` exactly.

Canonical form: `+`/`-` chains flatten into a *sum* of positive and negative terms and `*`/`/` chains into a
*product* of numerator and denominator factors, each side a sorted multiset. So "3+12+7", "7+(12+3)" and
"12-(0-3)+7"-like rearrangements of the same signed terms share one form, as do "a/(b/c)" and "a*c/b".
A form is a nested tuple: `(0, n)` a number, `(1, pos, neg)` a sum, `(2, num, den)` a product.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from itertools import combinations

MAX_CHARS = 200
"""Longest expression text the parser accepts."""
MAX_DEPTH = 32
"""Deepest parenthesis nesting the parser accepts."""
ALLOWED_CHARS = frozenset("0123456789+-*/() ")
"""Characters an expression may contain."""

Form = tuple  # canonical form, see the module docstring


class _ParseError(Exception):
    pass


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == " ":
            i += 1
        elif c.isdigit() and c in ALLOWED_CHARS:
            j = i
            while j < n and text[j] in "0123456789":
                j += 1
            if text[i] == "0" and j - i > 1:
                raise _ParseError("leading zero")
            out.append(text[i:j])
            i = j
        elif c in "+-*/()":
            out.append(c)
            i += 1
        else:
            raise _ParseError(f"bad character {c!r}")
    return out


class _Parser:
    def __init__(self, tokens: list[str]):
        self.toks, self.i = tokens, 0

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> str:
        tok = self.peek()
        if tok is None:
            raise _ParseError("unexpected end")
        self.i += 1
        return tok

    def expr(self, depth: int):
        node = self.term(depth)
        while self.peek() in ("+", "-"):
            op = self.take()
            node = (op, node, self.term(depth))
        return node

    def term(self, depth: int):
        node = self.factor(depth)
        while self.peek() in ("*", "/"):
            op = self.take()
            node = (op, node, self.factor(depth))
        return node

    def factor(self, depth: int):
        tok = self.take()
        if tok.isdigit():
            return int(tok)
        if tok == "(":
            if depth >= MAX_DEPTH:
                raise _ParseError("too deep")
            node = self.expr(depth + 1)
            if self.take() != ")":
                raise _ParseError("unbalanced")
            return node
        raise _ParseError(f"unexpected {tok!r}")


def parse_expression(text: object):
    """The syntax tree of `text` (an int, or `(op, left, right)`), or None when it is not a valid expression."""
    if not isinstance(text, str) or len(text) > MAX_CHARS or not text.strip():
        return None
    try:
        parser = _Parser(_tokens(text))
        node = parser.expr(0)
        return node if parser.peek() is None else None
    except (_ParseError, RecursionError, ValueError):
        return None


def _evaluate(node) -> Fraction:
    if isinstance(node, int):
        return Fraction(node)
    op, left, right = node
    a, b = _evaluate(left), _evaluate(right)
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    return a / b  # ZeroDivisionError handled by callers


def evaluate_tree(node) -> Fraction | None:
    """The exact value of a syntax tree, or None on division by zero."""
    try:
        return _evaluate(node)
    except ZeroDivisionError:
        return None


def evaluate_expression(text: object) -> Fraction | None:
    """The exact value of an arithmetic expression, or None if it does not parse or divides by zero."""
    node = parse_expression(text)
    return None if node is None else evaluate_tree(node)


def leaves(node) -> list[int]:
    """The numbers of a syntax tree, left to right."""
    if isinstance(node, int):
        return [node]
    return leaves(node[1]) + leaves(node[2])


def _sides(form: Form, kind: int) -> tuple[tuple, tuple]:
    return (form[1], form[2]) if form[0] == kind else ((form,), ())


def combine(op: str, a: Form, b: Form) -> Form:
    """The canonical form of `a op b` from the canonical forms of `a` and `b`."""
    kind = 1 if op in "+-" else 2
    pa, na = _sides(a, kind)
    pb, nb = _sides(b, kind)
    if op in "+*":
        return (kind, tuple(sorted(pa + pb)), tuple(sorted(na + nb)))
    return (kind, tuple(sorted(pa + nb)), tuple(sorted(na + pb)))


def canonical_form(node) -> Form:
    """The canonical form of a syntax tree."""
    if isinstance(node, int):
        return (0, node)
    return combine(node[0], canonical_form(node[1]), canonical_form(node[2]))


def render(form: Form) -> str:
    """A readable expression for a canonical form (sorted terms, minimal parentheses); parses back to `form`."""
    kind = form[0]
    if kind == 0:
        return str(form[1])
    if kind == 1:  # children are numbers or products: never need parentheses
        return "+".join(map(render, form[1])) + "".join("-" + render(x) for x in form[2])

    def wrap(x: Form) -> str:  # sums inside a product need parentheses
        return f"({render(x)})" if x[0] == 1 else render(x)

    return "*".join(map(wrap, form[1])) + "".join("/" + wrap(x) for x in form[2])


def _splits(nums: tuple[int, ...]):
    """Distinct unordered splits of the sorted multiset `nums` into two non-empty sorted parts."""
    seen = set()
    rest_idx = range(1, len(nums))
    for r in range(0, len(nums) - 1):  # part A always holds index 0, so each split appears once
        for extra in combinations(rest_idx, r):
            idx = (0, *extra)
            a = tuple(nums[i] for i in idx)
            b = tuple(nums[i] for i in range(len(nums)) if i not in idx)
            if (a, b) not in seen and (b, a) not in seen:
                seen.add((a, b))
                yield a, b


@lru_cache(maxsize=4096)
def reachable_values(nums: tuple[int, ...]) -> frozenset[Fraction]:
    """Every exact value of an expression using each number of the sorted tuple `nums` exactly once."""
    if len(nums) == 1:
        return frozenset({Fraction(nums[0])})
    out: set[Fraction] = set()
    for a_nums, b_nums in _splits(nums):
        vb_all = reachable_values(b_nums)
        for va in reachable_values(a_nums):
            for vb in vb_all:
                out.update((va + vb, va - vb, vb - va, va * vb))
                if vb:
                    out.add(va / vb)
                if va:
                    out.add(vb / va)
    return frozenset(out)


@lru_cache(maxsize=4096)
def _forms(nums: tuple[int, ...]) -> dict[Form, Fraction]:
    """Every canonical form (with its value) over the sorted multiset `nums`, each number used once."""
    if len(nums) == 1:
        return {(0, nums[0]): Fraction(nums[0])}
    out: dict[Form, Fraction] = {}
    for a_nums, b_nums in _splits(nums):
        fb_all = _forms(b_nums).items()
        for fa, va in _forms(a_nums).items():
            for fb, vb in fb_all:
                out[combine("+", fa, fb)] = va + vb
                out[combine("-", fa, fb)] = va - vb
                out[combine("-", fb, fa)] = vb - va
                out[combine("*", fa, fb)] = va * vb
                if vb:
                    out[combine("/", fa, fb)] = va / vb
                if va:
                    out[combine("/", fb, fa)] = vb / va
    return out


@lru_cache(maxsize=65536)
def _solve(nums: tuple[int, ...], target: Fraction) -> tuple[str, ...]:
    if len(nums) == 1 or target == 0:
        found = {f for f, v in _forms(nums).items() if v == target}
        return tuple(sorted(map(render, found)))
    found: set[Form] = set()
    for a_nums, b_nums in _splits(nums):
        for x_nums, y_nums in ((a_nums, b_nums), (b_nums, a_nums)):  # x on the left of - and /
            by_value: dict[Fraction, list[Form]] = {}
            for fy, vy in _forms(y_nums).items():
                by_value.setdefault(vy, []).append(fy)
            for fx, vx in _forms(x_nums).items():
                wanted = [("+", target - vx), ("-", vx - target)]
                if vx:
                    wanted += [("*", target / vx), ("/", vx / target)]
                for op, vy in wanted:
                    for fy in by_value.get(vy, ()):
                        found.add(combine(op, fx, fy))
    return tuple(sorted(map(render, found)))


def solve(numbers, target) -> list[str]:
    """All distinct expressions (one readable string per canonical form, sorted) that use each of `numbers`
    exactly once with + - * / and parentheses and evaluate exactly to `target`."""
    nums = tuple(sorted(int(x) for x in numbers))
    if not nums:
        return []
    return list(_solve(nums, Fraction(target)))
