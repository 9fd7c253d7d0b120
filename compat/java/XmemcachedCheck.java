// xmemcached (com.googlecode.xmemcached:xmemcached) against a
// memcached-compatible server.
//
//   java -cp 'compat/java/lib/*:CLASSES' XmemcachedCheck PORT text|binary [CHECK...]
//
// Runs the checks (all, or the named ones) in order on one client for
// 127.0.0.1:PORT (binary: BinaryCommandFactory), flushing the cache before
// each; prints "ok N - name" or "not ok N - name: reason" per check and a
// summary line, and exits 0 only if every check passed (2 on bad
// arguments). CHECK_EXPECT_PID, if set, is the pid the stats must show.

import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeSet;

import net.rubyeye.xmemcached.GetsResponse;
import net.rubyeye.xmemcached.KeyIterator;
import net.rubyeye.xmemcached.MemcachedClient;
import net.rubyeye.xmemcached.XMemcachedClientBuilder;
import net.rubyeye.xmemcached.command.BinaryCommandFactory;
import net.rubyeye.xmemcached.exception.MemcachedClientException;
import net.rubyeye.xmemcached.exception.MemcachedServerException;
import net.rubyeye.xmemcached.utils.AddrUtil;

public final class XmemcachedCheck {
    interface Check {
        void run(MemcachedClient c) throws Exception;
    }

    static final class Failed extends Exception {
        Failed(String m) {
            super(m);
        }
    }

    static String show(Object o) {
        if (o instanceof byte[]) {
            return Arrays.toString((byte[]) o);
        }
        return o instanceof String ? "\"" + o + "\"" : String.valueOf(o);
    }

    static void eq(Object got, Object want, String what) throws Failed {
        boolean same = (got instanceof byte[] && want instanceof byte[])
                ? Arrays.equals((byte[]) got, (byte[]) want)
                : Objects.equals(got, want);
        if (!same) {
            throw new Failed(what + ": got " + show(got) + ", want " + show(want));
        }
    }

    static String port;
    static boolean binary;

    static MemcachedClient client() throws Exception {
        XMemcachedClientBuilder b = new XMemcachedClientBuilder(AddrUtil.getAddresses("127.0.0.1:" + port));
        if (binary) {
            b.setCommandFactory(new BinaryCommandFactory());
        }
        b.setOpTimeout(5000);
        // Values up to 4 MiB leave the client, so the server's 1 MiB limit
        // is what refuses a larger one.
        b.setTranscoder(new net.rubyeye.xmemcached.transcoders.SerializingTranscoder(4 * 1024 * 1024));
        b.setConnectTimeout(5000);
        return b.build();
    }

    static InetSocketAddress address() {
        return new InetSocketAddress("127.0.0.1", Integer.parseInt(port));
    }

    static final Map<String, Check> CHECKS = new LinkedHashMap<>();

