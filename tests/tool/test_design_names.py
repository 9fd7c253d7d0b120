"""The Rust names docs/design.md and its pages (docs/design/*.md) give in
backticks exist in the source as it says: a type (`Store`), a type's variant (`Phase::Parked`), method or
field (`Store::on_starved`, `SegMeta::dicts`), and the fields it spells out
(`Phase::Woken { at, ticket }`). A design document that names what the code
no longer has sends a newcomer to the wrong room.

Left alone: all-capitals words (protocol replies, errno and epoll names:
`ERROR`, `EAGAIN`), one-letter names, and spans that are not plain paths."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"

NAME = re.compile(r"^([A-Z][A-Za-z0-9]*)((?:::[A-Za-z_][A-Za-z0-9_]*)*)(?:\s*\{([^}]*)\})?$")
# A type the standard library or a dependency defines, named in passing.
FOREIGN = {"Send", "Sync", "Read", "Write", "Rng", "Backend", "Zip"}


def source() -> str:
    parts = []
    for f in sorted(ROOT.glob("crates/*/src/**/*.rs")):
        parts.append(f.read_text(encoding="utf-8"))
    return "\n".join(parts)


SRC = source()


def body_after(match_end: int) -> str:
    """The `{ ... }` block that starts at or after `match_end`."""
    i = SRC.find("{", match_end)
    semi = SRC.find(";", match_end)
    if i < 0 or (0 <= semi < i):
        return ""
    return block_at(SRC, i)


def block_at(text: str, i: int) -> str:
    """The `{ ... }` block of `text` whose opening brace is at `i`."""
    depth = 0
    for j in range(i, len(text)):
        depth += text[j] == "{"
        depth -= text[j] == "}"
        if depth == 0:
            return text[i : j + 1]
    return ""


DEFS: dict[str, list[tuple[str, int]]] = {}
for _m in re.finditer(r"\b(struct|enum|trait|type|union)\s+([A-Z]\w*)", SRC):
    DEFS.setdefault(_m.group(2), []).append((_m.group(1), _m.end()))
IMPLS: dict[str, list[int]] = {}
for _m in re.finditer(r"\bimpl(?:<[^>{]*>)?\s+(?:[\w:]+(?:<[^>{]*>)?\s+for\s+)?([A-Z]\w*)", SRC):
    IMPLS.setdefault(_m.group(1), []).append(_m.end())


def definitions(ty: str) -> list[tuple[str, str]]:
    """(kind, body) of each `struct`/`enum`/`trait`/`type`/`union` named
    `ty` (a macro-made struct counts by its `struct ty` line)."""
    return [(kind, body_after(end)) for kind, end in DEFS.get(ty, [])]


def impls(ty: str) -> str:
    return "\n".join(body_after(end) for end in IMPLS.get(ty, []))


ENUMS = [body_after(m.end()) for m in re.finditer(r"\benum\s+\w+", SRC)]


def is_variant(name: str) -> bool:
    """A variant of some enum (named alone: `Ready`, `Waiting { need }`)."""
    return any(re.search(rf"(^|[\s,{{]){name}\b", body) for body in ENUMS)


def fields_of(block: str, name: str) -> str:
    """The body of variant `name` inside an enum's block."""
    m = re.search(rf"\b{name}\s*\{{", block)
    return block_at(block, m.end() - 1) if m else ""


def check(span: str) -> str | None:
    """Why `span` names nothing in the source, or None."""
    m = NAME.match(span)
    if not m:
        return None
    ty, rest, fields = m.group(1), [p for p in m.group(2).split("::") if p], m.group(3)
    if ty.isupper() or len(ty) == 1 or ty in FOREIGN:
        return None
    defs = definitions(ty)
    if not defs:
        if not rest and is_variant(ty):
            if fields is not None:
                for enum in ENUMS:
                    body = fields_of(enum, ty)
                    if body and all(re.search(rf"\b{f.strip()}\b", body) for f in fields.split(",") if f.strip()):
                        return None
                return f"no variant {ty} with fields {{{fields}}}"
            return None
        return f"no type {ty}"
    if not rest:
        if fields is not None:
            ok = any(all(re.search(rf"\b{f.strip()}\b\s*:", b) for f in fields.split(",") if f.strip()) for _, b in defs)
            return None if ok else f"{ty} has not all of the fields {{{fields}}}"
        return None
    member = rest[0]
    bodies = "\n".join(b for _, b in defs) + "\n" + impls(ty)
    if member[0].isupper():
        variant = fields_of(bodies, member) if fields is not None else ""
        if not re.search(rf"(^|[\s,{{]){member}\b", bodies):
            return f"{ty} has no variant {member}"
        if fields is not None:
            missing = [f.strip() for f in fields.split(",") if f.strip() and not re.search(rf"\b{f.strip()}\b", variant)]
            if missing and "::" not in fields:
                return f"{ty}::{member} has no field(s) {missing}"
        return None
    if re.search(rf"\bfn\s+{member}\b", bodies) or re.search(rf"\b{member}\s*:", bodies):
        return None
    # A trait's provided method, or a method of a trait it implements.
    if re.search(rf"\bfn\s+{member}\b", SRC) and any(k == "trait" for k, _ in defs):
        return None
    return f"{ty} has no method or field {member}"


def test_every_backticked_rust_name_exists():
    wrong = []
    pages = [DESIGN, *sorted(DESIGN.parent.glob("design/*.md"))]
    assert len(pages) > 1, "no docs/design/*.md pages found"
    for page in pages:
        where = page.relative_to(DESIGN.parent).as_posix()
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for span in re.findall(r"`([^`\n]+)`", line):
                why = check(span)
                if why:
                    wrong.append(f"{where}:{n}: `{span}`: {why}")
    assert not wrong, "the design pages name what the source does not have:\n" + "\n".join(wrong)


def test_the_checker_tells_wrong_from_right():
    assert check("Store") is None
    assert check("Store::on_starved") is None
    assert check("SegMeta::aged_at") is None
    assert check("Outcome::Wait { ticket, at }") is None
    assert check("NoSuchType") == "no type NoSuchType"
    assert check("Store::no_such_method") is not None
    assert check("Outcome::Wait { ticket, addr }") is not None
    assert check("Outcome::NoSuchVariant") is not None
