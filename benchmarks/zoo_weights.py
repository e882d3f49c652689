"""Rebuild the shipped zoo weights (`zoo/`) and compare their hashes, or ship fresh ones (a script, not a test).

    .venv/bin/python benchmarks/zoo_weights.py                      # rebuild every shipped model, compare hashes
    .venv/bin/python benchmarks/zoo_weights.py qwen2-m              # only these
    .venv/bin/python benchmarks/zoo_weights.py --ship qwen2-m qwen2-l   # pretrain and (re)write their entries
    .venv/bin/python benchmarks/zoo_weights.py --record qwen2-s     # rebuild, record the hash for this CPU platform

Each rebuild pretrains from scratch into a temporary run store at one thread (the weights do not depend on the
machine's load; the printed seconds do, and so does the CPU platform: `pretrain.cpu_platform`). Exits 1 when a
rebuild's weights_sha256 differs from the one expected on this platform (`pretrain.rebuild_sha256`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile

from esreason_lib.models.pretrain import (
    SHIPPED_ZOO,
    cpu_platform,
    pretrain,
    rebuild_sha256,
    ship,
    shipped_manifest,
    weights_sha256,
)
from esreason_lib.paths import run_store_root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="zoo names (default: every shipped model)")
    parser.add_argument("--ship", action="store_true", help="pretrain into the run store and ship the result")
    parser.add_argument("--record", action="store_true",
                        help="record each rebuild's hash as the expected one on this CPU platform")
    args = parser.parse_args(argv)
    shipped = shipped_manifest()
    names = args.names or sorted(shipped)
    if args.ship:
        for name in names:
            record = ship(name, home=run_store_root())
            print(f"{name}: shipped {record['weights_sha256']} ({record['steps_done']} steps, "
                  f"{record['seconds']} s, final loss {record['final_loss']:.4f})")
        return 0
    missing = [n for n in names if n not in shipped]
    if missing:
        print(f"esreason: error: not shipped: {missing} (shipped: {sorted(shipped)})", file=sys.stderr)
        return 2
    failed = 0
    with tempfile.TemporaryDirectory() as home:
        for name in names:
            digest = weights_sha256(pretrain(name, home=home, shipped=False))
            if args.record:
                shipped[name].setdefault("rebuilds", {})[cpu_platform()] = digest
                (SHIPPED_ZOO / "manifest.json").write_text(json.dumps(shipped, indent=2, sort_keys=True) + "\n")
                print(f"{name}: recorded {digest} for {cpu_platform()}")
                continue
            same = digest == rebuild_sha256(name)
            failed += not same
            print(f"{name}: {'matches' if same else 'DIFFERS from'} the hash expected on {cpu_platform()} ({digest})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
