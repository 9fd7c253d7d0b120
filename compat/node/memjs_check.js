#!/usr/bin/env node
// memjs (npm, binary protocol) against a memcached-compatible server.
//
//   MEMJS_SERVER=127.0.0.1:11211 node compat/node/memjs_check.js
//
// Environment:
//   MEMJS_SERVER      host:port of the server (required)
//   MEMJS_USER/PASS   SASL PLAIN credentials handed to memjs (optional)
//   MEMJS_EXPECT      "ok" (default): run the command checks, every one must pass;
//                     "auth-failure": the server must refuse every command with
//                     memjs's authentication error (wrong or missing credentials)
//   MEMJS_CHECKS      comma-separated check names to run (default: all of the mode)
//   MEMJS_TIME_LIMIT  seconds before the whole run is abandoned (default 20)
//
// Prints "ok N - name" or "not ok N - name: reason" per check, then a summary
// line; exits 0 only if every selected check passed (2 on the time limit).
//
// memjs 1.3.2 (the newest release on npm) has no getMulti and no version
// method: a memjs user fetches several keys with concurrent get() calls, which
// memjs pipelines on its one connection and matches up by opaque, and reaches
// other opcodes with Utils.makeRequestBuffer + Client#perform, which is what
// the "multi-get" and "version" checks do. Its prepend() sends the APPEND
// opcode (0x0E), so the "append-prepend" check expects an append.

'use strict';

const assert = require('node:assert/strict');
const memjs = require('memjs');

const SERVER = process.env.MEMJS_SERVER;
const USER = process.env.MEMJS_USER || undefined;
const PASS = process.env.MEMJS_PASS || undefined;
const EXPECT = process.env.MEMJS_EXPECT || 'ok';
const ONLY = (process.env.MEMJS_CHECKS || '').split(',').filter(Boolean);
const TIME_LIMIT = Number(process.env.MEMJS_TIME_LIMIT || 20);

// The error memjs hands to callbacks (a string, not an Error) when the server
// answers a request with status 0x20 (authentication error).
const AUTH_FAILED = 'Memcached server authentication failed!';

if (!SERVER) {
  console.error('MEMJS_SERVER (host:port) is not set');
  process.exit(2);
}
if (!['ok', 'auth-failure'].includes(EXPECT)) {
  console.error(`MEMJS_EXPECT must be "ok" or "auth-failure", not ${JSON.stringify(EXPECT)}`);
  process.exit(2);
}

setTimeout(() => {
  console.log(`not ok - time limit of ${TIME_LIMIT}s reached`);
  process.exit(2);
}, TIME_LIMIT * 1000).unref();

// memjs logs failed requests through options.logger; keep them for the report.
const logged = [];
const logger = { log: (...args) => logged.push(args.join(' ')) };

