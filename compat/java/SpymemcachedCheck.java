// spymemcached (net.spy:spymemcached) against a memcached-compatible server.
//
//   java -cp 'compat/java/lib/*:CLASSES' SpymemcachedCheck PORT text|binary [CHECK...]
//
// Runs the checks (all, or the named ones) in order on one client for
// 127.0.0.1:PORT, flushing the cache before each; prints "ok N - name" or
// "not ok N - name: reason" per check and a summary line, and exits 0 only
// if every check passed (2 on bad arguments). CHECK_EXPECT_PID, if set, is
// the pid the stats must show.
//
// spymemcached's SerializingTranscoder keeps the Java type in the flags:
// String 0, Integer 0x200 (4 bytes big-endian), Long 0x300, a serialized
// object 1; values of 16 KiB or more are gzipped (flag 2).

import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import net.spy.memcached.AddrUtil;
import net.spy.memcached.CASResponse;
import net.spy.memcached.CASValue;
import net.spy.memcached.ConnectionFactoryBuilder;
import net.spy.memcached.ConnectionFactoryBuilder.Protocol;
import net.spy.memcached.MemcachedClient;
import net.spy.memcached.internal.OperationFuture;
import net.spy.memcached.transcoders.Transcoder;

public final class SpymemcachedCheck {
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

    static <T> T get(Future<T> f) throws Exception {
        return f.get(5, TimeUnit.SECONDS);
    }

    static String port;
    static boolean binary;

    static MemcachedClient client(long opTimeoutMs) throws Exception {
        ConnectionFactoryBuilder b = new ConnectionFactoryBuilder()
                .setProtocol(binary ? Protocol.BINARY : Protocol.TEXT)
                .setOpTimeout(opTimeoutMs)
                .setFailureMode(net.spy.memcached.FailureMode.Retry);
        return new MemcachedClient(b.build(), AddrUtil.getAddresses("127.0.0.1:" + port));
    }

    static final Map<String, Check> CHECKS = new LinkedHashMap<>();

