"""The child side of `_sandbox.run_tests`: run as a script (`python -I -S _harness.py`), never imported.

It reads one JSON job `{"code", "setup", "probes", "limits"}` from stdin, sets the resource limits, then forks:
the parent stays as a supervisor that only waits (so that `getppid()` in the tested code is this supervisor, never
the caller), and the child confines itself, layer by layer, before it runs any model-written code:
  1. Landlock (Linux >= 5.13, unprivileged): no file may be written, created, removed, renamed or truncated
     outside the working directory, none read outside it and the standard library, nothing executed; with ABI >= 4
     no TCP bind/connect, with ABI >= 6 no signal to a process outside the sandbox and no abstract Unix socket;
  2. seccomp (x86_64 only): the syscalls that signal, trace or start processes, open sockets or leave the process
     group (kill, tgkill, ptrace, fork, vfork, execve, clone without CLONE_THREAD, socket, setsid, unshare, ...)
     fail with EPERM;
  3. an audit hook (any platform; bypassable, hence last): the same operations, ctypes and opening a path for
     writing outside the working directory raise PermissionError.
Then it executes the code and the setup code in one `__main__` namespace, evaluates each probe expression there
in order, and writes one JSON line `[index, encoded value]` per probe to `results.jsonl` (opened before the code
runs); a probe that raises, or whose value is no plain builtin value, ends the run. `encode` keeps exact types
only (int, float, complex, str, bytes, bool, None, list, tuple, dict, set, frozenset; never a subclass), so an
object with a forged `__eq__` cannot come back. Everything the code could write there is untrusted: the caller
decodes and judges it.
"""

import ctypes
import json
import os
import platform
import resource
import struct
import sys
import types

MAX_DEPTH = 64
"""Deepest nesting of containers a probe value may have."""
_FS_WRITE = sum(1 << bit for bit in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))  # write file, remove, make anything
_FS_READ = (1 << 2) | (1 << 3)
_FS_EXECUTE, _FS_REFER, _FS_TRUNCATE = 1 << 0, 1 << 13, 1 << 14
_DENIED_SYSCALLS_X86_64 = (62, 200, 234, 129, 297, 434, 424, 438,  # kill, tkill, tgkill, sigqueue, pidfd
                           101, 310, 311,  # ptrace, process_vm_readv/writev
                           57, 58, 59, 322,  # fork, vfork, execve, execveat
                           41, 53, 42, 49,  # socket, socketpair, connect, bind
                           112, 109, 272, 308,  # setsid, setpgid, unshare, setns
                           165, 166, 155, 161, 302, 425, 321, 298, 323, 250, 248, 249, 169)  # mount, ..., reboot
_CLONE, _CLONE3, _CLONE_THREAD = 56, 435, 0x10000


def _syscall(libc, *args) -> int:
    return libc.syscall(*(ctypes.c_long(a) if isinstance(a, int) else a for a in args))


def landlock(libc, cwd: str, readable: list) -> int:
    """Apply the Landlock rules (module docstring, layer 1); the ABI version applied, 0 when unavailable."""
    abi = _syscall(libc, 444, None, 0, 1)  # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    if abi < 1:
        return 0
    fs = _FS_WRITE | _FS_READ | _FS_EXECUTE | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    net = 3 if abi >= 4 else 0  # bind and connect TCP: no rule allows any port
    scoped = 3 if abi >= 6 else 0  # abstract Unix sockets and signals stay inside the sandbox
    attr = ctypes.create_string_buffer(struct.pack("QQQ", fs, net, scoped))
    ruleset = _syscall(libc, 444, attr, 24 if abi >= 6 else 16 if abi >= 4 else 8, 0)
    if ruleset < 0:
        return 0
    for path, access in [(cwd, fs & ~_FS_EXECUTE), *((p, _FS_READ) for p in readable)]:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        rule = ctypes.create_string_buffer(struct.pack("=Qi", access if os.path.isdir(path) else access & ~(1 << 3),
                                                       fd))
        _syscall(libc, 445, ruleset, 1, rule, 0)  # landlock_add_rule(..., LANDLOCK_RULE_PATH_BENEATH, ...)
        os.close(fd)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    ok = _syscall(libc, 446, ruleset, 0) == 0  # landlock_restrict_self
    os.close(ruleset)
    return abi if ok else 0


