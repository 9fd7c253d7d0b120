<?php
// php-memcached (PECL memcached over libmemcached) against a
// memcached-compatible server.
//
//   php compat/php/memcached_check.php PORT text|binary CHECK [CHECK...]
//
// Runs the named checks in order on one Memcached client for 127.0.0.1:PORT
// (binary: Memcached::OPT_BINARY_PROTOCOL), flushing the cache before each,
// prints "ok N - name" or "not ok N - name: reason" per check and a summary
// line, and exits 0 only if every check passed (2 on bad arguments).
// `php memcached_check.php list` prints the check names.
//
// Where libmemcached answers differently over the two protocols (the same
// against Debian's memcached), the check expects each protocol's answer.

declare(strict_types=1);

final class CheckFailed extends Exception {}

function fmt($v): string
{
    return json_encode($v, JSON_UNESCAPED_SLASHES | JSON_INVALID_UTF8_SUBSTITUTE | JSON_PRESERVE_ZERO_FRACTION);
}

function eq($got, $want, string $what): void
{
    if ($got !== $want) {
        throw new CheckFailed("$what: got " . fmt($got) . ", want " . fmt($want));
    }
}

// The client's result code after the last call.
function code(Memcached $m, int $want, string $what): void
{
    eq($m->getResultCode(), $want, "$what result code (" . $m->getResultMessage() . ")");
}

// Polls $fn until it returns $want, for at most $seconds; returns the last value.
function wait_for(callable $fn, $want, float $seconds = 5.0)
{
    $deadline = microtime(true) + $seconds;
    do {
        $got = $fn();
        if ($got === $want) {
            return $got;
        }
        usleep(50000);
    } while (microtime(true) < $deadline);
    return $got;
}

function sorted_keys($keys)
{
    if (!is_array($keys)) {
        return $keys;
    }
    sort($keys, SORT_STRING);
    return $keys;
}

