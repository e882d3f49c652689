"""Write (or check) the module map in docs/modules.md: every module of esreason_lib with the first sentence of its
docstring, generated from the code so that it cannot go stale (`tests/test_docs.py` checks it).

    python scripts/module_map.py            # print the map
    python scripts/module_map.py --write    # rewrite the block between the markers in docs/modules.md
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "esreason_lib"
DOC = ROOT / "docs" / "modules.md"
START, END = "<!-- module-map:start -->", "<!-- module-map:end -->"


def first_sentence(text: str | None) -> str:
    """The docstring's first sentence (up to the first period followed by a space or the end of its paragraph)."""
    paragraph = " ".join((text or "").strip().split("\n\n")[0].split())
    match = re.search(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)\.(\s|$)", paragraph)
    return paragraph[: match.start() + 1] if match else paragraph


def module_map() -> str:
    """A markdown table, one row per module (packages first within each folder), path and docstring sentence."""
    rows = ["| module | what it holds |", "|---|---|"]
    def order(path: Path):
        return path.parent.relative_to(PACKAGE).parts, path.name != "__init__.py", path.name

    for path in sorted(PACKAGE.rglob("*.py"), key=order):
        rel = path.relative_to(ROOT).as_posix()
        doc = ast.get_docstring(ast.parse(path.read_text()))
        sentence = first_sentence(doc).replace("|", r"\|")
        rows.append(f"| `{rel}` | {sentence} |")
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the block in docs/modules.md")
    args = parser.parse_args()
    table = module_map()
    if not args.write:
        print(table, end="")
        return
    text = DOC.read_text()
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    DOC.write_text(f"{head}{START}\n{table}{END}{tail}")


if __name__ == "__main__":
    main()
