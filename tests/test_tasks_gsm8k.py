"""GSM8K: loader and its errors, gold answers, strict linear-time extraction, the paper's reward tiers."""

from __future__ import annotations

import json
import re
import time

import pytest

from esreason_lib.tasks import RewardShaping, get_task
from esreason_lib.tasks.gsm8k import GSM8K, extract_number, normalize_number


@pytest.fixture
def gsm_test(shared_data):
    return GSM8K(path=shared_data / "gsm8k" / "test.jsonl")


def test_every_gold_solution_scores_correct_and_a_changed_number_wrong(gsm_test):
    exs = gsm_test.examples("test")
    assert len(exs) == 1319 and len({e["id"] for e in exs}) == 1319
    for e in exs:
        assert gsm_test.is_correct(e["solution"], e), e["id"]
        assert gsm_test.reward(e["solution"], e) == 0.0  # "####" is no boxed answer: no training reward
        boxed = re.sub(r"####(.*)$", r"The answer is \\boxed{\1}", e["solution"])
        assert gsm_test.is_correct(boxed, e) and gsm_test.reward(boxed, e) == 1.0, e["id"]
        changed = re.sub(r"####.*$", f"\\\\boxed{{{int(e['answer']) + 1}}}", e["solution"])
        assert not gsm_test.is_correct(changed, e) and gsm_test.reward(changed, e) == pytest.approx(0.1), e["id"]


def test_loader_ids_order_and_sources(shared_data, monkeypatch):
    by_dir = GSM8K(path=shared_data / "gsm8k")
    first = by_dir.examples("test", n=5, seed=0)
    assert first == by_dir.examples("test", n=5, seed=0) and first != by_dir.examples("test", n=5, seed=1)
    assert all(re.fullmatch(r"gsm8k-test-\d+", e["id"]) for e in first)
    row0 = next(e for e in by_dir.examples("test") if e["id"] == "gsm8k-test-0")
    assert row0["answer"] == "18" and row0["question"].startswith("Janet")
    assert len(by_dir.examples("train")) == 7473
    monkeypatch.setenv("ESREASON_DATA", str(shared_data))
    assert get_task("gsm8k").examples("test", n=3) == by_dir.examples("test", n=3)
    with pytest.raises(ValueError, match="split"):
        by_dir.examples("dev")


def test_loader_errors(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError):
        GSM8K(path=tmp_path / "nope.jsonl").examples("test")
    bad = tmp_path / "bad.jsonl"
    good = json.dumps({"question": "q", "answer": "so #### 3"})
    for lines, message in [
        ([good, json.dumps({"question": "q", "answer": "no final line"})], "line 2: field 'answer' does not end in"),
        ([good, "", json.dumps({"question": "q"})], "line 3: field 'answer' is missing"),
        ([json.dumps({"question": "q", "answer": None})], "line 1: field 'answer' is null"),
        ([json.dumps({"question": 5, "answer": "#### 3"})], "line 1: field 'question' must be str, got int"),
        ([good, '{"question": "q", "answer": '], "line 2: not valid JSON"),
        ([good, "[1, 2]"], "line 2: expected a JSON object, got list"),
    ]:
        bad.write_text("\n".join(lines) + "\n")
        with pytest.raises(ValueError, match=re.escape(f"{bad}, {message}")):
            GSM8K(path=bad).examples("test")
    bad.write_bytes(good.encode() + b"\n" + b'{"question": "\xff", "answer": "#### 1"}\n')
    with pytest.raises(ValueError, match=re.escape(f"{bad}, line 2: not valid UTF-8")):
        GSM8K(path=bad).examples("test")
    bad.write_bytes(b"\xef\xbb\xbf" + good.encode() + b"\n")  # a UTF-8 byte-order mark is accepted
    assert GSM8K(path=bad).examples("test")[0]["answer"] == "3"
    import sys

    monkeypatch.setenv("ESREASON_DATA", str(tmp_path))  # a root without gsm8k/ -> hub -> datasets missing
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ValueError, match="`datasets` is not installed"):
        GSM8K().examples("test")