def seccomp(libc) -> bool:
    """Install the seccomp filter (module docstring, layer 2); whether it is in force."""
    if platform.machine() != "x86_64":
        return False
    errno_eperm, allow = 0x00050000 | 1, 0x7FFF0000

    def op(code, k, jt=0, jf=0):
        return struct.pack("HBBI", code, jt, jf, k)

    prog = [op(0x20, 4), op(0x15, 0xC000003E, 1, 0), op(0x06, 0x80000000),  # arch != x86_64: kill
            op(0x20, 0), op(0x35, 0x40000000, 0, 1), op(0x06, errno_eperm),  # x32 syscalls: EPERM
            op(0x15, _CLONE3, 0, 1), op(0x06, 0x00050000 | 38)]  # clone3: ENOSYS (glibc falls back to clone)
    for nr in _DENIED_SYSCALLS_X86_64:
        prog += [op(0x15, nr, 0, 1), op(0x06, errno_eperm)]
    prog += [op(0x15, _CLONE, 0, 3), op(0x20, 16), op(0x45, _CLONE_THREAD, 1, 0), op(0x06, errno_eperm),
             op(0x06, allow)]
    filters = ctypes.create_string_buffer(b"".join(prog))
    fprog = struct.pack("HxxxxxxP", len(prog), ctypes.addressof(filters))
    libc.prctl(38, 1, 0, 0, 0)
    return libc.prctl(22, 2, ctypes.c_char_p(fprog), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


_BLOCKED_EVENTS = frozenset({
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen", "os.kill",
    "os.killpg", "signal.pthread_kill", "socket.__new__", "socket.connect", "socket.bind", "ctypes.dlopen",
    "ctypes.dlsym", "ctypes.cdata", "ctypes.call_function"})
_PATH_EVENTS = frozenset({"os.remove", "os.rmdir", "os.rename", "os.truncate", "os.chmod", "os.chown", "os.link",
                          "os.symlink", "os.mkdir", "shutil.rmtree"})
"""Events allowed only when every path among their arguments lies in the working directory."""


def audit_hook(cwd: str):
    """The audit hook of layer 3."""
    inside, write_flags = cwd.rstrip("/") + "/", os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    realpath, fsdecode = os.path.realpath, os.fsdecode

    def check_paths(event, paths):
        for path in paths:
            if isinstance(path, (str, bytes)) and not realpath(fsdecode(path)).startswith(inside):
                raise PermissionError(f"{event} on {fsdecode(path)} is disabled in the test sandbox")

    def hook(event, args):
        if event in _BLOCKED_EVENTS:
            raise PermissionError(f"{event} is disabled in the test sandbox")
        if event in _PATH_EVENTS:
            check_paths(event, args)
        elif event == "open" and ((args[2] or 0) & write_flags or any(c in (args[1] or "") for c in "wax+")):
            check_paths(event, args[:1])

    return hook


def encode(value, depth: int = 0):
    """A JSON-able, type-tagged copy of a plain builtin value; ValueError for anything else (module docstring)."""
    kind = type(value)
    if depth > MAX_DEPTH:
        raise ValueError("nested too deeply")
    if value is None or kind is bool or kind is str:
        return ["n"] if value is None else ["b" if kind is bool else "s", value]
    if kind is int:
        return ["i", str(value)]
    if kind is float:
        return ["f", repr(value)]
    if kind is complex:
        return ["c", repr(value.real), repr(value.imag)]
    if kind is bytes:
        return ["y", value.hex()]
    if kind in (list, tuple, set, frozenset):
        return [{list: "l", tuple: "t", set: "S", frozenset: "F"}[kind], [encode(v, depth + 1) for v in value]]
    if kind is dict:
        return ["d", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]]
    raise ValueError(f"a {kind.__name__} is no plain value")


def main() -> None:
    job = json.loads(sys.stdin.readline())
    os.close(0)
    for which, value in ((resource.RLIMIT_AS, job["limits"]["memory"]), (resource.RLIMIT_CPU, job["limits"]["cpu"]),
                         (resource.RLIMIT_FSIZE, job["limits"]["fsize"]), (resource.RLIMIT_CORE, 0),
                         (resource.RLIMIT_NOFILE, 64)):
        resource.setrlimit(which, (value, value))
    if os.fork():  # the supervisor: the tested code's parent, which only waits for it
        os.wait()
        os._exit(0)
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))  # no process more (ignored for a real root)
    cwd, libc = os.getcwd(), ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    landlock(libc, cwd, [p for p in sys.path[1:] if p] + ["/dev/null", "/dev/urandom"])
    seccomp(libc)
    results = open("results.jsonl", "w", encoding="utf-8")
    sys.addaudithook(audit_hook(cwd))
    sys.modules["__main__"] = main_module = types.ModuleType("__main__")  # the tested code's, not this harness
    scope = main_module.__dict__
    exec(compile(job["code"], "solution.py", "exec"), scope)
    exec(compile(job["setup"], "setup.py", "exec"), scope)
    for i, probe in enumerate(job["probes"]):
        line = json.dumps([i, encode(eval(compile(probe, "tests.py", "eval"), scope))])
        results.write(line + "\n")
        results.flush()


if __name__ == "__main__":
    main()