function makeClient(extra = {}) {
  return memjs.Client.create(SERVER, {
    username: USER,
    password: PASS,
    timeout: 3, // seconds per request (memjs default 0.5; CI machines are slow)
    retries: 1, // one attempt: a failure must surface, not be retried away
    logger,
    ...extra,
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const buf = (s) => Buffer.from(s);
const ZERO_FLAGS = Buffer.alloc(4);

// One request through memjs's own plumbing, for opcodes it has no method for.
function rawRequest(client, opcode, key = '', extras = '', value = '') {
  return new Promise((resolve, reject) => {
    client.incrSeq();
    const request = memjs.Utils.makeRequestBuffer(opcode, key, extras, value, client.seq);
    client.perform(key, request, client.seq, (err, response) => (err ? reject(err) : resolve(response)));
  });
}

// stats/resetStats report through a callback invoked once per server.
function stats(client, key) {
  return new Promise((resolve, reject) => {
    const cb = (err, server, result) => (err ? reject(err) : resolve({ server, stats: result }));
    if (key === undefined) client.stats(cb);
    else if (key === 'reset') client.resetStats(cb);
    else client.statsWithKey(key, cb);
  });
}

async function getString(client, key) {
  const { value } = await client.get(key);
  return value === null ? null : value.toString();
}

// Resolves once memjs has seen its socket to the server close.
async function waitClosed(client, ms = 3000) {
  const serv = client.servers[0];
  const deadline = Date.now() + ms;
  while (serv._socket !== undefined) {
    if (Date.now() > deadline) throw new Error('connection still open after quit');
    await sleep(10);
  }
}

// Checks run in order on one client `c` whose cache was flushed just before.
const CHECKS = [
  ['set-get', async (c) => {
    assert.equal(await c.set('k', 'hello'), true);
    const got = await c.get('k');
    assert.deepEqual(got.value, buf('hello'));
    assert.deepEqual(got.flags, ZERO_FLAGS, 'memjs stores flags 0');
    assert.equal(await c.set('k', 'world'), true);
    assert.equal(await getString(c, 'k'), 'world');
    assert.deepEqual(await c.get('missing'), { value: null, flags: null });
    assert.equal(await c.set('empty', ''), true);
    assert.deepEqual((await c.get('empty')).value, Buffer.alloc(0));
  }],

  ['binary-values-and-keys', async (c) => {
    const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    assert.equal(await c.set('bin', all), true);
    assert.deepEqual((await c.get('bin')).value, all);
    // Keys are sent as UTF-8; 250 bytes is the longest a server accepts.
    assert.equal(await c.set('ключ-€', 'utf8 key'), true);
    assert.equal(await getString(c, 'ключ-€'), 'utf8 key');
    const longKey = 'x'.repeat(250);
    assert.equal(await c.set(longKey, 'long'), true);
    assert.equal(await getString(c, longKey), 'long');
  }],

  ['large-values', async (c) => {
    const big = Buffer.alloc(1024 * 1024 - 4096, 0x61);
    assert.equal(await c.set('big', big), true);
    assert.ok((await c.get('big')).value.equals(big));
    // Over the default 1 MiB item limit: E2BIG, which memjs turns into an Error.
    await assert.rejects(c.set('huge', Buffer.alloc(2 * 1024 * 1024, 0x62)), {
      message: 'MemJS SET: Value too large',
    });
    assert.equal(await c.get('huge').then((r) => r.value), null);
    // The connection is still in step after the rejected value.
    assert.equal(await getString(c, 'k'), null);
    assert.equal(await c.set('after', 'big'), true);
    assert.equal(await getString(c, 'after'), 'big');
  }],

  ['key-too-long', async (c) => {
    // 251 bytes: the server answers EINVAL (and closes the connection);
    // memjs reports it and reconnects for the next request.
    await assert.rejects(c.set('y'.repeat(251), 'v'), { message: 'MemJS SET: Invalid arguments' });
    await waitClosed(c);
    assert.equal(await c.set('k2', 'v2'), true);
    assert.equal(await getString(c, 'k2'), 'v2');
  }],

  ['multi-get', async (c) => {
    const keys = Array.from({ length: 100 }, (_, i) => `mk${i}`);
    for (const [i, k] of keys.entries()) {
      if (i % 3 !== 0) assert.equal(await c.set(k, `value-${i}`), true);
    }
    // All 100 requests are written before any reply is read.
    const got = await Promise.all(keys.map((k) => c.get(k)));
    got.forEach((r, i) => {
      assert.deepEqual(r.value, i % 3 === 0 ? null : buf(`value-${i}`), keys[i]);
    });
  }],

  ['add', async (c) => {
    assert.equal(await c.add('a', '1'), true);
    assert.equal(await c.add('a', '2'), false);
    assert.equal(await getString(c, 'a'), '1');
  }],

  ['replace', async (c) => {
    assert.equal(await c.replace('r', 'x'), false);
    assert.equal(await getString(c, 'r'), null);
    assert.equal(await c.set('r', 'x'), true);
    assert.equal(await c.replace('r', 'y'), true);
    assert.equal(await getString(c, 'r'), 'y');
  }],

  ['delete', async (c) => {
    assert.equal(await c.set('d', 'x'), true);
    assert.equal(await c.delete('d'), true);
    assert.equal(await getString(c, 'd'), null);
    assert.equal(await c.delete('d'), false);
  }],

  ['increment-decrement', async (c) => {
    // Missing key: created with `initial` (the amount is not added).
    assert.deepEqual(await c.increment('n', 5, { initial: 10 }), { success: true, value: 10 });
    assert.equal(await getString(c, 'n'), '10');
    assert.deepEqual(await c.increment('n', 5, {}), { success: true, value: 15 });
    assert.deepEqual(await c.decrement('n', 3, {}), { success: true, value: 12 });
    assert.equal(await getString(c, 'n'), '12');
    // decrement stops at 0
    assert.deepEqual(await c.decrement('n', 100, {}), { success: true, value: 0 });
    assert.deepEqual(await c.decrement('fresh', 1, { initial: 7 }), { success: true, value: 7 });
    // A counter stored as text by set
    assert.equal(await c.set('t', '41'), true);
    assert.deepEqual(await c.increment('t', 1, {}), { success: true, value: 42 });
    assert.equal(await getString(c, 't'), '42');
    // Largest 32-bit amount memjs can send
    assert.deepEqual(await c.increment('big', 4294967295, { initial: 0 }), { success: true, value: 0 });
    assert.deepEqual(await c.increment('big', 4294967295, {}), { success: true, value: 4294967295 });
    assert.equal(await c.set('word', 'abc'), true);
    await assert.rejects(c.increment('word', 1, {}), {
      message: 'MemJS INCREMENT: Incr/Decr on non-numeric value',
    });
    await assert.rejects(c.decrement('word', 1, {}), {
      message: 'MemJS DECREMENT: Incr/Decr on non-numeric value',
    });
    assert.equal(await getString(c, 'word'), 'abc');
  }],

  ['append-prepend', async (c) => {
    assert.equal(await c.set('ap', 'mid'), true);
    assert.equal(await c.append('ap', '-end'), true);
    assert.equal(await getString(c, 'ap'), 'mid-end');
    // memjs 1.3.2's prepend() sends opcode 0x0E (APPEND), so it appends.
    assert.equal(await c.prepend('ap', '+tail'), true);
    assert.equal(await getString(c, 'ap'), 'mid-end+tail');
    // On a missing key the server answers NOT_STORED (0x05), which memjs
    // does not map to false but to an Error.
    await assert.rejects(c.append('nokey', 'x'), { message: 'MemJS APPEND: Item not stored' });
    await assert.rejects(c.prepend('nokey', 'x'), { message: 'MemJS PREPEND: Item not stored' });
    assert.equal(await getString(c, 'nokey'), null);
  }],

  ['expiry-and-touch', async (c) => {
    assert.equal(await c.set('exp', 'soon', { expires: 1 }), true);
    assert.equal(await c.set('touched', 'x'), true);
    assert.equal(await c.touch('touched', 1), true);
    assert.equal(await c.set('extended', 'y', { expires: 1 }), true);
    assert.equal(await c.touch('extended', 3600), true);
    assert.equal(await c.add('added', 'z', { expires: 1 }), true);
    assert.equal(await c.touch('nothere', 10), false);
    assert.equal(await getString(c, 'exp'), 'soon');
    await sleep(2500);
    assert.equal(await getString(c, 'exp'), null);
    assert.equal(await getString(c, 'touched'), null);
    assert.equal(await getString(c, 'added'), null);
    assert.equal(await getString(c, 'extended'), 'y');
    assert.equal(await c.touch('exp', 10), false);
  }],

  ['flush', async (c) => {
    assert.equal(await c.set('f1', 'a'), true);
    assert.equal(await c.set('f2', 'b'), true);
    assert.deepEqual(await c.flush(), { [SERVER]: true });
    assert.equal(await getString(c, 'f1'), null);
    assert.equal(await getString(c, 'f2'), null);
    assert.equal(await c.add('f1', 'again'), true);
  }],

  ['stats', async (c) => {
    const { server, stats: before } = await stats(c);
    assert.equal(server, SERVER);
    for (const name of ['pid', 'uptime', 'version', 'curr_items', 'get_hits', 'get_misses', 'cmd_get', 'cmd_set', 'curr_connections', 'total_connections']) {
      assert.match(before[name] ?? '', /^\S+$/, `stat ${name}`);
    }
    if (process.env.MEMJS_EXPECT_PID) assert.equal(before.pid, process.env.MEMJS_EXPECT_PID);
    assert.equal(await c.set('s1', 'abc'), true);
    assert.equal(await getString(c, 's1'), 'abc');
    assert.equal(await getString(c, 's-missing'), null);
    const { stats: after } = await stats(c);
    const delta = (name) => Number(after[name]) - Number(before[name]);
    assert.deepEqual(
      { cmd_set: delta('cmd_set'), cmd_get: delta('cmd_get'), get_hits: delta('get_hits'), get_misses: delta('get_misses') },
      { cmd_set: 1, cmd_get: 2, get_hits: 1, get_misses: 1 },
    );
    assert.equal(after.pid, before.pid);
    const { stats: settings } = await stats(c, 'settings');
    assert.equal(settings.maxbytes, String(64 * 1024 * 1024));
    assert.equal(settings.item_size_max, String(1024 * 1024));
  }],

  ['reset-stats', async (c) => {
    assert.equal(await getString(c, 'rs-missing'), null);
    assert.ok(Number((await stats(c)).stats.get_misses) >= 1);
    const reset = await stats(c, 'reset');
    assert.deepEqual(reset, { server: SERVER, stats: {} });
    const after = (await stats(c)).stats;
    assert.equal(after.get_misses, '0');
    assert.equal(after.get_hits, '0');
  }],

  ['version', async (c) => {
    const resp = await rawRequest(c, 0x0b);
    assert.equal(resp.header.status, 0);
    const version = resp.val.toString();
    assert.match(version, /^\d+\.\d+\.\d+/);
    assert.equal(version, (await stats(c)).stats.version);
    if (process.env.MEMJS_EXPECT_VERSION) assert.equal(version, process.env.MEMJS_EXPECT_VERSION);
  }],

  ['quit-and-reconnect', async (c) => {
    const before = Number((await stats(c)).stats.total_connections);
    c.quit();
    await waitClosed(c);
    assert.equal(await c.set('q', 'back'), true);
    assert.equal(await getString(c, 'q'), 'back');
    assert.equal(Number((await stats(c)).stats.total_connections), before + 1);
  }],
];

// With MEMJS_EXPECT=auth-failure: every request is refused with status 0x20,
// which memjs reports as AUTH_FAILED (a string) to the callback.
const AUTH_FAILURE_CHECKS = [
  ['get-refused', (c) => assert.rejects(c.get('k'), (e) => e === AUTH_FAILED)],
  ['set-refused', (c) => assert.rejects(c.set('k', 'v'), (e) => e === AUTH_FAILED)],
  ['increment-refused', (c) => assert.rejects(c.increment('n', 1, {}), (e) => e === AUTH_FAILED)],
  ['delete-refused', (c) => assert.rejects(c.delete('k'), (e) => e === AUTH_FAILED)],
  ['flush-refused', async (c) => {
    const err = await new Promise((resolve) => c.flush((e, results) => resolve([e, results])));
    assert.deepEqual(err, [AUTH_FAILED, { [SERVER]: AUTH_FAILED }]);
  }],
  // VERSION needs no authentication; with a wrong password memjs never gets
  // past SASL, so it is refused like everything else.
  USER
    ? ['version-refused', (c) => assert.rejects(rawRequest(c, 0x0b), (e) => e === AUTH_FAILED)]
    : ['version-allowed-unauthenticated', async (c) => {
      const resp = await rawRequest(c, 0x0b);
      assert.equal(resp.header.status, 0);
      assert.match(resp.val.toString(), /^\d+\.\d+\.\d+/);
      assert.deepEqual(await c.get('k').catch((e) => e), AUTH_FAILED);
    }],
];

async function main() {
  const checks = EXPECT === 'ok' ? CHECKS : AUTH_FAILURE_CHECKS;
  const selected = ONLY.length ? checks.filter(([name]) => ONLY.includes(name)) : checks;
  const unknown = ONLY.filter((name) => !checks.some(([n]) => n === name));
  if (unknown.length) {
    console.error(`unknown check(s) for MEMJS_EXPECT=${EXPECT}: ${unknown.join(', ')}`);
    process.exit(2);
  }
  // One client for all the command checks. For the refusals, a fresh client
  // per check: the server closes a connection after refusing a command, and
  // memjs 1.3.2 can lose the socket it reconnects with when the old one's
  // 'close' event arrives late (the next request then never goes out).
  let client = makeClient();
  let failed = 0;
  for (const [i, [name, fn]] of selected.entries()) {
    logged.length = 0;
    if (EXPECT !== 'ok' && i > 0) {
      client.close();
      client = makeClient();
    }
    try {
      if (EXPECT === 'ok') assert.deepEqual(await client.flush(), { [SERVER]: true });
      await fn(client);
      console.log(`ok ${i + 1} - ${name}`);
    } catch (err) {
      failed += 1;
      const reason = err instanceof Error ? err.message : JSON.stringify(err);
      console.log(`not ok ${i + 1} - ${name}: ${reason.replace(/\n/g, '\n#   ')}`);
      for (const line of logged) console.log(`#   memjs: ${line}`);
    }
  }
  client.close();
  console.log(`# ${selected.length - failed}/${selected.length} checks passed (server ${SERVER}, expect ${EXPECT})`);
  process.exit(failed ? 1 : 0);
}

main().catch((err) => {
  console.log(`not ok - crashed: ${err && err.stack ? err.stack : err}`);
  process.exit(1);
});
