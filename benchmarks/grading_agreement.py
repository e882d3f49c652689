"""Agreement of the artifact grading protocols with a reference transcription of the published code (a script).

    .venv/bin/python benchmarks/grading_agreement.py                  # all, evaluation on every 8th GSM8K string
    .venv/bin/python benchmarks/grading_agreement.py --eval-every 1   # the math-verify evaluation on all strings

Corpus: every GSM8K test gold (`../shared/data/gsm8k/test.jsonl`, or `--data`) written in 34 formats (boxed,
`####`, "the answer is", commas, `18.0`, `$18`, `18%`, `\\fbox`, empty and double boxes, wrong answers, the
reference solution itself, adversarial strings), and 600 Countdown problems (3 and 4 numbers) answered in 24
ways. It prints agreement per protocol part and every disagreeing format with an example.

Measured (`--eval-every 1`, math-verify 0.9.0, Python 3.11): training reward 44,846 / 44,846 strings agree,
evaluation 44,846 / 44,846 (the regex fallback decided 6,595 of them), Countdown 14,400 / 14,400: 100% each,
no disagreeing format.

The REFERENCE TRANSCRIPTION below follows the published code step by step (the artifact yunpengba7/
understanding-es `src/es_reproduction/rewards.py` and `data.py`; TinyZero `verl/utils/reward_score/
countdown.py`); it lives only here, to check `esreason_lib.tasks.artifact_grading` against it.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import warnings
from collections import defaultdict
from pathlib import Path

from esreason_lib.tasks import Countdown
from esreason_lib.tasks import artifact_grading as ag

FALLBACK_USED = [0]
"""How often the reference evaluation reached its regex fallback."""
DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


# ------------------------------------------------------------ REFERENCE TRANSCRIPTION (artifact, GSM8K)
def ref_gold(solution):
    m = re.search(r"####\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)", solution)
    return m.group(1).replace(",", "")


def ref_boxed(text):
    i = text.rfind("\\boxed")
    if i < 0:
        return None
    c = i + 6
    while c < len(text) and text[c].isspace():
        c += 1
    if c >= len(text) or text[c] != "{":
        return None
    depth = 0
    for p in range(c, len(text)):
        if text[p] == "{":
            depth += 1
        elif text[p] == "}":
            depth -= 1
            if depth == 0:
                return text[c + 1 : p].strip()
    return None


def ref_fix_frac(s):
    parts = s.split("\\frac")
    out = parts[0]
    for part in parts[1:]:
        out += "\\frac"
        if not part or part[0] == "{":
            out += part
        elif len(part) >= 2:
            out += "{" + part[0] + "}" + (part[1] if part[1] == "{" else "{" + part[1] + "}") + part[2:]
        else:
            return s
    return out


def ref_fix_sqrt(s):
    if "\\sqrt" not in s:
        return s
    parts = s.split("\\sqrt")
    out = parts[0]
    for part in parts[1:]:
        out += ("\\sqrt{" + part[0] + "}" + part[1:]) if part and part[0] != "{" else "\\sqrt" + part
    return out


def ref_normalize(v):
    s = str(v).replace("\n", "").replace("\\!", "").replace("\\\\", "\\").replace("tfrac", "frac")
    s = s.replace("dfrac", "frac").replace("\\left", "").replace("\\right", "").replace("^{\\circ}", "")
    s = s.replace("^\\circ", "").replace("\\$", "").replace("\\%", "")
    if "\\text{ " in s and len(s.split("\\text{ ")) == 2:
        s = s.split("\\text{ ")[0]
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    if len(s.split("=")) == 2 and len(s.split("=")[0]) <= 2:
        s = s.split("=")[1]
    s = ref_fix_frac(ref_fix_sqrt(s).replace(" ", ""))
    if s == "0.5":
        s = "\\frac{1}{2}"
    if len(s.split("/")) == 2:
        a, b = s.split("/")
        if a.lstrip("-").isdigit() and b.lstrip("-").isdigit():
            s = "\\frac{" + a + "}{" + b + "}"
    return s


def ref_training(response, gold):
    pred = ref_boxed(response)
    if pred is None:
        return "invalid"
    return "correct" if ref_normalize(pred) == ref_normalize(gold) else "formatted"


def ref_fallback(response):
    def clean(v):
        return v.replace(",", "").rstrip(".")
    hashes = list(re.finditer(r"####\s*(-?[\d,]+\.?\d*)", response))
    if hashes:
        return clean(hashes[-1].group(1))
    boxed = ref_boxed(response)
    if boxed is not None:
        return clean(boxed)
    said = list(re.finditer(r"(?:answer|result)\s+(?:is|=)\s*(-?[\d,]+\.?\d*)", response, re.I))
    return clean(said[-1].group(1)) if said else None


def ref_numeric(v):
    s = ref_normalize(str(v).strip().replace(",", ""))
    try:
        x = float(s)
    except (ValueError, OverflowError):
        return s.lower()
    if not math.isfinite(x):
        return s.lower()
    return str(int(x)) if x == int(x) else str(x)


def ref_evaluation(response, gold):
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, LatexNormalizationConfig, parse, verify

    norm = LatexNormalizationConfig(nits=False, malformed_operators=False, basic_latex=True, boxed="all", units=True)
    parsed = parse(response, extraction_config=(
        LatexExtractionConfig(normalization_config=norm, boxed_match_priority=0, try_extract_without_anchor=False),
        ExprExtractionConfig()), extraction_mode="first_match")
    if not parsed:
        FALLBACK_USED[0] += 1
        fallback = ref_fallback(response)
        return fallback is not None and ref_numeric(fallback) == ref_numeric(gold)
    try:
        g = parse(gold, extraction_config=(ExprExtractionConfig(),), extraction_mode="first_match")
        return bool(g and verify(g, parsed))
    except Exception:
        return False


# ----------------------------------------------------------- REFERENCE TRANSCRIPTION (TinyZero, Countdown)
def ref_countdown(solution_str, numbers, target):
    if "Assistant:" in solution_str:
        solution_str = solution_str.split("Assistant:", 1)[1]
    else:
        return "invalid"
    matches = list(re.finditer(r"<answer>(.*?)</answer>", solution_str.split("\n")[-1]))
    if not matches:
        return "invalid"
    equation = matches[-1].group(1).strip()
    try:
        if sorted(int(n) for n in re.findall(r"\d+", equation)) != sorted(numbers):
            return "formatted"
    except Exception:
        return "formatted"
    try:
        if not re.match(r"^[\d+\-*/().\s]+$", equation):
            return "formatted"
        result = eval(equation, {"__builtins__": None}, {})
    except Exception:
        return "formatted"
    try:
        return "correct" if abs(result - target) < 1e-5 else "formatted"
    except Exception:
        return "formatted"


# -------------------------------------------------------------------------------------------- corpus
def gsm8k_variants(gold: str, solution: str) -> dict[str, str]:
    n = int(gold)
    c = f"{n:,}"
    return {
        "boxed": f"So the total is \\boxed{{{gold}}}.", "boxed_commas": f"\\boxed{{{c}}}",
        "boxed_decimal": f"\\boxed{{{gold}.0}}", "boxed_dollar": f"\\boxed{{${gold}}}",
        "boxed_tex_dollar": f"\\boxed{{\\${gold}}}", "boxed_percent": f"\\boxed{{{gold}%}}",
        "boxed_tex_percent": f"\\boxed{{{gold}\\%}}", "boxed_units": f"\\boxed{{{gold} \\text{{ apples}}}}",
        "boxed_space": f"\\boxed {{ {gold} }}", "boxed_trailing_dot": f"\\boxed{{{gold}.}}",
        "fbox": f"\\fbox{{{gold}}}", "empty_box": "The answer is \\boxed{}.", "unclosed_box": f"\\boxed{{{gold}",
        "two_boxes_right_last": f"\\boxed{{{n + 1}}} no, \\boxed{{{gold}}}",
        "two_boxes_right_first": f"\\boxed{{{gold}}} no, \\boxed{{{n + 1}}}", "wrong_box": f"\\boxed{{{n + 1}}}",
        "nested_box": f"\\boxed{{\\boxed{{{gold}}}}}", "frac_box": f"\\boxed{{\\frac{{{2 * n}}}{{2}}}}",
        "hash": f"#### {gold}", "hash_commas": f"#### {c}", "hash_wrong_then_box": f"#### {n + 1}\n\\boxed{{{gold}}}",
        "answer_is": f"The answer is {gold}.", "answer_is_commas": f"the answer is: {c}",
        "result_eq": f"result = {gold}",
        "inline_math": f"so ${gold}$", "plain_last_number": f"I think {gold}", "no_number": "I cannot solve this.",
        "hash_text": "#### x", "negative_box": f"\\boxed{{-{gold}}}", "leading_zero_box": f"\\boxed{{0{gold}}}",
        "solution": solution, "equation_box": f"\\boxed{{x = {gold}}}",
        "adversarial": f"\\boxed{{{gold}}}" + "}" * 5 + "\\boxed{" * 3,
        "dollar_hash": f"#### ${gold}",
    }


def countdown_variants(task: Countdown, ex: dict) -> dict[str, str]:
    nums, t = ex["numbers"], ex["target"]
    sol = task.solutions(ex)[0]
    wrong = "+".join(map(str, nums))
    neg = "-" + "-".join(map(str, nums))
    return {
        "tagged": f"<answer>{sol}</answer>", "untagged": sol, "spaced": f"<answer> {' '.join(sol)} </answer>",
        "think_then_tag": f"Let me think.</think>\n<answer>{sol}</answer>",
        "tag_then_line": f"<answer>{sol}</answer>\nok",
        "two_tags_right_last": f"<answer>{wrong}</answer> <answer>{sol}</answer>",
        "two_tags_right_first": f"<answer>{sol}</answer> <answer>{wrong}</answer>",
        "wrong": f"<answer>{wrong}</answer>",
        "unary_minus": f"<answer>{neg}</answer>", "unary_plus": f"<answer>+{sol}</answer>",
        "decimal": f"<answer>{sol}.0</answer>", "power": f"<answer>{nums[0]}**{nums[1]}</answer>",
        "floor_div": f"<answer>{'//'.join(map(str, nums))}</answer>",
        "zero_div": f"<answer>{nums[0]}/({nums[1]}-{nums[1]})</answer>",
        "missing_number": f"<answer>{'+'.join(map(str, nums[1:]))}</answer>",
        "extra_number": f"<answer>{sol}+1</answer>",
        "empty_tag": "<answer></answer>", "unclosed": f"<answer>{sol}", "letters": f"<answer>{sol} = {t}</answer>",
        "equals": f"<answer>{sol}={t}</answer>", "empty_parens": f"<answer>(){sol}</answer>",
        "juxtaposed": f"<answer>({nums[0]})({'+'.join(map(str, nums[1:]))})</answer>",
        "nested_tags": f"<answer><answer>{sol}</answer>", "closing_twice": f"<answer>{sol}</answer></answer>",
    }


def report(title: str, rows: list[tuple[str, str, object, object]]) -> float:
    wrong = defaultdict(list)
    for kind, text, mine, ref in rows:
        if mine != ref:
            wrong[kind].append((text, mine, ref))
    agree = 1 - sum(map(len, wrong.values())) / len(rows)
    print(f"{title}: {len(rows)} strings, agreement {100 * agree:.3f}%")
    for kind, cases in sorted(wrong.items()):
        text, mine, ref = cases[0]
        print(f"  {kind}: {len(cases)} disagree, e.g. {text[:80]!r}: ours {mine!r}, reference {ref!r}")
    return agree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA / "gsm8k" / "test.jsonl")
    parser.add_argument("--eval-every", type=int, default=8, help="math-verify evaluation on every k-th string")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=SyntaxWarning)  # the reference's eval of "(3)(4)"
    rows = [json.loads(line) for line in args.data.read_text().splitlines() if line.strip()]
    corpus = []
    for row in rows:
        gold = ref_gold(row["answer"])
        corpus += [(kind, text, gold, row["answer"]) for kind, text in gsm8k_variants(gold, row["answer"]).items()]
    print(f"GSM8K corpus: {len(rows)} golds x {len(corpus) // len(rows)} formats = {len(corpus)} strings")
    assert all(ag.artifact_gold({"answer": "?", "solution": s}) == g for _, _, g, s in corpus)
    report("GSM8K training reward", [(k, t, ag.gsm8k_tier(t, g), ref_training(t, g)) for k, t, g, _ in corpus])
    sample = corpus[:: args.eval_every]
    report("GSM8K evaluation (math-verify, then regex)",
           [(k, t, ag.gsm8k_correct(t, g), ref_evaluation(t, g)) for k, t, g, _ in sample])
    print(f"  the regex fallback decided {FALLBACK_USED[0]} of {len(sample)} (math-verify extracted nothing)")

    cd_rows = []
    for num_count in (3, 4):
        task = Countdown(num_count=num_count, high=99 if num_count == 3 else 25)
        for ex in task.examples("test", n=300, seed=1):
            for kind, text in countdown_variants(task, ex).items():
                mine = ag.countdown_tier(text, ex["numbers"], ex["target"])
                prompt = "User: make the target.\nAssistant: Let me solve this step by step.\n<think>"
                cd_rows.append((kind, text, mine, ref_countdown(prompt + text, ex["numbers"], ex["target"])))
    report("Countdown (TinyZero) reward", cd_rows)


if __name__ == "__main__":
    main()
