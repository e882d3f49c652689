"""The verifier's identity is its code (issue 47, item 2): a helper module it calls, a package it uses, a global
it reads and a class built by `exec` all count; what cannot be hashed is never cached, and says so once; cached
evaluations key on the same identity; a task that reads only its own module keeps the digest it always had."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import sys
import textwrap
import threading

import numpy as np
import pytest

from esreason_lib import tasks
from esreason_lib.es.config import ESConfig
from esreason_lib.tasks import Task, register_task, task_version
from esreason_lib.tasks.code_identity import class_digest, package_version, standard, user_classes
from esreason_lib.training.run_entry import run_identity

TASK = '''
from esreason_lib.tasks import Task
import {helper} as helper


class HelperTask(Task):
    name = "helper-task"

    def examples(self, split="test", n=None, seed=0):
        return [{{"id": "0", "n": 0}}]

    def prompt(self, example, tokenizer=None):
        return "?"

    def extract_answer(self, completion):
        return completion

    def is_correct(self, completion, example):
        return helper.judge(completion)
'''


@pytest.fixture
def modules(tmp_path, monkeypatch):
    """Write modules into a folder on sys.path; `write(name, text)` (re)imports one."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written = []

    def write(name, text):
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
        importlib.invalidate_caches()
        if name in sys.modules:
            return importlib.reload(sys.modules[name])
        written.append(name)
        return importlib.import_module(name)

    yield write
    for name in written:
        sys.modules.pop(name, None)


def test_a_task_whose_helper_module_changes_trains_anew(modules):
    modules("helper_a", "def judge(c):\n    return c == 'yes'\n")
    task_module = modules("task_a", TASK.format(helper="helper_a"))
    before = task_version(task_module.HelperTask())
    config = dataclasses.replace(ESConfig(model="smoke", task="countdown"), task="helper-task")
    identity = run_identity(config, task_module.HelperTask())
    modules("helper_a", "def judge(c):\n    return c != 'yes'\n")  # the verifier inverted in its helper
    after = task_version(task_module.HelperTask())
    assert before.startswith("code:") and after.startswith("code:") and after != before
    assert run_identity(config, task_module.HelperTask()) != identity  # another run: trained anew


def test_a_helper_of_a_helper_counts_too(modules):
    modules("deep_b", "LIMIT = 3\n")
    modules("helper_b", "import deep_b\n\ndef judge(c):\n    return len(c) < deep_b.LIMIT\n")
    task_module = modules("task_b", TASK.format(helper="helper_b"))
    before = task_version(task_module.HelperTask())
    modules("deep_b", "LIMIT = 4\n")
    assert task_version(task_module.HelperTask()) != before


class OwnModule(Task):
    name = "own"

    def examples(self, split="test", n=None, seed=0):
        return []

    def prompt(self, example, tokenizer=None):
        return ""

    def extract_answer(self, completion):
        return completion

    def is_correct(self, completion, example):
        return _own_helper(completion)


def _own_helper(text):
    return text == "yes"


def test_a_task_of_its_own_module_keeps_its_digest():
    """The digest before issue 47: sha256 over each user class's qualified name and its module's source."""
    want = hashlib.sha256(f"{__name__}.OwnModule\n".encode() + inspect.getsource(sys.modules[__name__]).encode())
    assert task_version(OwnModule()) == "code:" + want.hexdigest()[:12]


class UsesNumpy(OwnModule):
    def is_correct(self, completion, example):
        return bool(np.isclose(float(completion), 1.0))


def test_an_installed_package_counts_by_its_version(monkeypatch):
    assert package_version("numpy.linalg") == f"numpy=={np.__version__}"
    assert package_version("no_such_module_here") is None
    assert standard("json") and standard("os.path") and not standard("numpy")
    before = task_version(UsesNumpy())
    monkeypatch.setattr("esreason_lib.tasks.code_identity.package_version",
                        lambda module: "numpy==0.0" if module.startswith("numpy") else None)
    assert task_version(UsesNumpy()) != before  # another numpy: another verifier