    static {
        CHECKS.put("set-get", c -> {
            eq(c.set("k", 0, "hello"), true, "set");
            eq(c.get("k"), "hello", "get");
            eq(c.set("k", 0, "world"), true, "overwrite");
            eq(c.get("k"), "world", "get after overwrite");
            eq(c.get("missing"), null, "get missing");
            eq(c.set("empty", 0, ""), true, "set empty");
            eq(c.get("empty"), "", "get empty");
            String longKey = "x".repeat(250);
            eq(c.set(longKey, 0, "long"), true, "set 250-byte key");
            eq(c.get(longKey), "long", "get 250-byte key");
            try {
                c.set("x".repeat(251), 0, "v");
                throw new Failed("a 251-byte key was accepted");
            } catch (IllegalArgumentException e) {
                eq(e.getMessage(), "Key is too long (maxlen = 250)", "251-byte key");
            }
        });

        CHECKS.put("types", c -> {
            eq(c.set("int", 0, 42), true, "set Integer");
            eq(c.set("long", 0, 1L << 40), true, "set Long");
            eq(c.set("bytes", 0, new byte[] {0, 1, 13, 10, -1}), true, "set byte[]");
            HashMap<String, Integer> map = new HashMap<>();
            map.put("a", 1);
            eq(c.set("obj", 0, map), true, "set HashMap");
            eq(c.get("int"), 42, "get Integer");
            eq(c.get("long"), 1L << 40, "get Long");
            eq(c.get("bytes"), new byte[] {0, 1, 13, 10, -1}, "get byte[]");
            eq(c.get("obj"), map, "get HashMap");
            String text = "abc".repeat(20000);
            eq(c.set("z", 0, text), true, "set compressible");
            eq(c.get("z"), text, "get compressible");
        });

        CHECKS.put("get-multi", c -> {
            Map<String, Object> want = new HashMap<>();
            List<String> keys = new ArrayList<>();
            for (int i = 0; i < 100; i++) {
                keys.add("mk" + i);
                if (i % 3 != 0) {
                    eq(c.set("mk" + i, 0, "value-" + i), true, "set");
                    want.put("mk" + i, "value-" + i);
                }
            }
            eq(c.get(keys), want, "get(Collection)");
            eq(c.get(Arrays.asList("mk0", "nope")), new HashMap<String, Object>(), "get of missing keys");
            Map<String, GetsResponse<Object>> gets = c.gets(Arrays.asList("mk1", "mk2", "mk3"));
            eq(new TreeSet<>(gets.keySet()), new TreeSet<>(Arrays.asList("mk1", "mk2")), "gets(Collection) keys");
            eq(gets.get("mk1").getValue(), "value-1", "gets(Collection) value");
        });

        CHECKS.put("add-replace", c -> {
            eq(c.add("a", 0, "1"), true, "add");
            eq(c.add("a", 0, "2"), false, "add existing");
            eq(c.get("a"), "1", "value kept");
            eq(c.replace("r", 0, "x"), false, "replace missing");
            eq(c.get("r"), null, "not created");
            eq(c.set("r", 0, "x"), true, "set");
            eq(c.replace("r", 0, "y"), true, "replace");
            eq(c.get("r"), "y", "replaced");
        });

        CHECKS.put("append-prepend", c -> {
            eq(c.set("ap", 0, "mid"), true, "set");
            eq(c.append("ap", "-end"), true, "append");
            eq(c.prepend("ap", "start-"), true, "prepend");
            eq(c.get("ap"), "start-mid-end", "get");
            eq(c.append("nokey", "x"), false, "append missing");
            eq(c.prepend("nokey", "x"), false, "prepend missing");
            eq(c.get("nokey"), null, "not created");
        });

        CHECKS.put("incr-decr", c -> {
            // A missing key is created with the initial value (0 unless given).
            eq(c.incr("n", 5), 0L, "incr missing");
            eq(c.get("n") == null ? null : String.valueOf((Object) c.get("n")), "0", "created");
            eq(c.incr("m", 5, 10), 10L, "incr missing with initial value");
            eq(c.incr("m", 5), 15L, "incr");
            eq(c.decr("m", 3), 12L, "decr");
            eq(c.decr("m", 100), 0L, "decr stops at 0");
            eq(c.set("max", 0, "18446744073709551615"), true, "set 2^64-1");
            eq(c.incr("max", 2), 1L, "incr wraps at 2^64");
            eq(c.set("word", 0, "abc"), true, "set non-numeric");
            try {
                c.incr("word", 1);
                throw new Failed("incr of a non-numeric value succeeded");
            } catch (MemcachedServerException | MemcachedClientException e) {
                // xmemcached's text for binary status 0x06, or the server's line.
                eq(e.toString(), binary
                        ? "net.rubyeye.xmemcached.exception.MemcachedServerException: Incr/Decr on non-numeric value."
                        : "net.rubyeye.xmemcached.exception.MemcachedClientException: "
                                + "cannot increment or decrement non-numeric value,key=word", "incr non-numeric");
            }
            eq(c.get("word"), "abc", "value kept");
        });

        CHECKS.put("gets-cas", c -> {
            eq(c.set("c", 0, "v1"), true, "set");
            GetsResponse<Object> v = c.gets("c");
            eq(v.getValue(), "v1", "gets value");
            if (v.getCas() <= 0) {
                throw new Failed("cas token " + v.getCas());
            }
            eq(c.cas("c", 0, "v2", v.getCas()), true, "cas with the token");
            eq(c.get("c"), "v2", "swapped");
            eq(c.cas("c", 0, "v3", v.getCas()), false, "cas with a stale token");
            eq(c.get("c"), "v2", "not swapped");
            GetsResponse<Object> v2 = c.gets("c");
            if (v2.getCas() == v.getCas()) {
                throw new Failed("token unchanged by a write");
            }
            eq(c.cas("missing", 0, "x", v2.getCas()), false, "cas of a missing key");
            eq(c.gets("missing"), null, "gets missing");
        });

        CHECKS.put("touch", c -> {
            // 30 s, not 1: a 1 s TTL ends at the next second boundary,
            // which a loaded machine can reach before the touch.
            eq(c.set("t", 30, "v"), true, "set with 30 s");
            eq(c.touch("t", 3600), true, "touch");
            eq(c.touch("missing", 10), false, "touch missing");
            if (binary) {
                // "GAT is only supported by binary protocol" in xmemcached.
                eq(c.getAndTouch("t", 3600), "v", "getAndTouch");
                eq(c.getAndTouch("missing", 10), null, "getAndTouch missing");
            }
            eq(c.set("gone", 0, "v"), true, "set");
            eq(c.touch("gone", (int) (System.currentTimeMillis() / 1000) - 3600), true, "touch to the past");
            eq(c.get("gone"), null, "expired");
        });

        CHECKS.put("delete", c -> {
            eq(c.set("d", 0, "x"), true, "set");
            eq(c.delete("d"), true, "delete");
            eq(c.get("d"), null, "gone");
            eq(c.delete("d"), false, "delete missing");
        });

        CHECKS.put("large-values", c -> {
            byte[] big = new byte[1024 * 1024 - 4096];
            new java.util.Random(1).nextBytes(big);
            eq(c.set("big", 0, big), true, "set near 1 MiB");
            eq(c.get("big"), big, "get near 1 MiB");
            byte[] huge = new byte[2 * 1024 * 1024];
            new java.util.Random(2).nextBytes(huge);
            // On a client of its own: xmemcached closes the connection after
            // the error and reconnects (a second or two) before the next request.
            MemcachedClient other = client();
            try {
                other.set("huge", 0, huge);
                throw new Failed("a 2 MiB value was stored");
            } catch (MemcachedServerException e) {
                // xmemcached's text for binary status 0x03, or the server's line.
                eq(e.toString(), binary
                        ? "net.rubyeye.xmemcached.exception.MemcachedServerException: Value is too big."
                        : "net.rubyeye.xmemcached.exception.MemcachedServerException: "
                                + "object too large for cache,key=huge", "set 2 MiB");
            } finally {
                other.shutdown();
            }
            eq(c.get("huge"), null, "not stored");
            eq(c.set("after", 0, "ok"), true, "set after");
            eq(c.get("after"), "ok", "get after");
        });

        CHECKS.put("flush", c -> {
            eq(c.set("f1", 0, "a"), true, "set");
            eq(c.set("f2", 0, "b"), true, "set");
            c.flushAll();
            eq(c.get(Arrays.asList("f1", "f2")), new HashMap<String, Object>(), "gone");
            eq(c.add("f1", 0, "again"), true, "add after flush");
        });

        CHECKS.put("key-iterator", c -> {
            List<String> keys = new ArrayList<>();
            for (int i = 0; i < 20; i++) {
                keys.add("ki:" + i);
                eq(c.set("ki:" + i, 0, "v"), true, "set");
            }
            TreeSet<String> want = new TreeSet<>(keys);
            if (binary) {
                // "stats items" and "stats cachedump": text commands.
                try {
                    KeyIterator it = c.getKeyIterator(address());
                    while (it.hasNext()) {
                        it.next();
                    }
                    throw new Failed("getKeyIterator over binary did not fail");
                } catch (net.rubyeye.xmemcached.exception.MemcachedException e) {
                    eq(e.getMessage(), "Binary protocol doesn't support iterating all keys in memcached", "binary");
                    return;
                }
            }
            // memcached lists a new item once its LRU maintainer has moved it
            // (about a second later); strata at once.
            TreeSet<String> got = new TreeSet<>();
            long deadline = System.currentTimeMillis() + 5000;
            while (true) {
                got.clear();
                KeyIterator it = c.getKeyIterator(address());
                try {
                    while (it.hasNext()) {
                        got.add(it.next());
                    }
                } catch (java.util.NoSuchElementException e) {
                    // hasNext() was true for a slab class whose cachedump
                    // came back empty (memcached, before the move above).
                    got.clear();
                }
                if (got.equals(want) || System.currentTimeMillis() > deadline) {
                    break;
                }
                Thread.sleep(50);
            }
            eq(got, want, "getKeyIterator");
        });

        CHECKS.put("stats-version", c -> {
            Map<InetSocketAddress, Map<String, String>> all = c.getStats();
            eq(all.size(), 1, "servers in stats");
            Map<String, String> stats = all.values().iterator().next();
            String pid = System.getenv("CHECK_EXPECT_PID");
            if (pid != null) {
                eq(stats.get("pid"), pid, "pid");
            }
            eq(stats.get("limit_maxbytes"), String.valueOf(64 * 1024 * 1024), "limit_maxbytes");
            long before = Long.parseLong(stats.get("cmd_get"));
            eq(c.get("sv-missing"), null, "get");
            long after = Long.parseLong(c.getStats().values().iterator().next().get("cmd_get"));
            eq(after - before, 1L, "cmd_get counted");
            Map<String, String> settings = c.getStatsByItem("settings").values().iterator().next();
            eq(settings.get("item_size_max"), "1048576", "stats settings item_size_max");
            Map<InetSocketAddress, String> versions = c.getVersions();
            eq(versions.size(), 1, "servers in versions");
            String version = versions.values().iterator().next();
            if (!version.matches("1\\.6\\.\\d+")) {
                throw new Failed("version " + show(version) + " is not 1.6.x");
            }
            eq(version, stats.get("version"), "version as in stats");
        });
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 1 && args[0].equals("list")) {
            CHECKS.keySet().forEach(System.out::println);
            return;
        }
        if (args.length < 2 || !args[0].matches("\\d+") || !Arrays.asList("text", "binary").contains(args[1])) {
            System.err.println("usage: XmemcachedCheck PORT text|binary [CHECK...] | list");
            System.exit(2);
        }
        port = args[0];
        binary = args[1].equals("binary");
        List<String> names = args.length > 2 ? Arrays.asList(args).subList(2, args.length) : new ArrayList<>(CHECKS.keySet());
        for (String n : names) {
            if (!CHECKS.containsKey(n)) {
                System.err.println("unknown check " + n);
                System.exit(2);
            }
        }
        MemcachedClient c = client();
        int failed = 0;
        for (int i = 0; i < names.size(); i++) {
            String name = names.get(i);
            try {
                c.flushAll();
                CHECKS.get(name).run(c);
                System.out.println("ok " + (i + 1) + " - " + name);
            } catch (Throwable e) {
                failed++;
                String reason = e instanceof Failed ? e.getMessage() : e.toString();
                System.out.println("not ok " + (i + 1) + " - " + name + ": " + reason.replace("\n", "\n#   "));
            }
        }
        c.shutdown();
        System.out.println("# " + (names.size() - failed) + "/" + names.size() + " checks passed (server 127.0.0.1:"
                + port + ", " + args[1] + ")");
        System.exit(failed == 0 ? 0 : 1);
    }
}
