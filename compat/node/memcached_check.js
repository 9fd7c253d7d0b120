#!/usr/bin/env node
// The npm package `memcached` (3rd-Eden's client, text protocol) against a
// memcached-compatible server.
//
//   node compat/node/memcached_check.js PORT CHECK [CHECK...]
//   node compat/node/memcached_check.js list
//
// Runs the named checks in order on one client for 127.0.0.1:PORT, flushing
// the cache before each; prints "ok N - name" or "not ok N - name: reason"
// per check and a summary line, and exits 0 only if every check passed
// (2 on bad arguments or the time limit).
//
// Environment: CHECK_EXPECT_PID, CHECK_EXPECT_VERSION (optional, checked by
// "stats-settings" and "version"); CHECK_TIME_LIMIT seconds (default 20).
//
// The library reports a miss as `undefined` and a refused store (NOT_STORED)
// as an error "Item is not stored" with `false`; EXISTS and NOT_FOUND as
// `false` without an error. Its flags: 0 string, 2 JSON, 4 Buffer, 8 number.

'use strict';

const assert = require('node:assert/strict');
const net = require('node:net');
const Memcached = require('memcached');

const PORT = process.argv[2];
const NAMES = process.argv.slice(3);
const SERVER = `127.0.0.1:${PORT}`;
const TIME_LIMIT = Number(process.env.CHECK_TIME_LIMIT || 20);

const FLAG_STRING = 0;
const FLAG_JSON = 2;
const FLAG_BINARY = 4;
const FLAG_NUMERIC = 8;

function makeClient(extra = {}) {
  // retries 0 and failures 0: a problem surfaces at once instead of being
  // retried away or waited out.
  return new Memcached(SERVER, { timeout: 3000, retries: 0, failures: 0, idle: 5000, ...extra });
}

// One library call as a promise of { err, data }.
function call(client, method, ...args) {
  return new Promise((resolve) => {
    client[method](...args, (err, data) => resolve({ err: err ? String(err.message || err) : null, data }));
  });
}

// The value of a call that must not fail.
async function ok(client, method, ...args) {
  const { err, data } = await call(client, method, ...args);
  assert.equal(err, null, `${method}(${JSON.stringify(args[0])}) failed`);
  return data;
}

// The item as the text protocol shows it, on a connection of our own.
function raw(command, terminator = 'END\r\n') {
  return new Promise((resolve, reject) => {
    const sock = net.connect(Number(PORT), '127.0.0.1');
    let buf = Buffer.alloc(0);
    sock.setTimeout(3000, () => { sock.destroy(); reject(new Error(`no reply to ${command}`)); });
    sock.on('error', reject);
    sock.on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      if (buf.toString('latin1').endsWith(terminator)) {
        sock.end();
        resolve(buf);
      }
    });
    sock.write(command);
  });
}

async function rawGet(key) {
  const reply = (await raw(`get ${key}\r\n`)).toString('latin1');
  if (reply === 'END\r\n') return null;
  const m = /^VALUE (\S+) (\d+) (\d+)\r\n/.exec(reply);
  assert.ok(m, `raw get ${key}: ${JSON.stringify(reply)}`);
  const start = m[0].length;
  return { flags: Number(m[2]), data: reply.slice(start, start + Number(m[3])) };
}

