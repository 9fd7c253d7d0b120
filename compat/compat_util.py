"""Helpers shared by the client-library compatibility suites."""

import harness
from pymemcache.client.base import Client


def server_args(*args, item_size_max=None):
    """Command-line options for the server under test.

    memcached refuses ``-I`` below its default slab_chunk_max (512 KiB), so for
    a small item size limit it also needs ``-o slab_chunk_max=<bytes>``; strata
    takes plain ``-I``.
    """
    out = list(args)
    if item_size_max is not None:
        out += ["-I", item_size_max]
        if harness.target() == "memcached":
            size = item_size_max.lower()
            n = int(size[:-1]) * {"k": 1024, "m": 1024 * 1024}[size[-1]] if size[-1] in "km" else int(size)
            if n < 512 * 1024:
                out += ["-o", f"slab_chunk_max={n}"]
    return out


def make_client(address, **kw):
    kw.setdefault("connect_timeout", 5)
    kw.setdefault("timeout", 10)
    kw.setdefault("default_noreply", False)
    return Client(address, **kw)
