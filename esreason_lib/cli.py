"""Command line: `python -m esreason_lib <command>` (also installed as `esreason`).

    pretrain NAME                      build a zoo model (reused when already built; a pretrained base is converted)
    relocate, export-results OUT, import-results OUT   the run store: rename after a move, bundle, unpack

The paper's harness adds its commands (train with the paper's presets, bases, reproduce, prefill, claims, summary,
compare-findings, power) from `esreason_lib/paper/cli.py`, which `COMMAND_MODULES` names by its import path: the
library never imports the harness; it loads the module by name when the parser is built, as a plugin. Each command
may carry a `check` that validates its input (fields, presets, paths) before anything heavy (torch, transformers) is
imported, so that bad input is one error line within about a second.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from pathlib import Path
from typing import Sequence

from esreason_lib.cli_help import EXAMPLES, OneLineParser, presets_help
from esreason_lib.threads import choose_threads, use_threads

COMMAND_MODULES = ("esreason_lib.paper.cli",)
"""Modules (import paths) that add commands to the parser: each has `add_commands(subparsers)` and
`one_line_errors()` (the exception classes its commands raise for bad input or a failed step: one line on stderr)."""


def existing_dir(path: str | None, what: str) -> None:
    """ValueError naming `what` and `path` when `path` is given and is not a directory (before any work)."""
    if path is not None and not Path(path).is_dir():
        raise ValueError(f"{what} {path!r} is not a directory" + (" (it is a file)" if Path(path).exists() else ""))


def _pretrain(args) -> int:
    from esreason_lib.models.zoo import PRETRAINED, is_zoo_name, zoo_names

    if not is_zoo_name(args.name):
        raise ValueError(f"unknown zoo model {args.name!r}; choices: {zoo_names()} (trained here, or a pretrained "
                         "base converted from its package's GGUF)")
    if args.name in PRETRAINED:
        from esreason_lib.models.pretrained import convert

        print(convert(args.name))
    else:
        from esreason_lib.models.pretrain import pretrain

        print(pretrain(args.name, progress=True))
    return 0


def _relocate(args) -> int:
    from esreason_lib.store.relocate import relocate

    renamed = relocate(args.home)
    print(f"{len(renamed)} run directories renamed to their portable identity"
          + "".join(f"\n  {old} -> {new}" for old, new in renamed.items()))
    return 0


def _export_results(args) -> int:
    from esreason_lib.store.bundle import export_results

    path = export_results(args.out, args.home)
    print(f"{path} ({path.stat().st_size / 2**20:.1f} MiB)")
    return 0


def _import_results(args) -> int:
    from esreason_lib.store.bundle import import_results

    added = import_results(args.out, args.home, require_digest=args.require_sha256)
    print(f"{added} run directories imported from {args.out}")
    return 0


def not_a_file(path: str | None, what: str) -> None:
    """ValueError naming `what` and `path` when `path` is given and is an existing file (a folder is expected, made
    when missing)."""
    if path is not None and Path(path).exists() and not Path(path).is_dir():
        raise ValueError(f"{what} {path!r} is a file, not a folder")


def _check_relocate(args) -> None:
    existing_dir(args.home, "--home")


def _check_import(args) -> None:
    not_a_file(args.home, "--home")
    existing_dir(args.out, "import-results: the bundle's folder")
    if not (Path(args.out) / "runs.tar.xz").is_file():
        raise ValueError(f"import-results: no result bundle at {Path(args.out) / 'runs.tar.xz'}")


def _check_export(args) -> None:
    not_a_file(args.home, "--home")
    not_a_file(args.out, "export-results: the bundle's folder")


def add_store_commands(sub) -> None:
    """The library's own commands: pretrain, relocate, export-results, import-results."""
    pre = sub.add_parser("pretrain", help="build a zoo model (a pretrained base: convert it from its package's GGUF)")
    pre.add_argument("name")
    pre.set_defaults(func=_pretrain)
    rl = sub.add_parser("relocate", help="after moving or copying a run store: rename its runs to their portable "
                        "identity, so that the runs that read other runs are found there")
    rl.add_argument("--home", default=None, help="the run store (default $ESREASON_HOME or <repo>/runs)")
    rl.set_defaults(func=_relocate, check=_check_relocate)
    ex = sub.add_parser("export-results", help="write the run store's tables (no weights) to OUT/runs.tar.xz, "
                        "for `make figures` on a fresh clone")
    ex.add_argument("out", help="folder of the bundle, e.g. papers/results/powered")
    ex.add_argument("--home", default=None, help="the run store (default $ESREASON_HOME or <repo>/runs)")
    ex.set_defaults(func=_export_results, check=_check_export)
    im = sub.add_parser("import-results", help="unpack OUT/runs.tar.xz into the run store (never overwrites a run)")
    im.add_argument("out", help="folder of the bundle, e.g. papers/results/powered")
    im.add_argument("--home", default=None, help="the run store (default $ESREASON_HOME or <repo>/runs)")
    im.add_argument("--require-sha256", action="store_true", help="refuse a bundle that does not match the "
                    "runs.tar.xz.sha256 beside it (make figures)")
    im.set_defaults(func=_import_results, check=_check_import)


