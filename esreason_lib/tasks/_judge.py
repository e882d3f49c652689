"""The judge of `_sandbox.run_tests`: the assert lines split into probes and judges, the probes' values decoded and
each judge evaluated on them. Standard library only: `_sandbox` imports it, and runs it as a script (`python -I
-S _judge.py`) in a child bounded by the run's `timeout_s`, so that judging values that are costly to compare (a
set of 30,000 ints that collide in their hash: quadratic) stops at the limit like the tested code does. The script
reads one JSON object {"tests": [assert lines], "lines": [results lines]} from stdin and prints {"failure": ...}:
null when every probe reported a value and every judge holds, else what failed first.
"""

import ast
import builtins
import importlib
import json
import sys

_BUILTINS = frozenset(dir(builtins))
_BINDS = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.NamedExpr)
"""Nodes that bind names of their own: a probe takes them whole."""


def split_assert(line: str) -> tuple[ast.Expression | None, list[str]]:
    """(judge, probe sources) of one test line: for `assert E`, E with every smallest sub-expression that needs
    the tested code replaced by a placeholder `_probe_<k>` (k counting from 0 in this line), as a compiled-ready
    Expression; for any other statement, (None, []) (it runs in the child as setup). SyntaxError when `line` is not
    Python. A name needs the tested code when it is called and is no builtin, or used otherwise and is neither a
    builtin nor a standard-library module."""
    tree = ast.parse(line)
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return None, []
    test = tree.body[0].test
    called = {n.func.id for n in ast.walk(test) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    user = {n.id for n in ast.walk(test) if isinstance(n, ast.Name) and n.id not in _BUILTINS and
            (n.id in called or n.id not in sys.stdlib_module_names)}
    probes: list[str] = []

    def needs_code(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in user for n in ast.walk(node))

    class Split(ast.NodeTransformer):
        def visit(self, node):
            if not needs_code(node):
                return node
            if isinstance(node, (ast.Name, *_BINDS)) or (isinstance(node, ast.Call) and needs_code(node.func)):
                probes.append(ast.unparse(node))
                return ast.copy_location(ast.Name(id=f"_probe_{len(probes) - 1}", ctx=ast.Load()), node)
            return self.generic_visit(node)

    judge = ast.fix_missing_locations(ast.Expression(body=Split().visit(test)))
    return judge, probes


def decode(value, depth: int = 0):
    """The plain value a type-tagged JSON value (`_harness.encode`) stands for; ValueError on anything malformed."""
    if depth > 64 or not isinstance(value, list) or not value or not isinstance(value[0], str):
        raise ValueError("malformed probe value")
    tag, args = value[0], value[1:]
    if tag == "n" and not args:
        return None
    if len(args) == 1 and type(args[0]) is {"b": bool, "s": str}.get(tag):
        return args[0]
    if len(args) == 1 and isinstance(args[0], str) and tag in ("i", "f", "y"):
        return {"i": int, "f": float, "y": bytes.fromhex}[tag](args[0])
    if tag == "c" and len(args) == 2 and all(isinstance(a, str) for a in args):
        return complex(float(args[0]), float(args[1]))
    if len(args) == 1 and isinstance(args[0], list) and tag in ("l", "t", "S", "F"):
        return {"l": list, "t": tuple, "S": set, "F": frozenset}[tag](decode(v, depth + 1) for v in args[0])
    if tag == "d" and len(args) == 1 and isinstance(args[0], list) and all(
            isinstance(kv, list) and len(kv) == 2 for kv in args[0]):
        return {decode(k, depth + 1): decode(v, depth + 1) for k, v in args[0]}
    raise ValueError("malformed probe value")


def judge_holds(judge: ast.Expression, values: list) -> bool:
    """Whether `judge` holds with `_probe_<k>` = values[k], the real builtins and the standard-library modules it
    names (imported here: the tests' text is the dataset's, never the model's)."""
    scope = {"__builtins__": builtins}
    scope.update((f"_probe_{k}", v) for k, v in enumerate(values))
    for name in {n.id for n in ast.walk(judge) if isinstance(n, ast.Name)} - _BUILTINS - set(scope):
        scope[name] = importlib.import_module(name)
    return bool(eval(compile(judge, "tests.py", "eval"), scope))


def verdict(tests: list[str], lines: list[str]) -> str | None:
    """None when the results `lines` hold one plain value per probe of the assert lines `tests` (`split_assert`),
    in order, and every judge holds on them; else what failed first."""
    split = [(line, *split_assert(line)) for line in tests]
    values = []
    for k, line in enumerate(lines):
        try:
            index, encoded = json.loads(line)
            if index != k:
                return f"the results are out of order at probe {k}"
            values.append(decode(encoded))
        except Exception as err:  # noqa: BLE001 (anything the child wrote is untrusted)
            return f"probe {k}: unreadable value ({type(err).__name__})"
    if len(values) != sum(len(ps) for _, _, ps in split):
        return f"only {len(values)} of the probes reported a value (an exception, an exit or a refused value)"
    for line, judge, probes in split:
        mine, values = values[:len(probes)], values[len(probes):]
        try:
            if judge is not None and not judge_holds(judge, mine):
                return f"AssertionError: {line}"
        except Exception as err:  # noqa: BLE001 (a judge that raises on the reported values: a failed assert)
            return f"{type(err).__name__} in {line}: {err}"[:500]
    return None


if __name__ == "__main__":
    job = json.loads(sys.stdin.readline())
    print(json.dumps({"failure": verdict(job["tests"], job["lines"])}))