@pytest.mark.parametrize(
    "text,want",
    [("18", "18"), ("18.00", "18"), ("$1,000", "1000"), ("7.", "7"), ("-3", "-3"), ("0.50", "0.5"), ("-0", "0"),
     ("1,234,567.0", "1234567"), ("abc", None), ("", None), (".5", "0.5"), ("NaN", None), ("inf", None),
     ("1" * 70, None), (None, None), ("123456789012345678901234567890123", "123456789012345678901234567890123"),
     ("18e5", None), ("1,8", None), ("1234,567", None), ("18^2", None), ("18/2", None), ("18%", "18"), ("18)", "18"),
     ("1 8", None), ("18.5.3", None)],
)
def test_normalize_number(text, want):
    assert normalize_number(text) == want


@pytest.mark.parametrize(
    "text,want",
    [("so 3 + 4 = 7\n#### 7", "7"), ("#### $1,200.", "1200"), ("#### 5\nThen \\boxed{6}", "5"),
     ("x = 4, \\boxed{\\$18.00} and more", "18"), ("\\boxed{12 \\text{ apples}}", "12"), ("\\boxed{1{,}800}", "1800"),
     ("The answer is: $42.\nThen 7 more", "42"),
     # issue 47: another candidate on the answer's line is a hedge, whatever stands between
     ("#### 5 then \\boxed{6}", None), ("x = 4, \\boxed{\\$18.00} and 99", None),
     ("The answer is: $42. Then 7 more", None), ("the Answer is 3", "3"), ("I got 3, then 5 and finally 8.", None),
     ("no numbers here", None), ("", None), ("####", None), ("\\boxed{x} 12", None), ("#### 18 dollars", "18"),
     ("#### 18e5", None), ("#### 1,8", None), ("\\boxed{18^{2}}", None), ("#### 1,800", "1800"), ("####\n18", None),
     ("#### 18e5\nthe answer is 18", "18"), ("\\boxed{1 8}", None)],
)
def test_extraction_order(text, want):
    assert extract_number(text) == want
    assert GSM8K(path="unused").extract_answer(text) == want


@pytest.mark.parametrize("text,want", [("I got 3, then 5 and finally 8.", "8"), ("\\boxed{x} 12", "12"),
                                       ("#### 4 and 9", None), ("none", None), ("1,8", "8")])
def test_lenient_extraction_is_opt_in(text, want):
    assert extract_number(text, lenient=True) == want
    assert GSM8K(path="unused", lenient=True).extract_answer(text) == want
    with pytest.raises(ValueError, match="lenient"):
        GSM8K(lenient="yes")


def test_no_false_positives_for_18():
    task, ex = GSM8K(path="unused"), {"id": "g", "question": "q", "answer": "18"}
    for wrong in ("#### 18e5", "#### 1,8", "\\boxed{18^{2}}", "#### 180", "\\boxed{1 8}", "the answer is 18/2",
                  "#### -18", "\\boxed{18.5}", "I got 18",
                  # hedges (issue 24): an answer naming several numbers is wrong, whatever follows it
                  "#### 18 or 19", "The answer is 18 or 20", "#### 18, 19", "#### 18/19", "#### $18 or $20",
                  "the answer is 18 and 19", "#### 18% or 19%", "The answer is 18, and Tom keeps 3"):
        assert not task.is_correct(wrong, ex) and task.reward(wrong, ex) < 1.0, wrong
    for right in ("#### 18", "#### 18.00", "\\boxed{18}", "the answer is $18.", "\\boxed{\\$18}", "####18", "#### 18.",
                  "The answer is 18 dollars", "The answer is 18, and Tom keeps some", "#### 18 dollars or so"):
        assert task.is_correct(right, ex), right
    assert task.is_correct("#### 1,800", {"id": "g", "question": "q", "answer": "1800"})
    assert not task.is_correct("#### 18 or 19\n\\boxed{18}", ex)  # a hedge is no answer, whatever follows it


