"""The native kernel's cache believes nothing (issue 35): a planted, truncated or emptied library is rebuilt
before anything loads it, a library that computes nothing is caught by the first-call self-check and removed, a
folder others can write is refused, the compiler runs under a time limit, every build failure is one line naming
the fallback backend, and build folders of killed builds are collected."""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

from esreason_lib.models import native

D = 16
NO_OP = "int rotary_attention(void) { return 0; }\n"
"""A library with the kernel's symbol that computes nothing (the output stays uninitialised)."""


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    """A private, empty kernel folder; the per-process cache of loaded libraries cleared around the test."""
    folder = tmp_path / "kernels"
    monkeypatch.setenv("ESREASON_KERNELS", str(folder))
    native.library.cache_clear()
    yield folder
    native.library.cache_clear()


def _built(folder):
    (path,) = folder.glob(f"rotary_attention_d{D}_*.so")
    return path


def _compile_c(source: str, out, tmp_path) -> None:
    out.unlink(missing_ok=True)
    src = tmp_path / "planted.c"
    src.write_text(source)
    subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(out)], check=True)


def _script(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def _one_line(err) -> str:
    message = str(err.value)
    assert "\n" not in message and "backend 'fast'" in message
    return message


def test_a_built_library_records_its_hash_and_passes_its_self_check(kernels):
    native.library(D)
    path = _built(kernels)
    assert native.record_of(path).read_text().strip() == native.sha256_file(path)
    assert native.is_intact(path)
    assert native.self_check(native.library(D), D) is None
    assert oct(kernels.stat().st_mode & 0o777) == "0o700"
    assert not list(kernels.glob(".build-*"))  # the build folder is gone


@pytest.mark.parametrize("damage", ["truncated", "empty", "planted", "no record"])
def test_a_library_that_does_not_match_its_record_is_rebuilt_unloaded(kernels, tmp_path, damage):
    cc, path = native.cache_entry(D)
    native.build(cc, D, path)  # built, never loaded by this process (dlopen would reuse a loaded path)
    good = path.read_bytes()
    marker = tmp_path / "constructor-ran"
    if damage == "truncated":
        path.write_bytes(good[:4096])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "planted":  # a library whose constructor runs at load, at the publicly computable key
        _compile_c(f'#include <stdio.h>\n__attribute__((constructor)) static void run(void) '
                   f'{{ fclose(fopen("{marker}", "w")); }}\n' + NO_OP, path, tmp_path)
    else:
        native.record_of(path).unlink()
    assert not native.is_intact(path)
    native.library(D)
    assert native.is_intact(path) and path.read_bytes() == good
    assert not marker.exists()  # the planted library never ran


def test_a_library_that_computes_nothing_fails_its_self_check_and_is_removed(kernels, tmp_path):
    """Even with a record that matches it (forged, or a miscompiled build), a library that returns without
    computing never serves a run: the first call differs from the torch definition."""
    _, path = native.cache_entry(D)
    _compile_c(NO_OP, path, tmp_path)
    native.record_of(path).write_text(native.sha256_file(path) + "\n")
    assert native.is_intact(path)
    with pytest.raises(native.KernelBuildError, match="returned a wrong output .*removed") as err:
        native.library(D)
    _one_line(err)
    assert not path.exists() and not native.record_of(path).exists()


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_a_kernel_folder_others_can_write_is_refused(kernels, mode):
    kernels.mkdir()
    kernels.chmod(mode)
    with pytest.raises(native.KernelBuildError, match="group and others cannot write") as err:
        native.library(D)
    _one_line(err)
    assert not list(kernels.iterdir())


def test_a_compiler_that_hangs_is_stopped(kernels, tmp_path, monkeypatch):
    monkeypatch.setattr(native, "COMPILER_TIMEOUT_S", 0.5)
    monkeypatch.setenv("CC", _script(tmp_path, "hang-cc", "exec sleep 600\n"))
    with pytest.raises(native.KernelBuildError, match=r"--version did not finish within 0.5 s") as err:
        native.library(D)
    _one_line(err)
    # one that answers --version but hangs in the build (its child holds the pipes: the group is killed)
    monkeypatch.setenv("CC", _script(tmp_path, "slow-cc", '[ "$1" = --version ] && { echo slow 1; exit 0; }\n'
                                                          "sleep 600 & wait\n"))
    with pytest.raises(native.KernelBuildError, match="building it with .*slow-cc did not finish") as err:
        native.library(D)
    _one_line(err)
    assert not list(kernels.glob(".build-*"))


@pytest.mark.parametrize("cc, match", [("no-such-cc", "needs a C compiler"),
                                       ("false", r"false --version failed \(exit status 1\)"),
                                       ("failing", r"failed \(exit status 1\): fatal error: out of memory"),
                                       ("silent", "reported success but wrote no library")])
def test_build_failures_are_one_line_naming_the_fallback(kernels, tmp_path, monkeypatch, cc, match):
    if cc == "failing":
        cc = _script(tmp_path, cc, '[ "$1" = --version ] && { echo f 1; exit 0; }\n'
                                   'echo "line one" >&2; echo "fatal error: out of memory" >&2; exit 1\n')
    elif cc == "silent":
        cc = _script(tmp_path, cc, "echo s 1\n")
    monkeypatch.setenv("CC", cc)
    with pytest.raises(native.KernelBuildError, match=match) as err:
        native.library(D)
    _one_line(err)
    assert not list(kernels.glob("*.so")) and not list(kernels.glob(".build-*"))


def test_a_full_disk_is_one_line_and_leaves_no_build_folder(kernels, monkeypatch):
    def full(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(native, "atomic_write_bytes", full)
    with pytest.raises(native.KernelBuildError, match="No space left on device") as err:
        native.library(D)
    _one_line(err)
    assert not list(kernels.glob(".build-*"))
    monkeypatch.undo()
    monkeypatch.setenv("ESREASON_KERNELS", str(kernels))
    native.library.cache_clear()
    native.library(D)  # the library without a record is rebuilt
    assert native.is_intact(_built(kernels))


def test_build_folders_of_killed_builds_are_collected(kernels):
    kernels.mkdir(mode=0o700)
    dead = kernels / ".build-999999999-x"  # above any pid_max: no such process
    live = kernels / f".build-{os.getpid()}-y"  # a build in progress (this process)
    for folder in (dead, live):
        folder.mkdir()
        (folder / "half.so").write_bytes(b"\x7fELF")
    old = kernels / f".build-{os.getpid()}-z"
    old.mkdir()
    os.utime(old, (0, 0))  # older than STALE_BUILD_S
    native.collect_stale(kernels, ".build-", native.STALE_BUILD_S)
    assert sorted(p.name for p in kernels.iterdir()) == [live.name]


def test_the_cli_prints_a_kernel_failure_in_one_line(monkeypatch, capsys):
    from esreason_lib import cli

    def fail(args):
        raise native.KernelBuildError("building it with cc failed (exit status 1): error: x")

    monkeypatch.setattr(cli, "build_parser", lambda: _Parser(fail))
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("esreason: error: native attention kernel:")


class _Parser:
    """A stand-in parser whose one command is `func`."""

    def __init__(self, func):
        self.func = func

    def parse_args(self, argv):
        return type("Args", (), {"func": staticmethod(self.func)})()