$CHECKS = [
    'set-get' => function (Memcached $m, bool $bin) {
        eq($m->set('k', 'hello'), true, 'set');
        code($m, Memcached::RES_SUCCESS, 'set');
        eq($m->get('k'), 'hello', 'get');
        eq($m->set('k', 'world'), true, 'overwrite');
        eq($m->get('k'), 'world', 'get after overwrite');
        eq($m->get('missing'), false, 'get missing');
        code($m, Memcached::RES_NOTFOUND, 'get missing');
        eq($m->set('empty', ''), true, 'set empty');
        eq($m->get('empty'), '', 'get empty');
        $all = implode('', array_map('chr', range(0, 255)));
        eq($m->set('bin', $all), true, 'set 256 bytes');
        eq($m->get('bin'), $all, 'get 256 bytes');
        $long = str_repeat('x', 250);
        eq($m->set($long, 'long'), true, 'set 250-byte key');
        eq($m->get($long), 'long', 'get 250-byte key');
        eq($m->set(str_repeat('x', 251), 'v'), false, 'set 251-byte key');
        code($m, Memcached::RES_BAD_KEY_PROVIDED, 'set 251-byte key');
    },

    'types' => function (Memcached $m, bool $bin) {
        // Each PHP type goes with its own flags and comes back as it was.
        $values = ['int' => 42, 'neg' => -7, 'float' => 1.5, 'true' => true, 'false' => false,
                   'null' => null, 'array' => ['a' => [1, 2], 'b' => 'c'], 'string' => '42'];
        foreach ($values as $k => $v) {
            eq($m->set($k, $v), true, "set $k");
        }
        foreach ($values as $k => $v) {
            eq($m->get($k), $v, "get $k");
        }
        // GET_EXTENDED's flags are the user's (setOption USER_FLAGS), 0 here;
        // the type bits stay inside the extension.
        $ext = $m->get('array', null, Memcached::GET_EXTENDED);
        eq([$ext['value'], $ext['flags']], [$values['array'], 0], 'GET_EXTENDED');
    },

    'get-multi' => function (Memcached $m, bool $bin) {
        $values = [];
        for ($i = 0; $i < 100; $i++) {
            $values["mk$i"] = "value-$i";
        }
        eq($m->setMulti($values), true, 'setMulti');
        $keys = array_keys($values);
        $keys[] = 'nope1';
        $keys[] = 'nope2';
        shuffle($keys);
        $got = $m->getMulti($keys);
        ksort($got, SORT_STRING);
        ksort($values, SORT_STRING);
        eq($got, $values, 'getMulti');
        eq($m->getMulti(['nope1']), [], 'getMulti of a missing key');
        eq($m->getMulti(['mk2', 'nope', 'mk1'], Memcached::GET_PRESERVE_ORDER),
            ['mk2' => 'value-2', 'nope' => null, 'mk1' => 'value-1'], 'getMulti GET_PRESERVE_ORDER');
    },

    'delete' => function (Memcached $m, bool $bin) {
        eq($m->setMulti(['d1' => 1, 'd2' => 2, 'd3' => 3]), true, 'setMulti');
        eq($m->delete('d1'), true, 'delete');
        eq($m->get('d1'), false, 'get deleted');
        eq($m->delete('d1'), false, 'delete again');
        code($m, Memcached::RES_NOTFOUND, 'delete again');
        eq($m->deleteMulti(['d2', 'd1', 'd3']), ['d2' => true, 'd1' => Memcached::RES_NOTFOUND, 'd3' => true], 'deleteMulti');
        eq($m->getMulti(['d1', 'd2', 'd3']), [], 'all gone');
    },

    'add-replace' => function (Memcached $m, bool $bin) {
        eq($m->add('a', '1'), true, 'add');
        eq($m->add('a', '2'), false, 'add existing');
        // libmemcached: NOT_STORED over text, the binary status 0x02 (exists) over binary.
        code($m, $bin ? Memcached::RES_DATA_EXISTS : Memcached::RES_NOTSTORED, 'add existing');
        eq($m->get('a'), '1', 'value kept');
        eq($m->replace('r', 'x'), false, 'replace missing');
        code($m, $bin ? Memcached::RES_NOTFOUND : Memcached::RES_NOTSTORED, 'replace missing');
        eq($m->get('r'), false, 'not created');
        eq($m->set('r', 'x'), true, 'set');
        eq($m->replace('r', 'y'), true, 'replace');
        eq($m->get('r'), 'y', 'replaced');
    },

    'append-prepend' => function (Memcached $m, bool $bin) {
        // php-memcached refuses append/prepend while compression is on.
        $m->setOption(Memcached::OPT_COMPRESSION, false);
        try {
            eq($m->set('ap', 'mid'), true, 'set');
            eq($m->append('ap', '-end'), true, 'append');
            eq($m->prepend('ap', 'start-'), true, 'prepend');
            eq($m->get('ap'), 'start-mid-end', 'get');
            eq($m->append('nokey', 'x'), false, 'append missing');
            code($m, Memcached::RES_NOTSTORED, 'append missing');
            eq($m->prepend('nokey', 'x'), false, 'prepend missing');
            code($m, Memcached::RES_NOTSTORED, 'prepend missing');
            eq($m->get('nokey'), false, 'not created');
        } finally {
            $m->setOption(Memcached::OPT_COMPRESSION, true);
        }
    },

    'increment-decrement' => function (Memcached $m, bool $bin) {
        eq($m->increment('n'), false, 'increment missing');
        code($m, Memcached::RES_NOTFOUND, 'increment missing');
        eq($m->set('n', 10), true, 'set');
        eq($m->increment('n'), 11, 'increment');
        eq($m->increment('n', 5), 16, 'increment by 5');
        eq($m->decrement('n', 6), 10, 'decrement');
        eq($m->decrement('n', 100), 0, 'decrement stops at 0');
        eq($m->get('n'), 0, 'get');
        eq($m->set('max', '18446744073709551615'), true, 'set 2^64-1');
        eq($m->increment('max', 2), 1, 'increment wraps');
        if ($bin) {
            // The binary INCREMENT creates a missing key with the initial value.
            eq($m->increment('created', 5, 10), 10, 'increment with initial value');
            // Stored as the server's digits, flags 0: a string to PHP.
            eq($m->get('created'), '10', 'created');
            eq($m->decrement('created2', 5, 3), 3, 'decrement with initial value');
        }
        eq($m->set('word', 'abc'), true, 'set non-numeric');
        eq($m->increment('word'), false, 'increment non-numeric');
        code($m, $bin ? Memcached::RES_UNKNOWN_READ_FAILURE : Memcached::RES_CLIENT_ERROR, 'increment non-numeric');
        eq($m->get('word'), 'abc', 'value kept');
    },

    'cas' => function (Memcached $m, bool $bin) {
        eq($m->set('c', 'v1'), true, 'set');
        $ext = $m->get('c', null, Memcached::GET_EXTENDED);
        eq($ext['value'], 'v1', 'GET_EXTENDED value');
        $cas = $ext['cas'];
        if (!is_int($cas) || $cas <= 0) {
            throw new CheckFailed('cas token ' . fmt($cas));
        }
        eq($m->cas($cas, 'c', 'v2'), true, 'cas with the token');
        eq($m->get('c'), 'v2', 'swapped');
        eq($m->cas($cas, 'c', 'v3'), false, 'cas with a stale token');
        code($m, Memcached::RES_DATA_EXISTS, 'stale token');
        eq($m->get('c'), 'v2', 'not swapped');
        $cas2 = $m->get('c', null, Memcached::GET_EXTENDED)['cas'];
        if ($cas2 === $cas) {
            throw new CheckFailed('token unchanged by a write');
        }
        eq($m->cas($cas2, 'missing', 'x'), false, 'cas of a missing key');
        code($m, Memcached::RES_NOTFOUND, 'cas of a missing key');
        $multi = $m->getMulti(['c'], Memcached::GET_EXTENDED);
        eq($multi['c']['cas'], $cas2, 'getMulti GET_EXTENDED token');
    },

    'touch' => function (Memcached $m, bool $bin) {
        eq($m->set('t', 'v', 1), true, 'set with 1 s');
        eq($m->touch('t', 3600), true, 'touch');
        eq($m->touch('missing', 10), false, 'touch missing');
        code($m, Memcached::RES_NOTFOUND, 'touch missing');
        eq($m->set('gone', 'v'), true, 'set');
        // An absolute Unix time in the past: expired at once.
        eq($m->touch('gone', time() - 3600), true, 'touch to the past');
        eq($m->get('gone'), false, 'expired at once');
        eq($m->get('t'), 'v', 'still there');
    },

    'get-all-keys' => function (Memcached $m, bool $bin) {
        $keys = [];
        for ($i = 0; $i < 30; $i++) {
            $keys[] = "gak:$i";
        }
        $keys[] = 'other';
        eq($m->setMulti(array_fill_keys($keys, 'v')), true, 'setMulti');
        if ($bin) {
            // libmemcached dumps keys with "stats cachedump", a text command only.
            eq($m->getAllKeys(), false, 'getAllKeys over binary');
            code($m, Memcached::RES_NOT_SUPPORTED, 'getAllKeys over binary');
            return;
        }
        $want = sorted_keys($keys);
        // memcached lists a new item only once its LRU maintainer has moved
        // it (about a second later); strata lists it at once.
        eq(wait_for(fn () => sorted_keys($m->getAllKeys()), $want), $want, 'getAllKeys');
        code($m, Memcached::RES_SUCCESS, 'getAllKeys');
        eq($m->delete('other'), true, 'delete');
        eq($m->deleteMulti(['gak:0', 'gak:1']), ['gak:0' => true, 'gak:1' => true], 'deleteMulti');
        $want = array_values(array_diff($want, ['other', 'gak:0', 'gak:1']));
        eq(wait_for(fn () => sorted_keys($m->getAllKeys()), $want), $want, 'getAllKeys after deletes');
        eq($m->flush(), true, 'flush');
        eq(wait_for(fn () => $m->getAllKeys(), []), [], 'getAllKeys after flush');
    },

    'large-values' => function (Memcached $m, bool $bin) {
        $m->setOption(Memcached::OPT_COMPRESSION, false);
        try {
            $big = random_bytes(1024 * 1024 - 4096);
            eq($m->set('big', $big), true, 'set near 1 MiB');
            eq($m->get('big'), $big, 'get near 1 MiB');
            eq($m->set('huge', str_repeat('x', 2 * 1024 * 1024)), false, 'set 2 MiB');
            code($m, Memcached::RES_E2BIG, 'set 2 MiB');
            eq($m->get('huge'), false, 'not stored');
            eq($m->set('after', 'ok'), true, 'set after');
            eq($m->get('after'), 'ok', 'get after');
        } finally {
            $m->setOption(Memcached::OPT_COMPRESSION, true);
        }
        // Compressed by php-memcached (over 2000 bytes): 3 MB of text
        // fits in an item.
        $text = str_repeat('abc', 1000000);
        eq($m->set('z', $text), true, 'set compressible');
        eq($m->get('z'), $text, 'get compressible');
    },

    'flush' => function (Memcached $m, bool $bin) {
        eq($m->setMulti(['f1' => 'a', 'f2' => 'b']), true, 'setMulti');
        eq($m->flush(), true, 'flush');
        eq($m->getMulti(['f1', 'f2']), [], 'gone');
        eq($m->add('f1', 'again'), true, 'add after flush');
    },

    'stats-version' => function (Memcached $m, bool $bin) {
        global $SERVER;
        $stats = $m->getStats();
        eq(array_keys($stats), [$SERVER], 'servers');
        $s = $stats[$SERVER];
        $pid = getenv('CHECK_EXPECT_PID');
        if ($pid !== false) {
            eq($s['pid'], (int)$pid, 'pid');
        }
        eq($s['limit_maxbytes'], 64 * 1024 * 1024, 'limit_maxbytes');
        $before = $s['cmd_get'];
        eq($m->get('sv-missing'), false, 'get');
        eq($m->getStats()[$SERVER]['cmd_get'], $before + 1, 'cmd_get counted');
        $version = $m->getVersion();
        eq(array_keys($version), [$SERVER], 'version servers');
        if (!preg_match('/^1\.6\.\d+$/', $version[$SERVER])) {
            throw new CheckFailed('version ' . fmt($version[$SERVER]) . ' is not 1.6.x');
        }
        eq($version[$SERVER], $s['version'], 'version as in stats');
        $want = getenv('CHECK_EXPECT_VERSION');
        if ($want !== false) {
            eq($version[$SERVER], $want, 'expected version');
        }
    },
];

