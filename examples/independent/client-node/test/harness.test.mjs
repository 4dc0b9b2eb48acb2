import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { startFakeCore, TOKEN, ROUTE } from './fake-core.mjs';

const HARNESS = fileURLToPath(new URL('../harness.mjs', import.meta.url));
const KINDS = new Set(['core_error', 'network_error', 'invalid_response', 'binding_changed', 'cancelled', 'invalid_input', 'unsupported_command', 'internal']);
let core;
before(async () => { core = await startFakeCore({ docs: { d1: 'y'.repeat(40000) } }); });
after(async () => { await core.close(); });

function runHarness() {
  const child = spawn(process.execPath, [HARNESS], { stdio: ['pipe', 'pipe', 'pipe'] });
  const lines = createInterface({ input: child.stdout });
  const waiting = [];
  const got = [];
  lines.on('line', (l) => { const a = JSON.parse(l); if (waiting.length) waiting.shift()(a); else got.push(a); });
  const next = () => (got.length ? Promise.resolve(got.shift()) : new Promise((r) => waiting.push(r)));
  const exited = new Promise((r) => child.on('exit', (code) => r(code)));
  return {
    write(cmd) { child.stdin.write(JSON.stringify(cmd) + '\n'); },
    next,
    async send(cmd) { child.stdin.write(JSON.stringify(cmd) + '\n'); const a = await next(); check(a, cmd.id); return a; },
    exited,
  };
}

function check(a, id) {
  assert.equal(a.id, id);
  assert.equal(typeof a.ok, 'boolean');
  assert.deepEqual(Object.keys(a).sort(), a.ok ? ['id', 'ok', 'value'] : ['error', 'id', 'ok']);
  if (!a.ok) { assert.ok(KINDS.has(a.error.kind), a.error.kind); assert.equal(typeof a.error.message, 'string'); }
  assert.ok(!JSON.stringify(a).includes(TOKEN), 'no token in answers');
}

const binding = { hubUrl: 'http://hub.test', clientAppId: 'knowledge-conformance', workspace: ROUTE, sessionId: '2d7c' };
const hostOptions = (extra = {}) => ({ workspace: ROUTE, connectionKey: 'main', expectedBinding: binding, ...extra });

