"""A verifier's identity is its code (`tasks.task_version`): what a task class's methods can reach, hashed.

`class_digest(cls)` is a sha256 over, for every class of `cls`'s type outside this package and the standard library
(`user_classes`): its qualified name and its module's source (else the class's source, else, for a class typed
into a notebook or built by `exec`, its methods' code and plain attributes: `_class_source`). Then, only when the
methods reach outside the class's own module, over what they reach (`_Reach`), walked through the globals each
method reads (names in its code, nested code included), closures and defaults, and onwards through what those read:
  - a function or class of another module: its source (else its code), and what it reads in turn;
  - a module outside the standard library: an installed package's "name==version" (this package's own version for
    `esreason_lib`), else (a local helper module) its source and what its globals reach;
  - a value: its type as a class, and its repr (a compiled pattern: its pattern and flags);
  - for a class without source (notebook, `exec`), the plain values and functions of its own module it reads too.
The standard library is never hashed. A task whose methods read only its own module keeps the digest it had before
these components existed. `Unreadable` names what cannot be hashed (an object whose repr is an address, a local
module without source): such a task's runs are never reused (`task_version`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import inspect
import re
import sys
import types
from functools import lru_cache

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class Unreadable(ValueError):
    """A task's code reaches something whose content cannot be hashed."""


def _top(module: str | None) -> str:
    return (module or "").split(".")[0]


def standard(module: str | None) -> bool:
    """Whether `module` belongs to the standard library (or is a built-in module)."""
    return _top(module) in sys.stdlib_module_names or _top(module) in ("builtins", "__future__")


def user_classes(cls: type) -> list[type]:
    """The classes of `cls`'s method resolution order that are neither this package's nor the standard library's
    (a class built by `exec` without a `__name__` says it is from `builtins`: it counts, unless it is `object`)."""
    return [k for k in cls.__mro__ if k is not object and not _top(k.__module__) == "esreason_lib" and
            not (standard(k.__module__) and getattr(sys.modules.get(k.__module__), k.__qualname__, None) is k)]


def _code_digest(code: types.CodeType) -> bytes:
    """A function's byte code, names and constants (nested code objects included), without file names or line
    numbers: what it computes, wherever it was defined."""
    consts = [_code_digest(c) if isinstance(c, types.CodeType) else repr(c).encode() for c in code.co_consts]
    return b"|".join([code.co_code, repr(code.co_names).encode(), *consts])


def _source(obj) -> bytes | None:
    try:
        return inspect.getsource(obj).encode()
    except (OSError, TypeError):
        return None


def _class_source(cls: type) -> bytes:
    """The source of `cls`'s module (helpers the verifier calls included), else of the class itself, else (a class
    typed into a notebook or a REPL, whose source Python cannot find) its methods' code and plain attributes."""
    for obj in (sys.modules.get(cls.__module__), cls):
        if (source := _source(obj)) is not None:
            return source
    parts = []
    for key, value in sorted(vars(cls).items()):
        func = getattr(value, "__func__", value)  # staticmethod / classmethod
        if isinstance(func, types.FunctionType):
            parts.append(key.encode() + b"=" + _code_digest(func.__code__))
        elif isinstance(value, (str, int, float, bool, tuple, type(None))):
            parts.append(f"{key}={value!r}".encode())
    return b"\n".join(parts)


@lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def package_version(module: str) -> str | None:
    """"name==version" of the installed distribution that provides `module`, or None (a local module)."""
    if _top(module) == "esreason_lib":
        from esreason_lib.version import __version__  # noqa: PLC0415 (the package's own version, lazily)

        return f"esreason_lib=={__version__}"
    for dist in _distributions().get(_top(module), []):
        try:
            return f"{dist}=={importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _names(code: types.CodeType) -> set[str]:
    """Every name a code object (nested ones included) reads as a global or attribute."""
    out = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= _names(const)
    return out


