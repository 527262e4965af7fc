"""Holds the code to docs/design.md's layer table ("Layers: one folder, one library, ...").

For every row of the table, and every .h/.cc file in its folder:
  - each `#include "x/..."` of another project folder names a folder in the row's "depends on"
    (the public headers, `cumulus/...`, may be included from anywhere);
  - each `namespace cumulus::y` it opens is the row's namespace, or (to forward-declare a type)
    the namespace of a folder it depends on; plain `namespace cumulus` is where a library
    implements the public headers' types that it owns;
and the row's test binaries are built by some tests/**/CMakeLists.txt. A failure names the file,
the line and the row, so that either the code or the table is put right.

Run: python3 tests/layering_test.py [repository root]
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else __file__).resolve()
if ROOT.is_file():
    ROOT = ROOT.parent.parent
TABLE_HEADING = "## Layers: one folder, one library, one namespace, one test binary"


def rows():
    """(folder, namespace, tests, depends-on folders) for each row of the table."""
    text = (ROOT / "docs" / "design.md").read_text()
    start = text.index(TABLE_HEADING)
    lines = text[start:].splitlines()[1:]
    table = []
    for line in lines:
        if not line.startswith("|"):
            if table:
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] in ("folder", "---"):
            continue
        folder = re.match(r"`([a-z_]+)/`", cells[0]).group(1)
        namespace = re.match(r"`([a-z_:]+)`", cells[2]).group(1)
        tests = re.findall(r"`([a-z_]+_test)", cells[3])
        depends = re.findall(r"`([a-z_]+)/`", cells[4])
        table.append((folder, namespace, tests, set(depends)))
    if not table:
        sys.exit(f"docs/design.md: no table under '{TABLE_HEADING}'")
    return table


def main():
    table = rows()
    folders = {folder for folder, _, _, _ in table}
    namespace_of = {folder: ns for folder, ns, _, _ in table}
    test_binaries = set()
    for cmake in (ROOT / "tests").glob("**/CMakeLists.txt"):
        text = cmake.read_text()
        test_binaries |= set(re.findall(r"cumulus_test\(NAME (\w+)", text))
        test_binaries |= set(re.findall(r"add_test\(NAME (\w+)\.", text))
    problems = []
    checked = 0
    for folder, namespace, tests, depends in table:
        for test in tests:
            if test not in test_binaries:
                problems.append(f"row {folder}/: no tests/*/CMakeLists.txt builds {test}")
        allowed_ns = {namespace} | {namespace_of[d] for d in depends}
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".h", ".cc") or "gen" in path.parts:
                continue
            checked += 1
            rel = path.relative_to(ROOT)
            for number, line in enumerate(path.read_text().splitlines(), 1):
                include = re.match(r'#include "([a-z_]+)/', line)
                if include:
                    target = include.group(1)
                    if target in folders and target != folder and target not in depends:
                        problems.append(
                            f"{rel}:{number}: includes {target}/, which is not in row "
                            f"{folder}/'s \"depends on\" ({', '.join(sorted(depends)) or 'none'})")
                opened = re.match(r"namespace (cumulus(?:::[a-z_]+)*) \{", line)
                if opened and folder != "proto":
                    ns = opened.group(1)
                    top = "::".join(ns.split("::")[:2])
                    if ns != "cumulus" and top not in allowed_ns and ns != "cumulus::testing":
                        problems.append(f"{rel}:{number}: opens {ns}, but row {folder}/'s "
                                        f"namespace is {namespace}")
    for problem in problems:
        print(problem)
    print(f"{checked} files in {len(table)} folders checked against docs/design.md: "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
