"""docs/design.md's module map lists every source file under crates/*/src,
and names no file that does not exist.

The map is the first ```text block after "## Module map": a crate line
starts at column 0 with `crates/<name>`, and each of its files follows on a
line of its own, indented three spaces, as a path relative to that crate's
src/ (`lib.rs`, `text/mod.rs`), then at least two spaces and what the file
owns."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"

CRATE_LINE = re.compile(r"^crates/([A-Za-z0-9_-]+)(\s|$)")
FILE_LINE = re.compile(r"^   (\S+\.rs)(\s{2,}\S.*)?$")


def module_map():
    """The map's files as repository paths, with the line each is on."""
    lines = DESIGN.read_text(encoding="utf-8").splitlines()
    start = lines.index("## Module map")
    begin = next(i for i in range(start, len(lines)) if lines[i].startswith("```text"))
    end = next(i for i in range(begin + 1, len(lines)) if lines[i].startswith("```"))
    crate, files, problems = None, {}, []
    for n in range(begin + 1, end):
        line = lines[n]
        if m := CRATE_LINE.match(line):
            crate = m.group(1)
        elif m := FILE_LINE.match(line):
            if crate is None:
                problems.append(f"design.md:{n + 1}: a file before any crate line: {line!r}")
                continue
            if not m.group(2):
                problems.append(f"design.md:{n + 1}: {m.group(1)} says nothing of what it owns")
            path = f"crates/{crate}/src/{m.group(1)}"
            if path in files:
                problems.append(f"design.md:{n + 1}: {path} listed twice (also line {files[path]})")
            files[path] = n + 1
        elif line.strip() and ".rs" in line:
            problems.append(f"design.md:{n + 1}: not in the map's format: {line!r}")
    return files, problems


def source_files():
    return {p.relative_to(ROOT).as_posix() for p in ROOT.glob("crates/*/src/**/*.rs")}


def test_the_map_is_well_formed():
    _, problems = module_map()
    assert not problems, "\n".join(problems)


def test_every_source_file_is_in_the_map():
    listed, _ = module_map()
    missing = sorted(source_files() - set(listed))
    assert not missing, "docs/design.md's module map misses:\n" + "\n".join(missing)


def test_the_map_names_only_files_that_exist():
    listed, _ = module_map()
    stale = sorted(f"{p} (design.md:{n})" for p, n in listed.items() if p not in source_files())
    assert not stale, "docs/design.md's module map names files that do not exist:\n" + "\n".join(stale)