const CHECKS = [
  ['set-get', async (c) => {
    assert.equal(await ok(c, 'set', 'k', 'hello', 0), true);
    assert.equal(await ok(c, 'get', 'k'), 'hello');
    assert.equal(await ok(c, 'set', 'k', 'world', 0), true);
    assert.equal(await ok(c, 'get', 'k'), 'world');
    assert.equal(await ok(c, 'get', 'missing'), undefined);
    assert.equal(await ok(c, 'set', 'empty', '', 0), true);
    assert.equal(await ok(c, 'get', 'empty'), '');
    const longKey = 'x'.repeat(250);
    assert.equal(await ok(c, 'set', longKey, 'long', 0), true);
    assert.equal(await ok(c, 'get', longKey), 'long');
    // Over 250 bytes the library stores under the key's MD5 (keyCompression).
    const longer = 'y'.repeat(251);
    assert.equal(await ok(c, 'set', longer, 'v', 0), true);
    assert.equal(await ok(c, 'get', longer), 'v');
    const md5 = require('node:crypto').createHash('md5').update(longer).digest('hex');
    assert.deepEqual(await rawGet(md5), { flags: FLAG_STRING, data: 'v' });
    // Keys with whitespace are refused before anything is sent.
    assert.deepEqual(await call(c, 'set', 'a b', 'v', 0),
      { err: 'The key should not contain any whitespace or new lines', data: undefined });
    assert.deepEqual(await rawGet('k'), { flags: FLAG_STRING, data: 'world' });
  }],

  ['types', async (c) => {
    const obj = { a: [1, 2], b: 'c' };
    const bytes = Buffer.from([0, 1, 13, 10, 255]);
    assert.equal(await ok(c, 'set', 'json', obj, 0), true);
    assert.equal(await ok(c, 'set', 'num', 42.5, 0), true);
    assert.equal(await ok(c, 'set', 'buf', bytes, 0), true);
    assert.deepEqual(await ok(c, 'get', 'json'), obj);
    assert.equal(await ok(c, 'get', 'num'), 42.5);
    assert.deepEqual(await ok(c, 'get', 'buf'), bytes);
    assert.deepEqual(await rawGet('json'), { flags: FLAG_JSON, data: JSON.stringify(obj) });
    assert.deepEqual(await rawGet('num'), { flags: FLAG_NUMERIC, data: '42.5' });
    // A Buffer goes as a string: its CR and LF escaped with a backslash,
    // bytes over 0x7f as UTF-8 of their latin1 characters.
    const sent = Buffer.concat([Buffer.from([0, 1]), Buffer.from('\\\r\\\n'), Buffer.from('\u00ff', 'utf8')]);
    assert.deepEqual(await rawGet('buf'), { flags: FLAG_BINARY, data: sent.toString('latin1') });
  }],

  ['get-multi', async (c) => {
    const keys = Array.from({ length: 100 }, (_, i) => `mk${i}`);
    const want = {};
    for (const [i, k] of keys.entries()) {
      if (i % 3 !== 0) {
        assert.equal(await ok(c, 'set', k, `value-${i}`, 0), true);
        want[k] = `value-${i}`;
      }
    }
    assert.deepEqual(await ok(c, 'getMulti', keys), want);
    assert.deepEqual(await ok(c, 'getMulti', ['mk0', 'nope']), {});
  }],

  ['add-replace', async (c) => {
    assert.equal(await ok(c, 'add', 'a', '1', 0), true);
    assert.deepEqual(await call(c, 'add', 'a', '2', 0), { err: 'Item is not stored', data: false });
    assert.equal(await ok(c, 'get', 'a'), '1');
    assert.deepEqual(await call(c, 'replace', 'r', 'x', 0), { err: 'Item is not stored', data: false });
    assert.equal(await ok(c, 'get', 'r'), undefined);
    assert.equal(await ok(c, 'set', 'r', 'x', 0), true);
    assert.equal(await ok(c, 'replace', 'r', 'y', 0), true);
    assert.equal(await ok(c, 'get', 'r'), 'y');
  }],

  ['append-prepend', async (c) => {
    assert.equal(await ok(c, 'set', 'ap', 'mid', 0), true);
    assert.equal(await ok(c, 'append', 'ap', '-end'), true);
    assert.equal(await ok(c, 'prepend', 'ap', 'start-'), true);
    assert.equal(await ok(c, 'get', 'ap'), 'start-mid-end');
    assert.deepEqual(await call(c, 'append', 'nokey', 'x'), { err: 'Item is not stored', data: false });
    assert.deepEqual(await call(c, 'prepend', 'nokey', 'x'), { err: 'Item is not stored', data: false });
    assert.equal(await ok(c, 'get', 'nokey'), undefined);
  }],

  ['incr-decr', async (c) => {
    assert.equal(await ok(c, 'incr', 'n', 1), false, 'incr of a missing key');
    assert.equal(await ok(c, 'set', 'n', '10', 0), true);
    assert.equal(await ok(c, 'incr', 'n', 5), 15);
    assert.equal(await ok(c, 'decr', 'n', 3), 12);
    assert.equal(await ok(c, 'decr', 'n', 100), 0, 'decr stops at 0');
    // "12" became "0 ": memcached pads a shorter number with spaces.
    assert.deepEqual(await rawGet('n'), { flags: FLAG_STRING, data: '0 ' });
    assert.equal(await ok(c, 'set', 'max', '18446744073709551615', 0), true);
    assert.equal(await ok(c, 'incr', 'max', 2), 1, 'incr wraps at 2^64');
    assert.equal(await ok(c, 'set', 'word', 'abc', 0), true);
    assert.deepEqual(await call(c, 'incr', 'word', 1),
      { err: 'cannot increment or decrement non-numeric value', data: false });
    assert.equal(await ok(c, 'get', 'word'), 'abc');
  }],

  ['gets-cas', async (c) => {
    assert.equal(await ok(c, 'set', 'c', 'v1', 0), true);
    const got = await ok(c, 'gets', 'c');
    assert.deepEqual(Object.keys(got), ['c', 'cas']);
    assert.equal(got.c, 'v1');
    assert.match(got.cas, /^[1-9]\d*$/);
    assert.equal(await ok(c, 'cas', 'c', 'v2', got.cas, 0), true);
    assert.equal(await ok(c, 'get', 'c'), 'v2');
    assert.equal(await ok(c, 'cas', 'c', 'v3', got.cas, 0), false, 'stale token: EXISTS');
    assert.equal(await ok(c, 'get', 'c'), 'v2');
    const again = await ok(c, 'gets', 'c');
    assert.notEqual(again.cas, got.cas);
    assert.equal(await ok(c, 'cas', 'missing', 'x', again.cas, 0), false, 'missing key: NOT_FOUND');
    assert.equal(await ok(c, 'gets', 'missing'), undefined);
  }],

  ['touch', async (c) => {
    assert.equal(await ok(c, 'set', 't', 'v', 0), true);
    assert.equal(await ok(c, 'touch', 't', 100), true);
    const ttl = (await raw('mg t t\r\n', '\r\n')).toString();
    assert.ok(['HD t100\r\n', 'HD t99\r\n'].includes(ttl), ttl);
    assert.equal(await ok(c, 'touch', 'missing', 100), false);
    assert.equal(await ok(c, 'set', 'ttl', 'v', 200), true);
    const ttl2 = (await raw('mg ttl t\r\n', '\r\n')).toString();
    assert.ok(['HD t200\r\n', 'HD t199\r\n'].includes(ttl2), ttl2);
    assert.equal(await ok(c, 'get', 't'), 'v');
  }],

  ['delete', async (c) => {
    assert.equal(await ok(c, 'set', 'd', 'x', 0), true);
    assert.equal(await ok(c, 'del', 'd'), true);
    assert.equal(await ok(c, 'get', 'd'), undefined);
    assert.equal(await ok(c, 'del', 'd'), false);
  }],

  ['flush', async (c) => {
    assert.equal(await ok(c, 'set', 'f1', 'a', 0), true);
    assert.equal(await ok(c, 'set', 'f2', 'b', 0), true);
    assert.deepEqual(await ok(c, 'flush'), [true]);
    assert.deepEqual(await ok(c, 'getMulti', ['f1', 'f2']), {});
    assert.equal(await ok(c, 'add', 'f1', 'again', 0), true);
  }],

  ['large-values', async (c) => {
    const big = 'b'.repeat(1024 * 1024 - 4096);
    assert.equal(await ok(c, 'set', 'big', big, 0), true);
    assert.equal(await ok(c, 'get', 'big'), big);
    // Over the library's maxValue (1 MiB by default): refused before sending.
    assert.deepEqual(await call(c, 'set', 'huge', 'h'.repeat(2 * 1024 * 1024), 0),
      { err: 'The length of the value is greater than 1048576', data: false });
    // With a larger maxValue the server refuses it: SERVER_ERROR, which the
    // library answers with false (and takes the server for failing, so
    // that client is done).
    const lax = makeClient({ maxValue: 4 * 1024 * 1024 });
    try {
      assert.deepEqual(await call(lax, 'set', 'huge', 'h'.repeat(2 * 1024 * 1024), 0), { err: null, data: false });
    } finally {
      lax.end();
    }
    assert.equal(await ok(c, 'get', 'huge'), undefined);
    assert.equal(await ok(c, 'set', 'after', 'ok', 0), true);
    assert.equal(await ok(c, 'get', 'after'), 'ok');
  }],

  ['stats-settings', async (c) => {
    const [stats] = await ok(c, 'stats');
    assert.equal(stats.server, SERVER);
    if (process.env.CHECK_EXPECT_PID) assert.equal(stats.pid, Number(process.env.CHECK_EXPECT_PID));
    assert.equal(stats.limit_maxbytes, 64 * 1024 * 1024);
    assert.equal(await ok(c, 'set', 's1', 'x', 0), true);
    assert.equal(await ok(c, 'get', 's1'), 'x');
    assert.equal(await ok(c, 'get', 's-missing'), undefined);
    const [after] = await ok(c, 'stats');
    assert.deepEqual(
      ['cmd_set', 'cmd_get', 'get_hits', 'get_misses'].map((k) => after[k] - stats[k]),
      [1, 2, 1, 1],
    );
    const [settings] = await ok(c, 'settings');
    assert.equal(settings.server, SERVER);
    assert.equal(settings.tcpport, Number(PORT));
    assert.equal(settings.maxbytes, 64 * 1024 * 1024);
    assert.equal(settings.item_size_max, 1024 * 1024);
    assert.equal(settings.cas_enabled, 'yes');
  }],

  ['version', async (c) => {
    const versions = await ok(c, 'version');
    assert.equal(versions.length, 1);
    const v = versions[0];
    assert.deepEqual(Object.keys(v).sort(), ['bugfix', 'major', 'minor', 'server', 'version']);
    assert.equal(v.server, SERVER);
    // Parsed by the library's /(\d+)\.(\d+)\.(\d+)$/ from "VERSION x.y.z".
    assert.equal(v.major, '1');
    assert.equal(v.minor, '6');
    assert.match(v.bugfix, /^\d+$/);
    assert.equal(v.version, `1.6.${v.bugfix}`);
    const [stats] = await ok(c, 'stats');
    assert.equal(v.version, stats.version);
    if (process.env.CHECK_EXPECT_VERSION) assert.equal(v.version, process.env.CHECK_EXPECT_VERSION);
  }],
];

