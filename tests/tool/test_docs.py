"""The operator's and the newcomer's documents stay within their sizes
(README.md ~250 lines; docs/design.md ~40 KB, what a newcomer needs to find
their room; docs/benchmarks.md ~30 KB, the current figures, history in
benchmarks-history.md), and benchmarks.md's commands stay runnable as
written: every file they name exists and every `strata-bench` flag they
pass is one strata-bench defines (read from its clap definitions)."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BENCHMARKS = DOCS / "benchmarks.md"
ARGS = ROOT / "crates" / "bench" / "src" / "args.rs"

# A path in the tree a command names: bench/…, docs/…, crates/…, tests/….
PATH = re.compile(r"(?<![\w/.-])((?:bench|docs|crates|tests)/[\w./{},*-]+)")
FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)")
ARG_ATTR = re.compile(r"#\[arg\((.*)\)\]\n(?:\s*///[^\n]*\n)*\s*pub\(crate\) (\w+):")
# A strata-bench command: what follows is its subcommand and flags.
COMMAND = re.compile(r"(?:^|[\s/])strata-bench\s+(?:run|scenario)\b(.*)")


@pytest.mark.parametrize(
    "path, limit",
    [("README.md", 250), ("docs/design.md", 40 * 1024), ("docs/benchmarks.md", 30 * 1024)],
)
def test_within_its_size(path, limit):
    text = (ROOT / path).read_text(encoding="utf-8")
    size = len(text.splitlines()) if path == "README.md" else len(text.encode())
    unit = "lines" if path == "README.md" else "bytes"
    assert size <= limit, f"{path} is {size} {unit}, over its {limit}: move history or reference out of it"


def code_blocks(text: str) -> list[str]:
    """The fenced ```sh blocks' contents, continuation lines joined."""
    blocks = re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S)
    return [b.replace("\\\n", " ") for b in blocks]


def expand(path: str) -> list[str]:
    """`a/{b,c}.toml` as the shell expands it (one brace group)."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [path[: m.start()] + alt + path[m.end() :] for alt in m.group(1).split(",")]


def bench_flags() -> set[str]:
    """The long flags strata-bench's clap definitions declare."""
    flags = {"help", "version"}
    for attrs, field in ARG_ATTR.findall(ARGS.read_text(encoding="utf-8")):
        named = re.search(r'long\s*=\s*"([^"]+)"', attrs)
        if named:
            flags.add(named.group(1))
        elif re.search(r"\blong\b", attrs):
            flags.add(field.replace("_", "-"))
    return flags


def test_the_flag_reader_sees_the_flags_it_must():
    """So that a reader gone blind cannot pass the test below."""
    flags = bench_flags()
    for must in ("server", "repeat", "strata-bin", "out", "trace", "addr", "time-scale"):
        assert must in flags, f"{must} not read from {ARGS}"
    assert "no-such-flag" not in flags


def test_benchmark_commands_name_what_exists():
    text = BENCHMARKS.read_text(encoding="utf-8")
    flags = bench_flags()
    missing, unknown = [], []
    paths_checked = commands_checked = 0
    for block in code_blocks(text):
        for path in PATH.findall(block):
            path = path.rstrip(".,")
            for p in expand(path):
                # Globs and outputs a command writes are not checked.
                if "*" in p or p.startswith("target/"):
                    continue
                paths_checked += 1
                if not (ROOT / p).exists():
                    missing.append(p)
        for line in block.splitlines():
            command = COMMAND.search(line.split("#")[0])
            if not command:
                continue
            commands_checked += 1
            for flag in FLAG.findall(command.group(1)):
                if flag not in flags:
                    unknown.append(f"--{flag} in: {line.strip()[:100]}")
    # The document's commands were found at all (a parser gone blind
    # would pass the checks below).
    assert paths_checked >= 10 and commands_checked >= 10, (paths_checked, commands_checked)
    assert not missing, "benchmarks.md names files that do not exist:\n" + "\n".join(sorted(set(missing)))
    assert not unknown, "benchmarks.md passes strata-bench flags it does not define:\n" + "\n".join(unknown)
