"""docs/design.md's "Unsafe code" lists every source file with an `unsafe`
block, function or impl, crate by crate, and names no file without one.

The section's bullets read `- **<crate>**: ...` (or `- **a, b**: none`);
a file is named in backticks by its name (`arena.rs`) or by its folder
(`store/`). Test-only files (`tests.rs`, `*_tests.rs`) are left out: what
is listed is what the production build runs."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
UNSAFE = re.compile(r"\bunsafe\s*(\{|fn\b|impl\b)")
BULLET = re.compile(r"^- \*\*([a-z, ]+)\*\*:(.*)")


def unsafe_files(crate: str) -> set[str]:
    """Paths under the crate's src/ whose code (not comments) has unsafe."""
    src = ROOT / "crates" / crate / "src"
    out = set()
    for f in src.rglob("*.rs"):
        if f.name == "tests.rs" or f.stem.endswith("_tests"):
            continue
        code = "\n".join(line.split("//")[0] for line in f.read_text(encoding="utf-8").splitlines())
        if UNSAFE.search(code):
            out.add(f.relative_to(src).as_posix())
    return out


def listed() -> dict[str, list[str]]:
    """Each crate's bullet: the backticked names that end in `.rs` or `/`."""
    text = DESIGN.read_text(encoding="utf-8")
    section = text[text.index("## Unsafe code"):]
    section = section[: section.index("\n## ", 1)]
    bullets, current = {}, None
    for line in section.splitlines():
        if m := BULLET.match(line):
            current = [c.strip() for c in m.group(1).split(",")]
            for c in current:
                bullets[c] = []
            rest = m.group(2)
        elif current and line.startswith("  "):
            rest = line
        else:
            current = None
            continue
        for c in current:
            bullets[c] += [n for n in re.findall(r"`([^`]+)`", rest) if n.endswith(".rs") or n.endswith("/")]
    return bullets


def covers(name: str, path: str) -> bool:
    return path.split("/")[-1] == name if name.endswith(".rs") else path.startswith(name) or f"/{name}" in path


def test_every_crate_has_a_bullet():
    crates = {p.parent.name for p in ROOT.glob("crates/*/src")}
    assert crates <= set(listed()), f"crates missing from design.md's Unsafe code: {sorted(crates - set(listed()))}"


def test_every_file_with_unsafe_is_listed():
    missing = []
    for crate, names in listed().items():
        for path in sorted(unsafe_files(crate)):
            if not any(covers(n, path) for n in names):
                missing.append(f"{crate}: {path}")
    assert not missing, "design.md's Unsafe code does not name:\n" + "\n".join(missing)


def test_every_file_listed_has_unsafe():
    stale = []
    for crate, names in listed().items():
        files = unsafe_files(crate)
        for n in names:
            if not any(covers(n, p) for p in files):
                stale.append(f"{crate}: {n}")
    assert not stale, "design.md's Unsafe code names files without unsafe code:\n" + "\n".join(stale)


def test_the_scan_finds_what_it_must():
    """The arena is where the segment memory's unsafe accessors are."""
    assert "arena.rs" in unsafe_files("store")
    assert "wake.rs" in unsafe_files("server")
    assert not unsafe_files("protocol")