def command_modules() -> list:
    """The modules of `COMMAND_MODULES`, imported (each light: its commands import their work when they run)."""
    return [importlib.import_module(name) for name in COMMAND_MODULES]


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: the library's commands and those of `COMMAND_MODULES`."""
    parser = OneLineParser(prog="esreason", description=__doc__.split("\n")[0], epilog=f"{EXAMPLES}\n\n"
                           f"{presets_help()}", formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", default=None, help="torch / OpenMP threads: a number or 'auto' (default: "
                        "$ESREASON_THREADS, else $OMP_NUM_THREADS, else auto: the usable cores the load leaves idle)")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in command_modules():
        module.add_commands(sub)
    add_store_commands(sub)
    return parser


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"esreason: warning: {message}", file=sys.stderr)


def one_line_errors() -> tuple[type, ...]:
    """The exceptions `main` prints as one line: bad input (ValueError), a missing extra (ImportError), a result
    that `$ESREASON_STORED_ONLY` forbids computing (`MissingResult`), a native kernel that cannot be built or
    trusted (`KernelBuildError`), and those of `COMMAND_MODULES` (a notebook that raised)."""
    from esreason_lib.models.native import KernelBuildError
    from esreason_lib.store.runs import MissingResult

    extra = tuple(e for module in command_modules() for e in module.one_line_errors())
    return (ValueError, ImportError, MissingResult, KernelBuildError, *extra)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line. Bad input, a failed step of `one_line_errors`, and file-system or start-up failures
    (OSError: read-only or full disk, a path that is a file, Ray not starting in time; safetensors' own write
    errors) are one `esreason: error:` line on stderr and exit status 2, never a traceback. Nothing heavy (torch,
    transformers) is imported before the arguments parse and the command's `check` passes, so `--help`, a bad
    command line, a misspelt `--set` field, an unknown preset or a missing path answer at once."""
    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "check", None):
            args.check(args)
    except ValueError as err:
        print(f"esreason: error: {err}", file=sys.stderr)
        return 2
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            use_threads(choose_threads(getattr(args, "threads", None)))
            return args.func(args)
        except OSError as err:
            where = f": {err.filename}" if err.filename else ""
            why = err.strerror or (os.strerror(err.errno) if err.errno else str(err))
            print(f"esreason: error: {why}{where}", file=sys.stderr)
        except Exception as err:
            from safetensors import SafetensorError

            if isinstance(err, SafetensorError):  # e.g. a full disk while safetensors writes the final model
                print(f"esreason: error: saving a model failed: {str(err).splitlines()[0]}", file=sys.stderr)
            elif isinstance(err, one_line_errors()):
                print(f"esreason: error: {err}", file=sys.stderr)
            else:
                raise
        return 2
