"""Imports run one way (docs/design.md, "Module map"): no crate has an
import circle but the one listed here as known, and the server's folders
are layers, each importing only those below it. The graph is drawn from
the source by layers.py; the first tests check that it sees the edges it
must, so that a parser gone blind cannot pass the others."""

import pytest

from layers import Crate, crates, name

# Circles still to break: each crate's modules in one circle. A circle
# found must lie inside one of these; one of these no longer found must be
# taken off (the test says so). None is left.
KNOWN: dict[str, list[set[str]]] = {}

# The store's state, below `Store`: the types the store holds (and their
# own methods), which import no module that `impl`s the store. `Store`
# holds them; the behaviour (`impl Store` in evict/, cutting.rs,
# reclaimer.rs, capture.rs, journaling.rs, tier/…) sits above it.
STORE_STATE = [("segments",), ("cut",), ("reclaim",), ("image",), ("journal",), ("counters",), ("tier", "batch")]
STORE_BEHAVIOUR = [("store",), ("evict",), ("active",), ("cutting",), ("reclaimer",), ("capture",), ("journaling",),
                   ("tier",), ("worker",), ("write",), ("read",)]

# The server's layers, lowest first: a module of a layer imports only
# modules of its own layer or of those before it. `shared.rs` (a handle to
# each) and the crate root are outside the order.
SERVER_LAYERS = [
    {"config", "auth", "wake", "state"},
    {"observability"},
    {"execution"},
    {"network"},
    {"lifecycle"},
]
OUTSIDE = {"shared"}


def layer_of(module):
    for i, names in enumerate(SERVER_LAYERS):
        if module[0] in names:
            return i
    return None


@pytest.fixture(scope="module")
def graphs():
    return {c: Crate(c) for c in crates()}


def test_the_graph_sees_the_imports_it_must(graphs):
    """Known edges of each kind of path: `crate::a::b`, a name the root
    re-exports (`crate::Shared`), a module imported by name and then used
    (`dispatch::Ctx`), `super::` in a split module, a child by name."""
    server, store = graphs["server"], graphs["store"]
    assert ("execution", "dispatch") in server.edges[("network", "conn")]
    assert ("shared",) in server.edges[("execution", "ctx")]
    assert ("observability", "counters") in server.edges[("execution", "ctx")]
    assert ("segments",) in store.edges[("evict",)]
    assert ("store",) in store.edges[("evict", "clear")] or ("store",) in store.edges[("evict",)]
    assert ("text", "meta", "get") in graphs["protocol"].edges[("text",)]
    # Every crate's every file but the root is a node, and most import.
    for c, g in graphs.items():
        assert g.edges, c
    total = sum(len(t) for g in graphs.values() for t in g.edges.values())
    assert total > 300, f"only {total} imports seen: the parser has gone blind"


def test_a_circle_is_found_where_there_is_one(graphs):
    """The circle finder on a graph made up here."""
    g = Crate.__new__(Crate)
    g.edges = {("a",): {("b",)}, ("b",): {("c",)}, ("c",): {("a",)}, ("d",): {("a",)}}
    assert g.circles() == [[("a",), ("b",), ("c",)]]


@pytest.mark.parametrize("crate", crates())
def test_no_import_circle_but_the_known(graphs, crate):
    known = KNOWN.get(crate, [])
    found = [{name(m) for m in c} for c in graphs[crate].circles()]
    new = [sorted(c) for c in found if not any(c <= k for k in known)]
    assert not new, f"{crate}: import circles (python3 tests/tool/layers.py shows their edges): {new}"
    gone = [sorted(k) for k in known if not any(c <= k for c in found)]
    assert not gone, f"{crate}: no longer a circle, take it off KNOWN in {__file__}: {gone}"


def test_server_layers_import_only_below(graphs):
    server = graphs["server"]
    wrong = []
    for m, targets in sorted(server.edges.items()):
        if m[0] in OUTSIDE:
            continue
        mine = layer_of(m)
        assert mine is not None, f"server module {name(m)} is in no layer of {__file__}"
        for t in sorted(targets):
            theirs = layer_of(t)
            if t[0] not in OUTSIDE and theirs is not None and theirs > mine:
                wrong.append(f"{name(m)} -> {name(t)}")
    assert not wrong, "imports up the server's layers:\n" + "\n".join(wrong)


def test_the_stores_state_imports_none_of_its_behaviour(graphs):
    store = graphs["store"]
    for m in STORE_STATE + STORE_BEHAVIOUR:
        assert m in store.edges, f"{name(m)} is no module of the store any more: update {__file__}"
    # The graph sees these: the hub holds the state, behaviour uses both.
    assert ("segments",) in store.edges[("store",)] and ("cut",) in store.edges[("store",)]
    assert ("store",) in store.edges[("cutting",)] and ("store",) in store.edges[("active",)]
    wrong = [f"{name(m)} -> {name(t)}" for m in STORE_STATE for t in sorted(store.edges[m])
             if t not in STORE_STATE and any(t[: len(b)] == b for b in STORE_BEHAVIOUR)]
    assert not wrong, "the store's state imports its behaviour:\n" + "\n".join(wrong)