async function main() {
  if (PORT === 'list') {
    console.log(CHECKS.map(([name]) => name).join('\n'));
    return 0;
  }
  if (!/^\d+$/.test(PORT || '') || NAMES.length === 0) {
    console.error('usage: node memcached_check.js PORT CHECK [CHECK...] | list');
    return 2;
  }
  const unknown = NAMES.filter((name) => !CHECKS.some(([n]) => n === name));
  if (unknown.length) {
    console.error(`unknown check(s): ${unknown.join(', ')}`);
    return 2;
  }
  setTimeout(() => {
    console.log(`not ok - time limit of ${TIME_LIMIT}s reached`);
    process.exit(2);
  }, TIME_LIMIT * 1000).unref();

  const client = makeClient();
  let failed = 0;
  for (const [i, name] of NAMES.entries()) {
    const fn = CHECKS.find(([n]) => n === name)[1];
    try {
      assert.deepEqual(await ok(client, 'flush'), [true]);
      await fn(client);
      console.log(`ok ${i + 1} - ${name}`);
    } catch (err) {
      failed += 1;
      const reason = err instanceof Error ? err.message : JSON.stringify(err);
      console.log(`not ok ${i + 1} - ${name}: ${reason.replace(/\n/g, '\n#   ')}`);
    }
  }
  client.end();
  console.log(`# ${NAMES.length - failed}/${NAMES.length} checks passed (server ${SERVER})`);
  return failed ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.log(`not ok - crashed: ${err && err.stack ? err.stack : err}`);
    process.exit(1);
  },
);
