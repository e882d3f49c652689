"""How presets are written: four bases in full, every registered preset one base plus its overrides
(`presets.DERIVATIONS`), each name assigned once, and the two functions that build and change a preset."""

from __future__ import annotations

import ast
import dataclasses
import inspect

import pytest

from esreason_lib.paper.studies import presets
from esreason_lib.paper.studies.preset_spec import PROPAGATED, build_preset, with_overrides
from esreason_lib.paper.studies.presets import _BASES, DERIVATIONS, PRESETS, get_preset


def _changed(a, b, prefix: str = "") -> set[str]:
    """The dotted paths at which two `dataclasses.asdict` trees differ (the deepest dict level)."""
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return set().union(*(_changed(a[k], b[k], f"{prefix}{k}.") for k in a))
    return set() if a == b else {prefix.rstrip(".")}


def test_changed_paths_on_hand_made_trees():
    assert _changed({"a": 1, "b": {"c": 2, "d": 3}}, {"a": 1, "b": {"c": 2, "d": 4}}) == {"b.d"}
    assert _changed({"a": {"x": 1}}, {"a": None}) == {"a"}
    assert _changed({"a": 1}, {"a": 1}) == set()


def test_every_registered_preset_is_written_in_the_derivations():
    assert list(DERIVATIONS) == list(PRESETS)
    assert {base for base, _ in DERIVATIONS.values()} == set(_BASES)
    assert "tiny-design" not in PRESETS  # a base that only others derive from


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_preset_differs_from_its_base_only_where_its_overrides_say(name):
    """What its `DERIVATIONS` line says is all there is: every value that differs from the base is one its
    overrides set (a propagated field, `base_model` say, also sets the ES and GRPO configs')."""
    base, changes = DERIVATIONS[name]
    keys = {k.replace("__", ".") for k in changes}
    allowed = {"name"} | keys | {f"{m}.{PROPAGATED[k]}" for k in keys if k in PROPAGATED for m in ("es", "grpo")}
    changed = _changed(dataclasses.asdict(_BASES[base]), dataclasses.asdict(PRESETS[name]))
    assert {p for p in changed if not any(p == k or p.startswith(k + ".") for k in allowed)} == set()
    assert get_preset(name) is PRESETS[name] and PRESETS[name].name == name


def test_the_module_assigns_each_name_once():
    """No literal is reassigned or patched after it is written (no `PRESETS[...] = ...` further down)."""
    tree = ast.parse(inspect.getsource(presets))
    targets = [t for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
               for t in (node.targets if isinstance(node, ast.Assign) else [node.target])]
    assert all(isinstance(t, ast.Name) for t in targets), [ast.unparse(t) for t in targets]
    names = [t.id for t in targets]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert not any(isinstance(node, (ast.For, ast.AugAssign)) for node in tree.body)


def test_with_overrides_sets_nested_fields_and_propagates_the_task():
    smoke = _BASES["smoke"]
    got = with_overrides(smoke, {"es.sigma": 0.02, "scaling__eval.n_problems": 3, "task": "addition"}, "here")
    assert (got.es.sigma, got.scaling.eval.n_problems) == (0.02, 3)
    assert (got.task, got.es.task, got.grpo.task) == ("addition", "addition", "addition")
    assert (smoke.es.sigma, smoke.task) == (3e-3, "countdown")  # the base is left as it is
    assert with_overrides(smoke, {}, "here") is smoke
    with pytest.raises(ValueError, match=r"^here\.es: unknown field 'sigmaa'"):
        with_overrides(smoke, {"es.sigmaa": 1.0}, "here")


def test_build_preset_gives_both_configs_the_preset_model_and_task():
    smoke = _BASES["smoke"]
    fields = {f.name: getattr(smoke, f.name) for f in dataclasses.fields(smoke)
              if f.name not in ("name", "base_model", "task", "task_kwargs", "es", "grpo")}
    built = build_preset("mine", base_model="qwen2-s", task="countdown", task_kwargs={"num_count": 3},
                         es={"population_size": 4}, grpo={"group_size": 2}, **fields)
    assert built.name == "mine" and built.es.population_size == 4 and built.grpo.group_size == 2
    for cfg in (built.es, built.grpo):
        assert (cfg.model, cfg.task, cfg.task_kwargs) == ("qwen2-s", "countdown", (("num_count", 3),))