if (($argv[1] ?? '') === 'list') {
    echo implode("\n", array_keys($CHECKS)), "\n";
    exit(0);
}
if ($argc < 4 || !ctype_digit($argv[1]) || !in_array($argv[2], ['text', 'binary'], true)) {
    fwrite(STDERR, "usage: php memcached_check.php PORT text|binary CHECK [CHECK...] | list\n");
    exit(2);
}
$names = array_slice($argv, 3);
foreach ($names as $name) {
    if (!isset($CHECKS[$name])) {
        fwrite(STDERR, "unknown check $name\n");
        exit(2);
    }
}

$SERVER = "127.0.0.1:{$argv[1]}";
$bin = $argv[2] === 'binary';
$m = new Memcached();
$m->setOptions([
    Memcached::OPT_BINARY_PROTOCOL => $bin,
    Memcached::OPT_CONNECT_TIMEOUT => 5000,
    Memcached::OPT_SEND_TIMEOUT => 5000000,
    Memcached::OPT_RECV_TIMEOUT => 5000000,
    Memcached::OPT_POLL_TIMEOUT => 5000,
]);
$m->addServer('127.0.0.1', (int)$argv[1]);

$failed = 0;
foreach ($names as $i => $name) {
    $n = $i + 1;
    try {
        eq($m->flush(), true, 'flush before the check');
        $CHECKS[$name]($m, $bin);
        echo "ok $n - $name\n";
    } catch (Throwable $e) {
        $failed++;
        echo "not ok $n - $name: ", str_replace("\n", "\n#   ", $e->getMessage()), "\n";
    }
}
$total = count($names);
echo '# ', $total - $failed, "/$total checks passed (server $SERVER, {$argv[2]})\n";
exit($failed ? 1 : 0);
