"""What the command line says before any command runs: the presets one line each, the `--set` fields of a
method's config with their one-line docs, the examples, and "did you mean" for a misspelt name.

Nothing here imports torch, transformers or the presets (whose configs import both): the field docs are read
from the config modules' source with `ast`, and `PRESET_SUMMARIES` is a plain table (a test keeps it equal to
`paper.studies.presets.PRESETS`), so `esreason --help` answers at once.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import os
import re
import sys
import textwrap
from pathlib import Path
from typing import Iterable

PACKAGE = Path(__file__).resolve().parent
"""The folder of `esreason_lib`, whose config modules `config_field_docs` reads."""

PRESET_SUMMARIES: dict[str, str] = {
    "smoke": "seconds per run, a 50k-parameter model: for the test suite only (its numbers mean nothing)",
    "tiny": "the CPU default (minutes): Countdown on a 130k-parameter Qwen2 from the zoo (qwen2-s-habit)",
    "frontier-habit": "the multi-setting design (papers/preregistration.md) on the default base qwen2-s-habit "
                      "(CPU hours)",
    "frontier-clean": "the multi-setting design on the clean base qwen2-s",
    "frontier-m": "the multi-setting design on the larger base qwen2-m (998k parameters)",
    "frontier-multi": "the multi-setting design on Countdown problems with >= 2 distinct correct expressions",
    "pretrained-smollm2": "the pretrained design (papers/preregistration-pretrained.md): SmolLM2-135M-Instruct on "
                          "two-term arithmetic, notebooks 01, 02, 04 and 05 (CPU hours)",
    "tiny-exact": "tiny computed with the model's own modules and the bit-exact batched ES backend",
    "powered": "tiny with the larger designs the power analysis asks for (about 13 min after tiny's runs)",
    "full": "tiny with the powered designs that do not fit tiny's budget (CPU, hours)",
    "paper-easy": "Qwen2.5-1.5B-Instruct on GSM8K with the paper's hyperparameters (GPUs)",
    "paper-easy-3b": "paper-easy on Qwen2.5-3B-Instruct, GRPO on TRL's GRPOTrainer (GPUs)",
    "paper-easy-7b": "paper-easy on Qwen2.5-7B-Instruct, GRPO on TRL's GRPOTrainer (GPUs)",
    "paper-hard": "DeepSeek-R1-Distill-Qwen-1.5B on DeepScaleR, tested on MATH-500 (GPUs)",
}
"""Every preset name (`paper.studies.presets.PRESETS`) with one line saying what it is for."""

HELP_WIDTH = 110
"""Characters per line of the `--set` field list."""
CONFIGS = {"es": ("es/config.py", "ESConfig"), "grpo": ("grpo/config.py", "GRPOConfig")}
"""method -> (its config module under esreason_lib/, the config class), for `train METHOD --help`."""

EXAMPLES = """\
examples:
  esreason train es --preset tiny --set iterations=6   six ES iterations on the CPU preset (seconds)
  esreason train es --set sigma=0.02 --eval            ES, then a before/after table on held-out problems
  esreason train grpo --set lr=3e-4 --no-resume        GRPO from the base, ignoring stored checkpoints
  esreason train sequence --order es,grpo              ES then GRPO at the preset's budgets
  esreason train es --task-module my_pkg.tasks --set task=parity   your own registered task
  esreason train es --help                             every --set field of ESConfig, one line each
  esreason bases --preset tiny                         the zoo models the preset starts from"""


def suggest(word: str, choices: Iterable[str]) -> str:
    """"; did you mean 'x'?" for the choice closest to `word` (difflib), or "" when none is close."""
    match = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f"; did you mean {match[0]!r}?" if match else ""


def preset_name(text: str) -> str:
    """argparse `type` of `--preset`: `text` when it names a preset, else an error naming the closest one."""
    if text not in PRESET_SUMMARIES:
        raise argparse.ArgumentTypeError(f"unknown preset {text!r}{suggest(text, PRESET_SUMMARIES)} "
                                         f"(presets: {', '.join(PRESET_SUMMARIES)})")
    return text


def presets_help() -> str:
    """The presets, one line each (the help's epilog)."""
    width = max(map(len, PRESET_SUMMARIES))
    return "presets (--preset NAME):\n" + "\n".join(f"  {name:<{width}}  {line}"
                                                      for name, line in PRESET_SUMMARIES.items())


def first_sentence(text: str, width: int = 100) -> str:
    """`text`'s first sentence on one line (whitespace collapsed), shortened to `width` characters."""
    flat = " ".join(text.split())
    match = re.search(r"(?<!\be\.g)(?<!\bi\.e)\.(\s|$)", flat)
    sentence = flat[: match.start() + 1] if match else flat
    return textwrap.shorten(sentence, width=width, placeholder=" ...")


def _class_fields(tree: ast.Module, name: str) -> tuple[ast.ClassDef, dict[str, str]]:
    """The class `name` in `tree` and its annotated fields {name: the string literal that follows, or ""}."""
    cls = next((node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name), None)
    if cls is None:
        raise ValueError(f"no class {name!r} in the parsed module")
    fields: dict[str, str] = {}
    for node, after in zip(cls.body, cls.body[1:] + [None]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            doc = (after.value.value if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                   and isinstance(after.value.value, str) else "")
            fields[node.target.id] = doc
    return cls, fields


def config_field_docs(module: str, name: str) -> dict[str, str]:
    """{field: its docstring on one line} of the dataclass `name` defined in `module` (a path under
    esreason_lib/), base-class fields first (dataclass order), read from the source: nothing is imported. A base
    class is followed through the module's `from esreason_lib.X import Base`."""
    tree = ast.parse((PACKAGE / module).read_text())
    cls, own = _class_fields(tree, name)
    docs: dict[str, str] = {}
    imports = {alias.asname or alias.name: node.module for node in tree.body if isinstance(node, ast.ImportFrom)
               and (node.module or "").startswith("esreason_lib.") for alias in node.names}
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in imports:
            path = imports[base.id].removeprefix("esreason_lib.").replace(".", "/") + ".py"
            docs.update(config_field_docs(path, base.id))
    docs.update({field: " ".join(doc.split()) for field, doc in own.items()})
    return docs


def fields_help(method: str | None) -> str:
    """The `--set` fields of `method`'s config (es, grpo; a sequence both, with their prefixes), one line each;
    without a method, where to find them."""
    if method not in CONFIGS and method != "sequence":
        return "--set fields: `esreason train es --help` (or grpo) lists every field of the method's config"
    methods = ["es", "grpo"] if method == "sequence" else [method]
    blocks = []
    for m in methods:
        module, cls = CONFIGS[m]
        docs = config_field_docs(module, cls)
        prefix = f"{m}." if method == "sequence" else ""
        width = max(len(prefix + f) for f in docs)
        blocks.append(f"--set fields of {cls} ({prefix}KEY=VALUE, values as Python literals):\n" + "\n".join(
            f"  {prefix + f:<{width}}  {first_sentence(doc, HELP_WIDTH - width - 4)}" for f, doc in docs.items()))
    return "\n\n".join(blocks)


class TrainHelp(argparse.Action):
    """`train [METHOD] --help`: the parser's help, then the `--set` fields of METHOD's config when it was given
    before `--help` (`fields_help`)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.print_help()
        try:
            print("\n" + fields_help(getattr(namespace, "method", None)), flush=True)
        except BrokenPipeError:  # the reader stopped early (`| head`): end quietly, as argparse's own help does
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        parser.exit()


class OneLineParser(argparse.ArgumentParser):
    """An `ArgumentParser` whose errors are one line, `esreason: error: ...` (no usage block), with "did you
    mean" for an invalid choice (a command, a method)."""

    def error(self, message: str):
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            value, options = choice.group(1), choice.group(2)
            hint = suggest(value, re.findall(r"'([^']*)'", options))
            message = f"{message[:choice.start()]}invalid choice: {value!r}{hint} (choose from {options})"
        self.exit(2, f"esreason: error: {message} (see `{self.prog} --help`)\n")