def _exec_class(body: str, helper: str = "True"):
    """A task class built by `exec` with no `__name__` (its classes claim the `builtins` module)."""
    namespace = {"Task": Task}
    exec(textwrap.dedent(f"""
        def helper(c):
            return {helper}

        class Built(Task):
            name = "built"
            def examples(self, split="test", n=None, seed=0): return []
            def prompt(self, example, tokenizer=None): return ""
            def extract_answer(self, completion): return None
            def is_correct(self, completion, example): return {body}
        """), namespace)
    return namespace["Built"]


def test_a_class_built_by_exec_is_hashed_never_the_empty_digest():
    empty = hashlib.sha256(b"").hexdigest()[:12]
    built = _exec_class("False")
    assert user_classes(built) == [built]
    assert task_version(built()) not in (None, f"code:{empty}")
    assert task_version(_exec_class("False")()) == task_version(built())
    assert task_version(_exec_class("True")()) != task_version(built())
    assert task_version(_exec_class("helper(completion)", "True")()) != \
        task_version(_exec_class("helper(completion)", "False")())  # a helper beside it, by its code


class ReadsALock(OwnModule):
    def is_correct(self, completion, example):
        with _LOCK_OF_ANOTHER_KIND[0]:
            return True


_LOCK_OF_ANOTHER_KIND = [threading.Lock()]


def test_code_that_cannot_be_hashed_is_never_cached_and_says_so_once(capsys, monkeypatch):
    """A notebook class (no source) reading an object whose only description is its address."""
    monkeypatch.setattr(tasks, "_SAID", set())
    namespace = {"LOCK": threading.Lock()}
    exec("class Locked:\n    name = 'locked'\n"
         "    def is_correct(self, completion, example):\n        return LOCK.locked()\n", namespace)
    locked = namespace["Locked"]()
    first, second = task_version(locked), task_version(locked)
    assert first.startswith("uncached:") and second.startswith("uncached:") and first != second
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "task 'locked' cannot be hashed" in err and "declare a `version`" in err
    assert task_version(ReadsALock()).startswith("code:")  # a global of a module whose source is hashed
    from types import SimpleNamespace

    assert task_version(SimpleNamespace(name="ns", is_correct=lambda c, e: True)).startswith("uncached:")


def test_evaluations_are_keyed_on_the_tasks_code(modules, monkeypatch, tmp_path):
    """`paper.studies.common.evaluate_ref` opens its `eval` run under the task's version: an always-True verifier's
    stored result is not served after it is replaced by an always-False one under the same name."""
    from esreason_lib.evaluation import EvalSpec
    from esreason_lib.paper.studies import common

    monkeypatch.setattr(tasks, "_REGISTRY", dict(tasks._REGISTRY))
    opened = []

    class Stop(Exception):
        pass

    def record(kind, config, **kwargs):
        opened.append(config)
        raise Stop

    monkeypatch.setattr(common.Run, "open", staticmethod(record))
    for verdict in ("True", "False"):
        modules("verdict_d", f"def judge(c):\n    return {verdict}\n")
        register_task("helper-task", modules("task_d", TASK.format(helper="verdict_d")).HelperTask)
        with pytest.raises(Stop):
            common.evaluate_ref("m", "helper-task", {}, EvalSpec(), home=tmp_path)
    assert opened[0]["task_version"] != opened[1]["task_version"]
    with pytest.raises(Stop):
        common.evaluate_ref("m", "countdown", {}, EvalSpec(), home=tmp_path)
    assert "task_version" not in opened[2]  # built-in tasks keep their stored evaluations' identities


def test_class_digest_by_hand():
    assert class_digest(OwnModule) == class_digest(OwnModule) and len(class_digest(OwnModule)) == 64
    assert class_digest(UsesNumpy) != class_digest(OwnModule)


def test_a_helper_imported_by_name_counts_with_what_it_reads(modules):
    modules("helper_e", "THRESHOLD = 1\n\ndef judge(c):\n    return len(c) > THRESHOLD\n")
    task_module = modules("task_e", TASK.replace("import {helper} as helper", "from {helper} import judge")
                          .replace("helper.judge(", "judge(").format(helper="helper_e"))
    before = task_version(task_module.HelperTask())
    modules("helper_e", "THRESHOLD = 2\n\ndef judge(c):\n    return len(c) > THRESHOLD\n")
    importlib.reload(task_module)  # `from ... import` binds the function: the task module re-imports it
    assert task_version(task_module.HelperTask()) != before