class _Reach:
    """What the methods of a task's classes reach outside their own module (`home`), as sorted components."""

    def __init__(self, home: set[str], sourced: bool):
        self.home, self.sourced = home, sourced  # sourced: the home modules' source is already hashed
        self.parts: set[bytes] = set()
        self.seen: set[int] = set()

    def covered(self, module: str | None) -> bool:
        return self.sourced and module in self.home

    def function(self, func: types.FunctionType, own: bool = False) -> None:
        """Add a function (`own`: a method of the task's classes, hashed with them) and walk what it reads."""
        if id(func) in self.seen:
            return
        self.seen.add(id(func))
        module = func.__module__ or "builtins"  # `exec` without a __name__
        if module not in self.home:
            if standard(module):
                return
            if (version := package_version(module)) is not None:
                self.parts.add(version.encode())
                return
            self.parts.add(f"{module}.{func.__qualname__}=".encode() + (_source(func) or _code_digest(func.__code__)))
        elif not own and not self.sourced:  # a helper typed beside a notebook class
            self.parts.add(f"{module}.{func.__qualname__}=".encode() + _code_digest(func.__code__))
        for name in sorted(_names(func.__code__) & set(func.__globals__)):
            self.value(func.__globals__[name], module, name)
        cells = [c.cell_contents for c in func.__closure__ or () if c.cell_contents is not func]
        for i, value in enumerate([*cells, *(func.__defaults__ or ()), *(func.__kwdefaults__ or {}).values()]):
            self.value(value, module, f"{func.__qualname__}#{i}")

    def klass(self, cls: type) -> None:
        """Add a class of another module (a package's: its version; a local one: its source) and walk its methods."""
        if id(cls) in self.seen:
            return
        self.seen.add(id(cls))
        if cls.__module__ not in self.home:
            if standard(cls.__module__) or package_version(cls.__module__) is not None:
                return self.module(cls.__module__)
            self.parts.add(f"{cls.__module__}.{cls.__qualname__}=".encode() + _class_source(cls))
        for value in vars(cls).values():
            func = getattr(value, "__func__", value)
            if isinstance(func, types.FunctionType):
                self.function(func)
        return None

    def module(self, name: str) -> None:
        """Add a module: nothing for the standard library, a package's version, else a local module's source and
        what its globals from elsewhere reach."""
        if standard(name) or name in self.home or ("module", name) in self.seen:
            return
        self.seen.add(("module", name))
        if (version := package_version(name)) is not None:
            self.parts.add(version.encode())
            return
        module = sys.modules.get(name)
        source = _source(module) if module is not None else None
        if source is None:
            raise Unreadable(f"the module {name!r} has no source to hash")
        self.parts.add(f"{name}=".encode() + source)
        for key, value in sorted(vars(module).items()):  # its imports (what it defines is in its source)
            if isinstance(value, (types.ModuleType, types.FunctionType, type)) and getattr(
                    value, "__module__", None) != name:
                self.value(value, name, key)

    def value(self, value, where: str, name: str) -> None:
        """Add what `value` (read as `name` by code of module `where`) brings to the identity."""
        if isinstance(value, types.ModuleType):
            return self.module(value.__name__)
        if isinstance(value, (staticmethod, classmethod, types.MethodType)):
            return self.value(value.__func__, where, name)
        if isinstance(value, types.FunctionType):
            return self.function(value)
        if isinstance(value, type):
            return self.klass(value)
        if isinstance(value, functools.partial):
            for i, part in enumerate([value.func, *value.args, *value.keywords.values()]):
                self.value(part, where, f"{name}#{i}")
            return None
        if isinstance(value, types.BuiltinFunctionType):
            return self.module(value.__module__ or "builtins")
        self.klass(type(value))
        if self.covered(where):
            return None  # a value of a module whose source is hashed
        text = f"re.compile({value.pattern!r}, {value.flags})" if isinstance(value, re.Pattern) else repr(value)
        if _ADDRESS.search(text):
            raise Unreadable(f"{where}.{name} is a {type(value).__name__} whose repr is its address")
        self.parts.add(f"{where}.{name}={text}".encode())
        return None


def class_digest(cls: type) -> str:
    """The sha256 (hex) of `cls`'s code and what its methods reach (module docstring); `Unreadable` naming what
    cannot be hashed."""
    classes = user_classes(cls)
    if not classes:  # e.g. a SimpleNamespace standing in for a task: never the digest of nothing
        raise Unreadable(f"{cls.__module__}.{cls.__qualname__} holds no code of its own to hash")
    home = {k.__module__ for k in classes}
    digest = hashlib.sha256()
    sourced = True
    for klass in classes:
        digest.update(f"{klass.__module__}.{klass.__qualname__}\n".encode() + _class_source(klass))
        sourced = sourced and _source(sys.modules.get(klass.__module__)) is not None
    reach = _Reach(home, sourced)
    for klass in classes:
        for value in vars(klass).values():
            func = getattr(value, "__func__", value)
            if isinstance(func, types.FunctionType):
                reach.function(func, own=True)
    for part in sorted(reach.parts):
        digest.update(b"\0" + part)
    return digest.hexdigest()
