"""Write constraints/gpu.lock, every package of the GPU install pinned, from pip's resolution report of
constraints/gpu.txt (`make resolve-gpu` writes build/gpu-resolve.json; `make lock-gpu` runs both). The lock pins
what pip chose for the report's interpreter and platform (named in its header); `tests/test_gpu_lock.py` checks
that it agrees with constraints/gpu.txt.

    python scripts/gpu_lock.py [build/gpu-resolve.json]     # rewrite constraints/gpu.lock
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "constraints" / "gpu.lock"
PROJECT = "esreason"
"""This project's own distribution (installed editable beside the lock, never pinned in it)."""


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503: lower case, runs of -_. as one -)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_text(report: dict) -> str:
    """The lock file for pip's `--report` JSON: a header naming the interpreter and platform, then one
    `name==version` line per package pip would install (sorted by canonical name, this project left out)."""
    env = report["environment"]
    pins = sorted((canonical(i["metadata"]["name"]), i["metadata"]["version"]) for i in report["install"])
    header = [
        "# The GPU install, every package pinned: pip's resolution of constraints/gpu.txt for",
        f"# CPython {env['python_full_version']} on {env['sys_platform']} {env['platform_machine']} "
        f"(pip {report['pip_version']}).",
        "# Install: pip install -c constraints/gpu.lock -e \".[vllm,ray]\"   (docs/gpus.md)",
        "# Regenerate: make lock-gpu (pip install --dry-run --report, then scripts/gpu_lock.py).",
    ]
    return "\n".join(header + [f"{name}=={version}" for name, version in pins if name != PROJECT]) + "\n"


def read_pins(path: Path) -> dict[str, str]:
    """{canonical name: version} of the `name==version` lines of a requirements or constraints file (comments and
    blank lines skipped); ValueError naming the line for any other form."""
    pins = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;=]+)", line)
        if match is None:
            raise ValueError(f"{path}:{n}: {line!r} is not a name==version pin")
        pins[canonical(match[1])] = match[2]
    return pins


def main(argv=None) -> None:
    """Rewrite `LOCK` from the report at the optional path (default build/gpu-resolve.json)."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?", type=Path, default=ROOT / "build" / "gpu-resolve.json",
                        help="pip's --report JSON of constraints/gpu.txt (`make resolve-gpu` writes the default)")
    source = parser.parse_args(argv).report
    if not source.is_file():
        raise SystemExit(f"gpu_lock: no resolution report at {source}: run `make resolve-gpu` first")
    LOCK.write_text(lock_text(json.loads(source.read_text())))
    print(f"wrote {LOCK.relative_to(ROOT)} ({len(read_pins(LOCK))} packages) from {source}")


if __name__ == "__main__":
    main()
