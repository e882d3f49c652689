"""The math-verify half of the paper artifact's GSM8K evaluation (see `artifact_grading`).

It runs in the math_verify worker process: `MathWorker.call` loads this file by itself, outside the package, so
it imports only the standard library and math_verify (0.9: `LatexNormalizationConfig`).
"""

from __future__ import annotations

from math_verify import ExprExtractionConfig, LatexExtractionConfig, LatexNormalizationConfig, parse, verify

_RESPONSE_CONFIG = (
    LatexExtractionConfig(
        normalization_config=LatexNormalizationConfig(
            basic_latex=True, units=True, malformed_operators=False, nits=False, boxed="all"
        ),
        boxed_match_priority=0,
        try_extract_without_anchor=False,
    ),
    ExprExtractionConfig(),
)
"""The artifact's extraction from a response: LaTeX (any boxed answer first, no anchor-less matches), then a
plain expression."""


def verdict(response: str, gold: str) -> bool | None:
    """None when math-verify extracts nothing from `response` (the artifact then uses its regex fallback);
    otherwise whether `verify(gold, extracted)` holds, `gold` parsed as a plain expression. math-verify's own
    default time limits apply (5 s to parse, 5 s to verify; here in the worker's main thread, where they work),
    as in the artifact; a parse that times out extracts nothing."""
    extracted = parse(response, extraction_config=_RESPONSE_CONFIG, extraction_mode="first_match")
    if not extracted:
        return None
    try:
        gold_parsed = parse(gold, extraction_config=(ExprExtractionConfig(),), extraction_mode="first_match")
        return bool(gold_parsed and verify(gold_parsed, extracted))
    except Exception:
        return False