@pytest.mark.parametrize("text", ["answer is" + " " * 800 + "x", "the answer is" + " " * 100_000 + "x",
                                  "#### " + " " * 99_991 + "x", "1" * 100_000, "\\boxed{" * 30_000,
                                  "#### " * 20_000, "The Answer Is " * 10_000, "1," * 50_000])
def test_extraction_is_linear_on_the_issue_strings(text):
    t0 = time.perf_counter()
    task, ex = GSM8K(path="unused", lenient=True), {"id": "g", "question": "q", "answer": "18"}
    assert not task.is_correct(text, ex) and task.reward(text, ex) in (0.0, 0.1)
    assert time.perf_counter() - t0 < 0.5  # was 4.2 s for 800 spaces, and a stall for 99,991


def test_reward_tiers_and_prompts(chat_tok):
    task = GSM8K(path="unused")
    ex = {"id": "gsm8k-test-0", "question": "How many?", "answer": "18", "solution": "... #### 18"}
    completions = ("\\boxed{18}", "#### 18", "The answer is 18.00", "\\boxed{17}", "\\boxed{18 or 19}",
                   "#### 17 \\boxed{18}", "\\boxed{18} \\boxed{17}", "none")
    rewards = [task.reward(c, ex) for c in completions]
    assert rewards == [1, 0, 0, 0.1, 0.1, 1, 0.1, 0]  # the paper's: the last \\boxed{} only
    assert task.is_correct("The answer is 18.00", ex) and task.is_correct("#### 18", ex)
    assert task.is_well_formed("\\boxed{x}", ex) and not task.is_well_formed("#### 18", ex)
    shaped = GSM8K(path="unused", shaping=RewardShaping(correct=2.0, formatted=0.5, invalid=-1.0))
    assert [shaped.reward(c, ex) for c in ("\\boxed{18}", "\\boxed{3}", "18")] == [2.0, 0.5, -1.0]
    assert task.canonical_answer("\\boxed{1,000}", ex) == "1000"
    assert not task.is_correct(None, ex) and task.reward(12345, ex) == 0.0
    plain = task.prompt(ex)
    assert plain.startswith("Question: How many?") and "\\boxed{}" in plain and plain.endswith("Answer:")

    chat = task.prompt(ex, chat_tok)
    assert chat.startswith("<|user|>How many?") and "\\boxed{}" in chat


QWEN_LIKE_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}{%- if m['role'] != 'system' %}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
"""A chat template shaped like Qwen2.5's: a default system turn unless the messages bring their own."""


def test_artifact_protocol_puts_the_instruction_in_the_system_turn():
    """paper-easy's prompt is the artifact's (`es_reproduction.prompts`): the instruction as the system turn (so the
    template's default system prompt is gone) and the stripped question as the user turn; the strict protocol keeps
    one user turn after the template's default system turn. A real tokenizer renders the template."""
    from esreason_lib.models.zoo import build_char_tokenizer
    from esreason_lib.paper.studies.presets import get_preset
    from esreason_lib.tasks.gsm8k import ARTIFACT_SYSTEM

    tok = build_char_tokenizer()
    tok.chat_template = QWEN_LIKE_TEMPLATE
    ex = {"id": "gsm8k-test-0", "question": "  How many eggs?\n", "answer": "18", "solution": "#### 18"}
    easy = get_preset("paper-easy")
    artifact = get_task(easy.task, **easy.task_kwargs)
    assert artifact.prompt(ex, tok) == (
        "<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
        "<|im_start|>user\nHow many eggs?<|im_end|>\n<|im_start|>assistant\n")
    assert ARTIFACT_SYSTEM == "Please reason step by step, and put your final answer within \\boxed{}."
    strict = GSM8K(path="unused").prompt(ex, tok)
    assert strict == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                      f"  How many eggs?\n\n{ARTIFACT_SYSTEM}<|im_end|>\n<|im_start|>assistant\n")
    # without a chat template both protocols give the same plain prompt
    assert artifact.prompt(ex, build_char_tokenizer()) == GSM8K(path="unused").prompt(ex) == artifact.prompt(ex)
