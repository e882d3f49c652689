"""Multi-step arithmetic (tasks/multistep.py): problems, splits, prompts, the answer rules and the reward tiers."""

from __future__ import annotations

import pytest

from esreason_lib.tasks import get_task
from esreason_lib.tasks.gsm8k import number_after
from esreason_lib.tasks.multistep import MultiStep

EX = {"id": "multistep-48+27-19", "expression": "48 + 27 - 19", "answer": 56}


def _value(expression: str) -> int:
    """The value of "a + b - c" read left to right (a reference independent of the task's own sum)."""
    parts = expression.split()
    total = int(parts[0])
    for sign, x in zip(parts[1::2], parts[2::2]):
        total = total + int(x) if sign == "+" else total - int(x)
    return total


def test_examples_are_seeded_distinct_and_well_formed():
    task = get_task("multistep", terms=3, digits=2)
    assert isinstance(task, MultiStep) and task.max_new_tokens == 64 + 32 * 3 == 160
    exs = task.examples("test", n=200)
    assert exs == task.examples("test", n=200) and exs[:50] == task.examples("test", n=50)
    assert task.examples("test", n=20, seed=1) != exs[:20]
    assert len({e["id"] for e in exs}) == 200
    for e in exs:
        parts = e["expression"].split()
        assert len(parts) == 5 and all(10 <= int(x) <= 99 for x in parts[::2]) and set(parts[1::2]) <= {"+", "-"}
        assert e["answer"] == _value(e["expression"]) >= 0
        assert e["id"] == "multistep-" + e["expression"].replace(" ", "")
    assert {p for e in exs for p in e["expression"].split()[1::2]} == {"+", "-"}  # both signs drawn


def test_one_digit_operands_and_default_sizes():
    task = MultiStep(terms=4, digits=1, test_fraction=0.5)
    exs = task.examples("test", n=100)
    assert all(1 <= int(x) <= 9 for e in exs for x in e["expression"].split()[::2])
    assert len(MultiStep().examples("test")) == 2000 and len(MultiStep().examples("train", n=10)) == 10


def test_splits_are_disjoint():
    task = MultiStep(terms=2, digits=2)
    test = {e["expression"] for e in task.examples("test", n=300)}
    train = {e["expression"] for e in task.examples("train", n=3000)}
    assert not test & train


def test_prompts(chat_tok):
    task = MultiStep()
    assert task.prompt(EX) == "48+27-19="
    chat = task.prompt(EX, chat_tok)
    assert chat.startswith("<|user|>") and 'Compute 48 + 27 - 19. Work it out step by step, then end with "The ' \
        'answer is N."' in chat


@pytest.mark.parametrize("completion, answer", [
    ("48 + 27 = 75, 75 - 19 = 56. The answer is 56.", "56"),
    ("**Answer:** 56", "56"),
    ("First 48 - 19 = 29, then 29 + 27 = 56.\nThe final answer is $56", "56"),
    ("the answer is: 56.0", "56"),
    ("The answer is 1,056", "1056"),
    ("The answer is 55. Wait, the answer is 56", "56"),          # the last marker wins
    ("75 - 19 = 56, so \\boxed{56}", "56"),                     # no marker: the last box
    ("56", "56"),                                                # a bare number (plain prompt)
    (" 56 \nmore text", "56"),
    ("The answer is 56 or 57.", None),                           # a hedge is no answer
    ("The answer is 56-57", None),
    ("48 + 27 = 75, 75 - 19 = 56.", None),                       # no marker, box or bare number
    ("The answer is N.", None),
    ("", None),
    (None, None),
    (56, None),
])
def test_extract_answer(completion, answer):
    assert MultiStep().extract_answer(completion) == answer


def test_is_correct_and_reward_tiers():
    task = MultiStep()
    assert task.is_correct("The answer is 56.", EX) and task.reward("The answer is 56.", EX) == 1.0
    assert not task.is_correct("The answer is 57.", EX) and task.reward("The answer is 57.", EX) == 0.1
    assert task.reward("I do not know.", EX) == 0.0 and task.score("\\boxed{56}", EX) == (1.0, True)
    assert not task.is_correct("The answer is 56.", {"id": "x"})    # a broken example: False, never raises
    assert task.is_correct("The answer is 56.5", EX) is False


def test_long_hostile_completions_are_read_from_their_tail():
    task = MultiStep()
    assert task.extract_answer("answer is " * 50_000 + "The answer is 56") == "56"
    assert task.extract_answer("The answer is 56" + "x" * 200_000) is None  # the marker lies beyond the tail read


@pytest.mark.parametrize("kwargs, field", [
    ({"terms": 1}, "terms"), ({"terms": 9}, "terms"), ({"terms": 2.0}, "terms"), ({"terms": True}, "terms"),
    ({"digits": 0}, "digits"), ({"digits": 7}, "digits"), ({"test_fraction": 1.0}, "test_fraction"),
    ({"train_size": -1}, "train_size"), ({"test_size": 2.5}, "test_size"),
])
def test_bad_settings_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        MultiStep(**kwargs)


def test_number_after():
    assert number_after("The answer is 56.", 14) == "56"
    assert number_after("x: 18 or 19", 2) is None and number_after("x: $7.", 2) == "7"
    assert number_after("x: abc", 2) is None


def test_short_style_prompts_for_the_number_and_reads_the_last_number():
    from esreason_lib.models.zoo import build_chat_char_tokenizer

    short = MultiStep(terms=2, digits=2, style="short")
    ex = {"id": "multistep-84-10", "expression": "84 - 10", "answer": 74}
    assert short.max_new_tokens == 64 and MultiStep(terms=2, digits=2).max_new_tokens == 128
    assert "What is 84 - 10? Reply with just the number." in short.prompt(ex, build_chat_char_tokenizer())
    assert short.prompt(ex, None) == MultiStep(terms=2, digits=2).prompt(ex, None) == "84-10="
    assert short.examples("test", n=30) == MultiStep(terms=2, digits=2).examples("test", n=30)  # the same problems
    for text, answer in [("84 - 10 is 74.", "74"), ("74", "74"), ("84 - 10 = 74", "74"),
                         ("84 - 10 = 72. Checking: 84 - 10 = 74.", "74"), ("The answer is 74.", "74"),
                         ("The answer is 74 or 84.", None),
                         ("84 - 10, so \\boxed{74}", "74"), ("84 minus ten", "84"), ("no number", None),
                         ("", None), (None, None), ("1,074.", "1074")]:
        assert short.extract_answer(text) == answer, text
    assert short.is_correct("84 - 10 is 74.", ex) and not short.is_correct("84 - 10 is 78.", ex)
    steps = MultiStep(terms=2, digits=2)
    assert steps.extract_answer("84 - 10 is 74.") is None  # the steps style keeps its rules
    with pytest.raises(ValueError, match="style must be one of .* got 'long'"):
        MultiStep(style="long")
