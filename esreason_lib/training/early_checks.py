"""The config checks that need no torch, run on the values the command line sets before anything heavy loads.

`ESConfig` and `GRPOConfig` check their fields in `__post_init__`, but importing either loads torch (their
registries do), and building one needs the preset (transformers): a bad `--set` value waited for both. Here those
checks are read from the configs' source with `ast` (`config_checks`: the base `RunSettings`' first, in source
order) and run on the fields that `esreason train` sets (`check_values`), on a stand-in object named as the config,
so the error is the config's own one line (`ESConfig.population_size must be a positive int, got -3`):

- a call of one of `validation`'s checks or `models.placement`'s, on the named fields that are set; its choices
  (`check_choice(self, "backend", BACKENDS)`) are the literal they name, followed through the module's imports;
- a `check(self, "field", <condition>, <why>)` whose condition and reason read only fields that are set, builtins
  and `validation`'s names (`self.population_size >= 2`).

The others (a registry that is not a literal, a loop, a field the command line leaves to the preset) run when the
config is built, as before. `check_model_path` adds the one path a `--set` names: a `model` that can only be a path
(it starts with "/", "." or "~") and names no directory.
"""

from __future__ import annotations

import ast
import builtins
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from esreason_lib import validation
from esreason_lib.cli_help import CONFIGS, PACKAGE
from esreason_lib.models import placement

FIELD_CHECKS = {name: getattr(validation, name) for name in (
    "check_int", "check_positive_int", "check_nonnegative_int", "check_optional_positive_int", "check_finite_float",
    "check_positive_float", "check_step_size", "check_nonnegative_float", "check_bool", "check_nonempty_str",
    "check_choice", "check_run_size")}
"""`validation`'s checks called as `f(self, "field", ..., *literals)`, each reading only the fields it names: applied
to the named fields that are set (`check_run_size` too: the product of some positive sizes is at most that of all,
so it fails on them only where the config would)."""
OWNER_CHECKS = {"check_gpus_per_worker": placement.check_gpus_per_worker,
                "check_memory_share": placement.check_memory_share}
"""`models.placement`'s checks called as `f("ConfigName", self.field)`."""
SOURCES = {validation.__name__: FIELD_CHECKS, placement.__name__: OWNER_CHECKS}
"""The module each check must be imported from in the config's source (a same-named function elsewhere is not it)."""
NAMESPACE = {**vars(builtins), **{k: v for k, v in vars(validation).items() if not k.startswith("_")}}
"""What a `check(self, ...)` condition may name besides `self`: builtins and `validation`'s public names."""


@dataclass(frozen=True)
class ConfigCheck:
    """One `__post_init__` call that `check_values` can run without the config."""

    function: Callable
    """The check (a value of `FIELD_CHECKS` or `OWNER_CHECKS`)."""
    fields: tuple[str, ...]
    """The fields it reads, in the order the call names them."""
    args: tuple = ()
    """The literal arguments after the fields (`check_choice`'s choices), as values."""
    kwargs: tuple = ()
    """Its literal keyword arguments as (name, value) pairs (`check_step_size`'s `high`)."""

    def run(self, config: Any, values: Mapping[str, Any]) -> None:
        """Apply the check to those of its fields in `values` (none set: nothing to check)."""
        names = [name for name in self.fields if name in values]
        if not names:
            return
        if self.function in OWNER_CHECKS.values():
            self.function(type(config).__name__, values[names[0]])
        else:
            self.function(config, *names, *self.args, **dict(self.kwargs))


@dataclass(frozen=True)
class ConditionCheck:
    """One `check(self, "field", <condition>, <why>)` call of a `__post_init__` that reads only `fields`."""

    target: str
    """The field the check names (its message's)."""
    fields: tuple[str, ...]
    """Every field the condition and the reason read, the target included."""
    condition: Any
    """The condition, compiled (`eval` mode)."""
    why: Any
    """The reason (a string or an f-string), compiled."""

    def run(self, config: Any, values: Mapping[str, Any]) -> None:
        """`validation.check` of the condition when every field it reads is in `values` (else nothing)."""
        if all(name in values for name in self.fields):
            scope = {"self": config}
            validation.check(config, self.target, eval(self.condition, NAMESPACE, scope),
                             eval(self.why, NAMESPACE, scope))


def _condition_check(call: ast.Call) -> ConditionCheck | None:
    """The `ConditionCheck` of a `check(self, "field", condition, why)` call, None when it names anything but
    `self`'s fields and `NAMESPACE`."""
    if len(call.args) != 4 or call.keywords or not isinstance(call.args[1], ast.Constant):
        return None
    fields = {call.args[1].value}
    for node in ast.walk(ast.Tuple(elts=call.args[2:], ctx=ast.Load())):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            fields.add(node.attr)
        elif isinstance(node, ast.Name) and node.id != "self" and node.id not in NAMESPACE:
            return None
    condition, why = (compile(ast.Expression(body=node), "<config check>", "eval") for node in call.args[2:])
    return ConditionCheck(call.args[1].value, tuple(sorted(fields)), condition, why)


