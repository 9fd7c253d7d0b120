"""The I/O layer's test machinery (strata-io's cargo feature `sim`: the
fault plan, FaultBackend, SimFs; docs/design.md, "Test hooks") is in no
binary: not in the production build, not in the test build (nothing there
uses it), only in the tests of the crates that list it as a dev-dependency.
Read from cargo's feature resolution (`cargo tree`), so that a crate that
turned it on in its [dependencies] would fail here."""

import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SIM = 'strata-io feature "sim"'

pytestmark = pytest.mark.skipif(shutil.which("cargo") is None, reason="no cargo on PATH")


def features(*args):
    """cargo tree's features of strata-io, as the named build resolves them."""
    cmd = ["cargo", "tree", "--offline", "-e", "features", "-i", "strata-io", *args]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.parametrize("build", [[], ["--features", "strata/test-hooks"]], ids=["production", "test-hooks"])
def test_no_binary_build_has_the_sim_feature(build):
    assert SIM not in features("-p", "strata", "-e", "normal", *build)


def test_the_tests_that_use_it_have_it():
    # The check sees the feature where it is on: the persistence crate's
    # tests (a dev-dependency), not its library.
    assert SIM in features("-p", "strata-persist")
    assert SIM not in features("-p", "strata-persist", "-e", "normal")