    static {
        CHECKS.put("set-get", c -> {
            eq(get(c.set("k", 0, "hello")), true, "set");
            eq(c.get("k"), "hello", "get");
            eq(get(c.set("k", 0, "world")), true, "overwrite");
            eq(c.get("k"), "world", "get after overwrite");
            eq(c.get("missing"), null, "get missing");
            eq(get(c.set("empty", 0, "")), true, "set empty");
            eq(c.get("empty"), "", "get empty");
            String longKey = "x".repeat(250);
            eq(get(c.set(longKey, 0, "long")), true, "set 250-byte key");
            eq(c.get(longKey), "long", "get 250-byte key");
            try {
                c.set("x".repeat(251), 0, "v");
                throw new Failed("a 251-byte key was accepted");
            } catch (IllegalArgumentException e) {
                eq(e.getMessage(), "Key is too long (maxlen = 250)", "251-byte key");
            }
        });

        CHECKS.put("types", c -> {
            eq(get(c.set("int", 0, 42)), true, "set Integer");
            eq(get(c.set("long", 0, 1L << 40)), true, "set Long");
            eq(get(c.set("bytes", 0, new byte[] {0, 1, 13, 10, -1})), true, "set byte[]");
            HashMap<String, Integer> map = new HashMap<>();
            map.put("a", 1);
            eq(get(c.set("obj", 0, map)), true, "set HashMap");
            eq(c.get("int"), 42, "get Integer");
            eq(c.get("long"), 1L << 40, "get Long");
            eq(c.get("bytes"), new byte[] {0, 1, 13, 10, -1}, "get byte[]");
            eq(c.get("obj"), map, "get HashMap");
            // Gzipped at 16 KiB and over, transparently.
            String text = "abc".repeat(20000);
            eq(get(c.set("z", 0, text)), true, "set compressible");
            eq(c.get("z"), text, "get compressible");
        });

        CHECKS.put("get-bulk", c -> {
            Map<String, Object> want = new HashMap<>();
            List<String> keys = new ArrayList<>();
            for (int i = 0; i < 100; i++) {
                keys.add("mk" + i);
                if (i % 3 != 0) {
                    eq(get(c.set("mk" + i, 0, "value-" + i)), true, "set");
                    want.put("mk" + i, "value-" + i);
                }
            }
            eq(c.getBulk(keys), want, "getBulk");
            eq(c.getBulk("mk0", "nope"), new HashMap<String, Object>(), "getBulk of missing keys");
        });

        CHECKS.put("add-replace", c -> {
            eq(get(c.add("a", 0, "1")), true, "add");
            OperationFuture<Boolean> again = c.add("a", 0, "2");
            eq(get(again), false, "add existing");
            eq(c.get("a"), "1", "value kept");
            eq(get(c.replace("r", 0, "x")), false, "replace missing");
            eq(c.get("r"), null, "not created");
            eq(get(c.set("r", 0, "x")), true, "set");
            eq(get(c.replace("r", 0, "y")), true, "replace");
            eq(c.get("r"), "y", "replaced");
        });

        CHECKS.put("append-prepend", c -> {
            eq(get(c.set("ap", 0, "mid")), true, "set");
            eq(get(c.append("ap", "-end")), true, "append");
            eq(get(c.prepend("ap", "start-")), true, "prepend");
            eq(c.get("ap"), "start-mid-end", "get");
            eq(get(c.append("nokey", "x")), false, "append missing");
            eq(get(c.prepend("nokey", "x")), false, "prepend missing");
            eq(c.get("nokey"), null, "not created");
        });

        CHECKS.put("incr-decr", c -> {
            eq(c.incr("n", 1), -1L, "incr missing");
            eq(c.decr("n", 1), -1L, "decr missing");
            // With a default: created with it (the amount not added).
            eq(c.incr("n", 5, 10), 10L, "incr with default creates");
            eq(c.incr("n", 5, 10), 15L, "incr");
            eq(c.decr("n", 3), 12L, "decr");
            eq(c.decr("n", 100), 0L, "decr stops at 0");
            eq(get(c.set("max", 0, "18446744073709551615")), true, "set 2^64-1");
            eq(c.incr("max", 2), 1L, "incr wraps at 2^64");
            eq(get(c.asyncIncr("n", 7)), 7L, "asyncIncr");
            eq(get(c.set("word", 0, "abc")), true, "set non-numeric");
            // On a client of its own: over text the CLIENT_ERROR makes
            // spymemcached drop the connection (and what was queued on it).
            MemcachedClient other = client(5000);
            try {
                if (binary) {
                    eq(get(other.asyncIncr("word", 1)), -1L, "incr non-numeric");
                } else {
                    try {
                        get(other.asyncIncr("word", 1));
                        throw new Failed("incr of a non-numeric value succeeded");
                    } catch (java.util.concurrent.ExecutionException e) {
                        eq(e.getCause().getMessage(),
                           "CLIENT_ERROR cannot increment or decrement non-numeric value", "incr non-numeric");
                    }
                }
            } finally {
                other.shutdown();
            }
            eq(c.get("word"), "abc", "value kept");
        });

        CHECKS.put("gets-cas", c -> {
            eq(get(c.set("c", 0, "v1")), true, "set");
            CASValue<Object> v = c.gets("c");
            eq(v.getValue(), "v1", "gets value");
            if (v.getCas() <= 0) {
                throw new Failed("cas token " + v.getCas());
            }
            eq(c.cas("c", v.getCas(), "v2"), CASResponse.OK, "cas with the token");
            eq(c.get("c"), "v2", "swapped");
            eq(c.cas("c", v.getCas(), "v3"), CASResponse.EXISTS, "cas with a stale token");
            eq(c.get("c"), "v2", "not swapped");
            CASValue<Object> v2 = c.gets("c");
            if (v2.getCas() == v.getCas()) {
                throw new Failed("token unchanged by a write");
            }
            eq(c.cas("missing", v2.getCas(), "x"), CASResponse.NOT_FOUND, "cas of a missing key");
            eq(c.gets("missing"), null, "gets missing");
        });

        CHECKS.put("touch", c -> {
            // 30 s, not 1: a 1 s TTL ends at the next second boundary,
            // which a loaded machine can reach before the touch (seen once
            // under make test's parallel suites, over flash).
            eq(get(c.set("t", 30, "v")), true, "set with 30 s");
            eq(get(c.touch("t", 3600)), true, "touch");
            eq(get(c.touch("missing", 10)), false, "touch missing");
            if (binary) {
                // GAT is a binary command in spymemcached ("not supported for
                // ASCII protocol").
                CASValue<Object> gat = c.getAndTouch("t", 3600);
                eq(gat == null ? null : gat.getValue(), "v", "getAndTouch");
                eq(c.getAndTouch("missing", 10), null, "getAndTouch missing");
            }
            // An absolute Unix time in the past: expired at once.
            eq(get(c.set("gone", 0, "v")), true, "set");
            eq(get(c.touch("gone", (int) (System.currentTimeMillis() / 1000) - 3600)), true, "touch to the past");
            eq(c.get("gone"), null, "expired");
        });

        CHECKS.put("delete", c -> {
            eq(get(c.set("d", 0, "x")), true, "set");
            eq(get(c.delete("d")), true, "delete");
            eq(c.get("d"), null, "gone");
            eq(get(c.delete("d")), false, "delete missing");
        });

        CHECKS.put("large-values", c -> {
            byte[] big = new byte[1024 * 1024 - 4096];
            new java.util.Random(1).nextBytes(big);
            eq(get(c.set("big", 0, big)), true, "set near 1 MiB");
            eq(c.get("big"), big, "get near 1 MiB");
            // Random bytes do not compress: 2 MiB is over the server's limit.
            // On a client of its own: over text the SERVER_ERROR makes
            // spymemcached drop the connection (and what was queued on it).
            byte[] huge = new byte[2 * 1024 * 1024];
            new java.util.Random(2).nextBytes(huge);
            MemcachedClient other = client(5000);
            try {
                if (binary) {
                    eq(get(other.set("huge", 0, huge)), false, "set 2 MiB");
                } else {
                    try {
                        get(other.set("huge", 0, huge));
                        throw new Failed("a 2 MiB value was stored");
                    } catch (java.util.concurrent.ExecutionException e) {
                        eq(e.getCause().getMessage(), "SERVER_ERROR object too large for cache", "set 2 MiB");
                    }
                }
            } finally {
                other.shutdown();
            }
            eq(c.get("huge"), null, "not stored");
            eq(get(c.set("after", 0, "ok")), true, "set after");
            eq(c.get("after"), "ok", "get after");
        });

        CHECKS.put("flush", c -> {
            eq(get(c.set("f1", 0, "a")), true, "set");
            eq(get(c.set("f2", 0, "b")), true, "set");
            eq(get(c.flush()), true, "flush");
            eq(c.getBulk("f1", "f2"), new HashMap<String, Object>(), "gone");
            eq(get(c.add("f1", 0, "again")), true, "add after flush");
        });

        CHECKS.put("stats-version", c -> {
            Map<SocketAddress, Map<String, String>> all = c.getStats();
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
            Map<String, String> settings = c.getStats("settings").values().iterator().next();
            eq(settings.get("item_size_max"), "1048576", "stats settings item_size_max");
            Map<SocketAddress, String> versions = c.getVersions();
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
            System.err.println("usage: SpymemcachedCheck PORT text|binary [CHECK...] | list");
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
        MemcachedClient c = client(5000);
        int failed = 0;
        for (int i = 0; i < names.size(); i++) {
            String name = names.get(i);
            try {
                eq(get(c.flush()), true, "flush before the check");
                CHECKS.get(name).run(c);
                System.out.println("ok " + (i + 1) + " - " + name);
            } catch (Throwable e) {
                failed++;
                String reason = e instanceof Failed ? e.getMessage() : e.toString();
                System.out.println("not ok " + (i + 1) + " - " + name + ": " + reason.replace("\n", "\n#   "));
            }
        }
        c.shutdown(2, TimeUnit.SECONDS);
        System.out.println("# " + (names.size() - failed) + "/" + names.size() + " checks passed (server 127.0.0.1:"
                + port + ", " + args[1] + ")");
        System.exit(failed == 0 ? 0 : 1);
    }
}