test('harness: the protocol of harness-protocol.md end to end', async () => {
  const h = runHarness();
  const start = await h.send({ id: 0, cmd: 'start', protocol: 'knowledge-harness.v1', core_url: core.url, timeout_seconds: 10, connections: [{ key: 'main', route: ROUTE, token: TOKEN, binding }] });
  assert.equal(start.value.protocol, 'knowledge-harness.v1');
  assert.deepEqual(start.value.surfaces, ['client', 'host']);
  const caps = await h.send({ id: 1, cmd: 'capabilities', connection: 'main' });
  assert.equal(caps.value.supported, true);
  const turn = await h.send({ id: 2, cmd: 'turn', connection: 'main', input: 'homepage binding', ids: { client_conversation_id: 'hc-1', client_turn_id: 't1', user_message_id: 'm1' }, delivery: 'negotiate' });
  const runId = turn.value.run_id;
  assert.equal(turn.value.context.knowledge_delivery.mode, 'on_demand');
  const found = await h.send({ id: 3, cmd: 'search', connection: 'main', input: { query: 'homepage binding', runId, limit: 3 } });
  assert.equal(found.value.status, 'ok');
  const ref = found.value.hints[0].ref;
  const page = await h.send({ id: 4, cmd: 'read', connection: 'main', input: { ref, runId, maxBytes: 4096 } });
  assert.equal(page.value.truncated, true);
  assert.equal(core.wire('read').at(-1).body.max_bytes, 4096);
  const all = await h.send({ id: 5, cmd: 'read_all', connection: 'main', input: { ref, runId } });
  assert.deepEqual([all.value.complete, all.value.budget_exhausted, all.value.content.length], [true, false, 40000]);
  const expired = await h.send({ id: 6, cmd: 'read', connection: 'main', input: { ref: `kref_none_${runId}`, runId } });
  assert.deepEqual([expired.error.kind, expired.error.status, expired.error.code, expired.error.next_action], ['core_error', 410, 'knowledge_reference_expired', 'search_knowledge']);
  const viaHost = await h.send({ id: 7, cmd: 'host_call', call: 'readKnowledge', input: { ref, max_bytes: 4096 }, options: hostOptions() });
  assert.equal(viaHost.value.ref, ref);
  const hostile = await h.send({ id: 8, cmd: 'host_call', call: 'readKnowledge', input: { ref, run_id: 'another run' }, options: hostOptions() });
  assert.equal(hostile.error.kind, 'invalid_input');
  // cancellation: an aborted signal sends nothing
  assert.deepEqual((await h.send({ id: 9, cmd: 'cancel', signal: 's1' })).value, {});
  const before = core.transcript.length;
  const cancelled = await h.send({ id: 10, cmd: 'host_call', call: 'searchKnowledge', input: { query: 'q' }, options: hostOptions({ signal: 's1' }) });
  assert.equal(cancelled.error.kind, 'cancelled');
  assert.equal(core.transcript.length, before);
  // the session changes while the next request is in flight: sent, then withheld
  const other = { ...binding, sessionId: 'other' };
  await h.send({ id: 11, cmd: 'rebind', connection: 'main', binding: other, when: 'during_next_request' });
  const during = await h.send({ id: 12, cmd: 'host_call', call: 'searchKnowledge', input: { query: 'q' }, options: hostOptions() });
  assert.equal(during.error.kind, 'binding_changed');
  assert.equal(core.transcript.length, before + 1);
  const stale = await h.send({ id: 13, cmd: 'host_call', call: 'getKnowledgeCapabilities', input: {}, options: hostOptions() });
  assert.equal(stale.error.kind, 'binding_changed');
  const fresh = await h.send({ id: 14, cmd: 'host_call', call: 'getKnowledgeCapabilities', input: {}, options: hostOptions({ expectedBinding: other }) });
  assert.equal(fresh.value.supported, true);
  const unknown = await h.send({ id: 15, cmd: 'fly' });
  assert.equal(unknown.error.kind, 'unsupported_command');
  assert.deepEqual((await h.send({ id: 16, cmd: 'stop' })).value, {});
  assert.equal(await h.exited, 0);
});

test('harness: a cancel issued while a host call is in flight makes it give up; answers stay in order', async () => {
  const h = runHarness();
  await h.send({ id: 0, cmd: 'start', protocol: 'knowledge-harness.v1', core_url: core.url, connections: [{ key: 'main', route: ROUTE, token: TOKEN, binding }] });
  core.override('capabilities', () => new Promise((r) => setTimeout(() => r(null), 300)));
  h.write({ id: 1, cmd: 'host_call', call: 'getKnowledgeCapabilities', input: {}, options: hostOptions({ signal: 'slow' }) });
  await new Promise((r) => setTimeout(r, 100));
  h.write({ id: 2, cmd: 'cancel', signal: 'slow' });
  const first = await h.next();
  const second = await h.next();
  core.clearOverrides();
  check(first, 1);
  check(second, 2);
  assert.equal(first.error.kind, 'cancelled');
  assert.deepEqual(second.value, {});
  await h.send({ id: 3, cmd: 'stop' });
  assert.equal(await h.exited, 0);
});

test('harness: another protocol in start is refused', async () => {
  const h = runHarness();
  const a = await h.send({ id: 0, cmd: 'start', protocol: 'knowledge-harness.v2', core_url: core.url, connections: [{ key: 'main', route: ROUTE, token: TOKEN, binding }] });
  assert.equal(a.error.kind, 'invalid_input');
  await h.send({ id: 1, cmd: 'stop' });
  assert.equal(await h.exited, 0);
});
