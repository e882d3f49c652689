"""One rule for hedges, shared by every task that extracts a single answer (GSM8K, CommonsenseQA, GPQA): an answer
that names several candidates ("18 or 19", "B, C", "B \\vee C", "18 ± 1") is wrong, never read as its first
candidate; nor is an answer followed by a character no honest answer ends in (a control character, a NUL, a lone
surrogate, an invisible format character).

The rule is driven by the tables below. After the answer comes a *gap*: horizontal spaces of every Unicode kind,
TeX's spaces, line breaks, opening brackets and separators. The answer is hedged when the gap holds a separator and
another candidate follows it, or (`spaced`, numbers only: "18 19", "18 000" with a thin or no-break space) when the
gap is spaces on one line and another candidate follows it. A gap of brackets and spaces only ("18 (6 x 3)") and a
line break ("18\\n\\nQuestion: ... 19") separate no candidates. The gap is matched possessively: linear time.
"""

from __future__ import annotations

import re
import unicodedata

HORIZONTAL_SPACE = r"[^\S\n\r\x0b\x0c\x1c-\x1f\x85\u2028\u2029]"
"""Every Unicode space that does not break a line: space, tab, no-break, thin, narrow no-break, ideographic ..."""
LINE_BREAK = r"[\n\r\u2028\u2029]"
"""Line breaks (the other whitespace characters, vertical tab, form feed, \\x1c-\\x1f, \\x85, are control
characters: `UNTRUSTED`)."""
TEX_SPACES = (r"~", r"\\[,:;! ]", r"\\q?quad(?![A-Za-z])")
"""TeX's spaces: "~", "\\,", "\\:", "\\;", "\\!", "\\ ", "\\quad", "\\qquad"."""
BRACKETS = "(["
"""Openings that may stand between an answer and the next candidate ("18 (or 19)")."""
WORDS = ("or", "and", "to", "vs", "versus", "nor", "either", "else", "otherwise", "alternatively",
         "possibly", "maybe", "perhaps", "probably", "if\\s+not", "plus", "minus", "through")
"""Connective words (case-insensitive, whole words, regular expressions, each optionally followed by "."), bare or
in `\\text{}`-like commands."""
SYMBOLS = (",", ";", "/", "|", "&", "+", "±", "∓", "-", "‐", "‑", "‒", "–", "—", "―", "−", "∨", "∧", "∪", "∩",
           "⊕", "⊻")
"""Separator characters: list punctuation, plus, plus-minus, every dash and minus, logical and set operators."""
COMMANDS = ("pm", "mp", "vee", "lor", "wedge", "land", "cup", "cap", "oplus", "mid", "vert", "|")
"""TeX separator commands, as `\\pm`, `\\vee`, `\\cup`, ... ("\\|" too)."""
TEXT_COMMANDS = ("text", "textrm", "textit", "textbf", "mathrm", "mathit", "mbox", "operatorname")
"""TeX commands whose braces may hold a connective word: `\\text{or}`, `\\mathrm{ or }`."""
UNTRUSTED = ("Cc", "Cs", "Cf", "Co", "Cn")
"""Unicode categories no answer is followed by (control, lone surrogate, format, private use, unassigned), except
tab and line breaks."""

_WORD = r"(?i:\b(?:" + "|".join(WORDS) + r")\b\.?)"
_SEPARATOR = "|".join([
    _WORD,
    r"\\(?:" + "|".join(TEXT_COMMANDS) + r")\{\s*" + _WORD + r"\s*\}",
    r"\\(?:" + "|".join(re.escape(c) for c in COMMANDS) + r")(?![A-Za-z])",
    "[" + re.escape("".join(SYMBOLS)) + "]",
])
_SPACE = "|".join([HORIZONTAL_SPACE, LINE_BREAK, *TEX_SPACES, "[" + re.escape(BRACKETS) + "]"])
_GAP = re.compile(f"(?:{_SPACE}|{_SEPARATOR})*+")
"""The gap after an answer (possessive: no backtracking)."""
_NOT_SEPARATOR = re.compile(_SPACE)
_OPENING = re.compile(r"(?:\(|\\?\$)*+")
"""Skipped before the next candidate ("(B) or (C)", "$18 or $20")."""


def untrusted(char: str) -> bool:
    """Whether `char` is a control character (but tab or a line break), a lone surrogate, an invisible format
    character or an unassigned or private-use code point."""
    return char not in "\t\n\r" and unicodedata.category(char) in UNTRUSTED


def hedged(text: str, end: int, candidate: re.Pattern, *, spaced: bool = False) -> bool:
    """Whether the answer that ends at `text[end]` is no single answer (module docstring): another `candidate`
    follows it after a separator (or, with `spaced`, after spaces on the same line: "18 19"), or the first
    character after its gap is `untrusted` ("B\\x00"). Linear time; never raises."""
    gap = _GAP.match(text, end).group()
    after = end + len(gap)
    if after < len(text) and untrusted(text[after]):
        return True
    if not _NOT_SEPARATOR.sub("", gap):  # spaces, line breaks and brackets only
        bare = spaced and gap and not re.search(LINE_BREAK, gap) and not any(b in gap for b in BRACKETS)
        if not bare:
            return False
    return candidate.match(text, _OPENING.match(text, after).end()) is not None
