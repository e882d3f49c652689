"""One rule for hedges, shared by every task that extracts a single answer (GSM8K, MATH, Countdown, CommonsenseQA,
GPQA): an answer that names several candidates ("18 or 19", "B, C", "\\boxed{5\\ \\text{(or 6)}}") is wrong, never
read as its first candidate; nor is an answer followed by a character no honest answer ends in (a control
character, a NUL, a lone surrogate, an invisible format character).

The rule is an allow-list, not a list of separators: after the final answer, up to the end of its line, the text
may close (punctuation, brackets, the format's closing marker such as `}`, `$` or `</answer>`), end, break the
line or go on in words, but it may hold no second *candidate answer* (`NUMBER`: a digit of any script or a number
word; a choice letter; `BOXED`: another boxed value) and no `untrusted` character, whatever stands between ("18
*or* 19", "18 oder 19", "18 but it could be 19", "B、C", "B unless C" are all hedges). The line is read after NFKC
normalisation, so full-width and other compatibility forms ("Ｃ", "１９", "①") are the candidates they stand for.
A line break ends the answer's line: "18\\n\\nQuestion: ... 19" is one answer. Linear time; never raises.

Inside a MATH box, where an answer is an expression with many numbers, `boxed_hedge` applies the rule to what
LaTeX adds: text in `\\text{}`-like groups may be words (units, names) but no number, nor be followed by more of
the expression ("5 \\text{ or } 6"); and no word stands outside such groups and LaTeX commands ("5 oder 6", "5 or
6"). No MATH-500 gold answer has either (tests/test_tasks_hedge.py).
"""

from __future__ import annotations

import re
import unicodedata

LINE_BREAK = r"[\n\r\u2028\u2029]"
"""Line breaks: the end of the answer's line (the other whitespace characters, vertical tab, form feed,
\\x1c-\\x1f, \\x85, are control characters: `UNTRUSTED`)."""
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty",
                "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety", "hundred", "thousand", "million",
                "billion")
"""Number words that are candidate answers like digits ("18 or nineteen")."""
NUMBER = re.compile(r"\d|(?i:\b(?:" + "|".join(NUMBER_WORDS) + r")\b)")
"""A candidate number: a decimal digit of any script, or a number word (whole word, any case)."""
BOXED = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
"""Another boxed value: a candidate answer in every task."""
TEXT_GROUP = re.compile(r"\\(?:text[a-z]*|mbox|mathrm|mathit|mathbf|mathsf|operatorname)\s*\{([^{}]*)\}")
"""A LaTeX group that holds text rather than mathematics (`\\text{ cm}`, `\\mbox{ inches}`, `\\textsf{or}`)."""
_EXPONENT = re.compile(r"\s*\^\s*(?:\{[^{}]*\}|\S)")
"""An exponent right after a text group ("\\mbox{ inches}^2")."""
_COMMAND = re.compile(r"\\(?:begin|end)\s*\{[^{}]*\}|\\[A-Za-z]+")
"""LaTeX commands and environment names: letters that are no words."""
_WORD = re.compile(r"[A-Za-z]{3,}|(?i:\b(?:or|ou|vs)\b)")
"""A word in a MATH box: three letters or more (two-letter runs such as "dx" or "ab" are mathematics), or a
two-letter connective."""
UNTRUSTED = ("Cc", "Cs", "Cf", "Co", "Cn")
"""Unicode categories no answer is followed by (control, lone surrogate, format, private use, unassigned), except
tab and line breaks."""
_END_OF_LINE = re.compile(LINE_BREAK)
_SPACES = re.compile(r"[^\S\n\r\x0b\x0c\x1c-\x1f\x85\u2028\u2029]*")
"""Horizontal spaces of every Unicode kind."""


def untrusted(char: str) -> bool:
    """Whether `char` is a control character (but tab or a line break), a lone surrogate, an invisible format
    character or an unassigned or private-use code point."""
    return char not in "\t\n\r" and unicodedata.category(char) in UNTRUSTED


def letter_candidate(letters: str) -> re.Pattern:
    """A candidate choice letter: one of `letters` standing alone (no letter or digit on either side)."""
    return re.compile(f"(?<![A-Za-z0-9])[{re.escape(letters)}](?![A-Za-z0-9])")


def rest_of_line(text: str, end: int) -> str:
    """`text` from `end` up to (not including) the line break that ends the answer's line: the first one not
    followed (after spaces) by a lower-case letter, which would continue the sentence ("18\\nor 19")."""
    pos = end
    while (stop := _END_OF_LINE.search(text, pos)) is not None:
        pos = _SPACES.match(text, stop.end()).end()
        if not (pos < len(text) and text[pos].islower()):
            return text[end : stop.start()]
    return text[end:]


def hedged(text: str, end: int, candidate: re.Pattern, *, box_start: int | None = None) -> bool:
    """Whether the answer that ends at `text[end]` is no single answer (module docstring): the rest of its line
    holds an `untrusted` character, another boxed value or a `candidate` (searched after NFKC normalisation); for a
    boxed answer that starts at `text[box_start]`, another boxed value earlier on its line too ("\\boxed{5} or
    \\boxed{6}"). Linear time; never raises."""
    line = rest_of_line(text, end)
    if any(untrusted(c) for c in line):
        return True
    if box_start is not None:
        line_start = max((m.end() for m in _END_OF_LINE.finditer(text, 0, box_start)), default=0)
        if BOXED.search(text, line_start, box_start):
            return True
    line = unicodedata.normalize("NFKC", line)
    return BOXED.search(line) is not None or candidate.search(line) is not None


def boxed_hedge(content: str) -> bool:
    """Whether the content of a MATH box names more than its expression (module docstring): a text group that holds
    a number or is followed by more of the expression, or a word outside text groups and LaTeX commands."""
    for group in TEXT_GROUP.finditer(content):
        exponent = _EXPONENT.match(content, group.end())
        after = content[exponent.end() if exponent else group.end():]
        if NUMBER.search(unicodedata.normalize("NFKC", group.group(1))) or any(c.isalnum() for c in after):
            return True
    return _WORD.search(_COMMAND.sub(" ", TEXT_GROUP.sub(" ", content))) is not None
