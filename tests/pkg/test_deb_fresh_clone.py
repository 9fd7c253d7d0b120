"""`make deb`'s packaging step from a fresh clone, on a machine where only
`cargo build --release` ran (issue 43, item 1): the committed tree alone
(git clone), a CARGO_HOME that holds only the crates that build downloads
(the normal and build dependencies for this host: no dev-dependency), and
CARGO_TARGET_DIR elsewhere. scripts/build-deb.sh then packages the release
binary into that target directory, copyright file included.

It once ran `cargo metadata --offline` ("failed to download bit-set"),
then `cargo tree --offline`, which reads every package Cargo.lock lists,
dev-dependencies too ("failed to download aho-corasick"): this test failed
there. The script now lets cargo fetch what is missing from crates.io, so
this test needs crates.io, as the build does. The build itself is not
repeated: a second release build of the workspace would take minutes; the
suites' production binary (STRATA_PROD_BIN) stands in for it.
"""

import os
import shutil
import subprocess

import pytest

from harness import ROOT, STRATA_PROD_BIN

pytestmark = [
    pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="not a Debian system (no dpkg-deb)"),
    pytest.mark.skipif(not os.path.isdir(os.path.join(ROOT, ".git")), reason="not a git checkout"),
]

CARGO_HOME = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert r.returncode == 0, f"{cmd}: rc {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def build_only_home(home, clone):
    """A CARGO_HOME with the registry index and only the .crate files a
    release build of this host downloads. (Listing them with cargo tree
    may itself fetch what this machine lacks: the same reason as the
    script's.)"""
    index = os.path.join(CARGO_HOME, "registry", "index")
    shutil.copytree(index, os.path.join(home, "registry", "index"), symlinks=True)
    host = run(["rustc", "-vV"]).split("host: ", 1)[1].split()[0]
    listed = run(
        ["cargo", "tree", "--workspace", "-e", "normal,build", "--target", host, "--prefix", "none",
         "--format", "{p}", "--locked"],
        cwd=clone,
    )
    crates = {line.replace(" v", "-", 1) + ".crate" for line in listed.splitlines() if line and " (" not in line}
    linked = 0
    for registry in os.listdir(os.path.join(CARGO_HOME, "registry", "cache")):
        src = os.path.join(CARGO_HOME, "registry", "cache", registry)
        dst = os.path.join(home, "registry", "cache", registry)
        os.makedirs(dst)
        for name in crates & set(os.listdir(src)):
            os.symlink(os.path.join(src, name), os.path.join(dst, name))
            linked += 1
    # Every crate of the build is there, and fewer than the lock file names.
    assert linked == len(crates), (linked, len(crates))
    return len(crates)


def test_build_deb_packages_from_a_fresh_clone_with_only_the_builds_crates(tmp_path):
    if not os.path.exists(STRATA_PROD_BIN):
        pytest.skip(f"no production binary at {STRATA_PROD_BIN}")
    clone = tmp_path / "clone"
    run(["git", "clone", "--quiet", "--no-local", ROOT, str(clone)])
    home = tmp_path / "cargo-home"
    n = build_only_home(str(home), str(clone))
    with open(os.path.join(ROOT, "Cargo.lock")) as f:
        assert n < f.read().count("[[package]]"), "the lock file names crates the build does not need"
    target = tmp_path / "target"
    env = dict(os.environ, CARGO_HOME=str(home), CARGO_TARGET_DIR=str(target), STRATA_PROD_BIN=STRATA_PROD_BIN)
    out = run([str(clone / "scripts" / "build-deb.sh")], cwd=clone, env=env)
    deb = out.split("build-deb: ", 1)[1].split(" ", 1)[0]
    assert os.path.dirname(deb) == str(target / "debian"), out
    files = run(["dpkg-deb", "-c", deb])
    for path in ("./usr/bin/strata", "./lib/systemd/system/strata.service", "./etc/strata/strata.conf",
                 "./usr/share/doc/strata/copyright"):
        assert path in files, files
    extracted = tmp_path / "x"
    run(["dpkg-deb", "-x", deb, str(extracted)])
    text = (extracted / "usr/share/doc/strata/copyright").read_text()
    assert "Files: crate parking_lot " in text and "Files: crate proptest " not in text, text[-800:]