def _module_file(module: str) -> Path:
    """The source of `esreason_lib.X.Y` under the package folder (a module file or a package's __init__.py)."""
    base = PACKAGE / module.removeprefix("esreason_lib.").replace(".", "/")
    return base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"


@functools.lru_cache(maxsize=None)
def _parsed(path: Path) -> tuple[ast.Module, dict[str, tuple[str, str]]]:
    """The module at `path` and its `from esreason_lib... import` names: {local name: (module, name there)}."""
    tree = ast.parse(path.read_text())
    imports = {alias.asname or alias.name: (node.module, alias.name) for node in tree.body
               if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("esreason_lib")
               for alias in node.names}
    return tree, imports


def constant_values(path: Path, name: str) -> tuple | None:
    """The values of the module-level constant `name` of the module at `path` (a tuple, list or set of constants,
    starred constants included, or the keys of a dict), followed through its imports; None when not a literal."""
    tree, imports = _parsed(path)
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
            return _literal(path, node.value)
    if name in imports:
        module, original = imports[name]
        return constant_values(_module_file(module), original)
    return None


def _literal(path: Path, node: ast.expr) -> tuple | None:
    """The values `node` stands for in the module at `path` (see `constant_values`), None when not a literal."""
    if isinstance(node, ast.Name):
        return constant_values(path, node.id)
    if isinstance(node, ast.Dict):
        elements = node.keys
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        elements = node.elts
    else:
        return None
    values: list = []
    for element in elements:
        part = (_literal(path, element.value) if isinstance(element, ast.Starred)
                else (element.value,) if isinstance(element, ast.Constant) else None)
        if part is None:
            return None
        values.extend(part)
    return tuple(values)


def _argument(path: Path, node: ast.expr) -> tuple[bool, Any]:
    """(True, the value) of a literal call argument (a constant, or what `_literal` resolves), else (False, None)."""
    if isinstance(node, ast.Constant):
        return True, node.value
    value = _literal(path, node)
    return value is not None, value


def _call_check(path: Path, call: ast.Call, imports) -> ConfigCheck | ConditionCheck | None:
    """The check of one `__post_init__` call, or None when it is not one `check_values` can run."""
    if not isinstance(call.func, ast.Name) or call.func.id not in imports:
        return None
    module, name = imports[call.func.id]
    if (module, name) == (validation.__name__, "check"):
        return _condition_check(call)
    function = SOURCES.get(module, {}).get(name)
    if function is None or not call.args:
        return None
    if function in OWNER_CHECKS.values():
        field = call.args[1] if len(call.args) == 2 else None
        ok = isinstance(field, ast.Attribute) and isinstance(field.value, ast.Name) and field.value.id == "self"
        return ConfigCheck(function, (field.attr,)) if ok else None
    rest = call.args[1:]
    count = next((i for i, a in enumerate(rest) if not (isinstance(a, ast.Constant) and isinstance(a.value, str))),
                 len(rest))
    literals = [_argument(path, a) for a in rest[count:]] + [_argument(path, k.value) for k in call.keywords]
    if not count or not all(ok for ok, _ in literals) or any(k.arg is None for k in call.keywords):
        return None
    values = [value for _, value in literals]
    return ConfigCheck(function, tuple(a.value for a in rest[:count]), tuple(values[:len(rest) - count]),
                       tuple((k.arg, v) for k, v in zip(call.keywords, values[len(rest) - count:])))


def config_checks(module: str, name: str) -> tuple[ConfigCheck | ConditionCheck, ...]:
    """The checks of the config class `name` in `module` (a path under esreason_lib/) that `check_values` runs: its
    base class's (followed through the module's imports) first, then its own `__post_init__` calls, in order."""
    path = PACKAGE / module
    tree, imports = _parsed(path)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    checks: list[ConfigCheck | ConditionCheck] = []
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in imports:
            base_module, base_name = imports[base.id]
            checks.extend(config_checks(str(_module_file(base_module).relative_to(PACKAGE)), base_name))
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__post_init__"), None)
    for statement in init.body if init else []:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
            check = _call_check(path, statement.value, imports)
            if check is not None:
                checks.append(check)
    return tuple(checks)


def check_model_path(cls: str, value: Any) -> None:
    """ValueError naming `cls`.model when `value` can only be a path (it starts with "/", "." or "~": no zoo name or
    hub id does) and names no directory; the rest of what a model may be is decided when it loads (`models.load`)."""
    if isinstance(value, str) and value.startswith(("/", ".", "~")) and not Path(value).expanduser().is_dir():
        raise ValueError(f"{cls}.model: {value!r} is not a zoo name (a path: no zoo name or hub id starts with '/', "
                         f"'.' or '~') and no directory exists at {Path(value).expanduser()}")


def check_values(overrides: Mapping[str, Mapping[str, Any]]) -> None:
    """Run `config_checks` of each method's config ({"es": ..., "grpo": ...}, `cli_settings.train_overrides`) on the
    fields set there, and `check_model_path` on a model; the first failure is its config's one-line ValueError."""
    for method, values in overrides.items():
        module, cls = CONFIGS[method]
        config = type(cls, (), dict(values))()  # a stand-in named as the config: the messages name it
        for check in config_checks(module, cls):
            check.run(config, values)
        check_model_path(cls, values.get("model"))
