// core-node's own tests: node --test test/
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { startServer } from '../server.mjs';

const CONTROL = 'test-control-token-0123456789';
let srv;
let base;

before(async () => {
  srv = await startServer({ host: '127.0.0.1', port: 0, controlToken: CONTROL });
  base = `http://127.0.0.1:${srv.port}`;
});
after(() => srv.server.close());

async function call(method, path, { token, body, raw, headers = {} } = {}) {
  const h = { ...headers };
  if (token) h.Authorization = `Bearer ${token}`;
  let payload;
  if (raw !== undefined) payload = raw;
  else if (body !== undefined) { payload = JSON.stringify(body); h['Content-Type'] = 'application/json'; }
  const res = await fetch(base + path, { method, headers: h, body: payload });
  const text = await res.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, text, json, bytes: Buffer.byteLength(text) };
}
const ctl = (method, path, body) => call(method, `/_control/v1${path}`, { token: CONTROL, body });

let n = 0;
async function world({ content = 'alpha beta gamma '.repeat(3000), extra = [] } = {}) {
  const route = `w${process.pid}-${++n}`;
  assert.equal((await ctl('POST', '/workspaces', { route })).status, 201);
  const corpus = {
    bases: [
      { id: 'kb1', items: [{ id: 'doc1', title: 'Homepage binding', summary: 'How the homepage binds', content }, ...extra] },
      { id: 'kb2', items: [{ id: 'doc2', title: 'Other base', summary: 'elsewhere', content: 'homepage elsewhere text' }] },
    ],
  };
  const rec = await ctl('PUT', `/workspaces/${route}/corpus`, corpus);
  assert.equal(rec.status, 200);
  const alice = (await ctl('POST', '/identities', { account: 'alice', route })).json;
  const api = `/agent-api/v1/workspaces/${route}`;
  const turn = async (who = alice, ids = {}) => {
    const r = await call('POST', `${api}/turns`, {
      token: who.token,
      body: { client_conversation_id: 'c1', client_turn_id: ids.t || `t${randomUUID().slice(0, 8)}`, user_message_id: 'm1', user_input: 'homepage', knowledge_delivery: 'on_demand' },
    });
    assert.equal(r.status, 200, r.text);
    return r.json.run_id;
  };
  const search = (who, run, query = 'homepage binding', extraBody = {}) => call('POST', `${api}/knowledge/search`, { token: who.token, body: { query, run_id: run, ...extraBody } });
  const read = (who, body) => call('POST', `${api}/knowledge/read`, { token: who.token, body });
  return { route, api, alice, turn, search, read };
}

test('capabilities advertise the contract, Cache-Control no-store, byte Content-Length', async () => {
  const w = await world();
  const r = await call('GET', `${w.api}/knowledge/capabilities`, { token: w.alice.token });
  assert.equal(r.status, 200);
  assert.equal(r.json.schema_version, 'bailing.agent-knowledge-capabilities.v1');
  assert.equal(r.json.knowledge_schema_version, 'bailing.agent-knowledge.v1');
  assert.equal(r.json.route, w.route);
  assert.deepEqual(r.json.delivery_modes, ['inline', 'on_demand']);
  assert.equal(r.json.limits.read_default_max_bytes, 16384);
  assert.equal(r.headers.get('cache-control'), 'no-store');
  assert.equal(Number(r.headers.get('content-length')), r.bytes);
});

test('a missing or unknown token is refused before route matching', async () => {
  const w = await world();
  assert.equal((await call('GET', `${w.api}/knowledge/capabilities`)).status, 401);
  assert.equal((await call('GET', `${w.api}/knowledge/capabilities`, { token: 'bha_' + 'x'.repeat(40) })).status, 403);
  assert.equal((await call('GET', '/agent-api/v1/nowhere', { token: 'nope' })).status, 403);
  assert.equal((await call('GET', '/agent-api/v1/nowhere', { token: w.alice.token })).status, 404);
});

test('on_demand turn: empty knowledge arrays and bounded hints', async () => {
  const w = await world();
  const r = await call('POST', `${w.api}/turns`, { token: w.alice.token, body: { client_conversation_id: 'c', client_turn_id: 't', user_message_id: 'm', user_input: 'homepage', knowledge_delivery: 'on_demand' } });
  assert.equal(r.status, 200);
  assert.deepEqual(r.json.context.knowledge, []);
  assert.deepEqual(r.json.context.knowledge_refs, []);
  assert.equal(r.json.context.knowledge_delivery.mode, 'on_demand');
  assert.ok(r.json.context.knowledge_delivery.hints.length >= 1);
  // Same ids, same payload: the same run; other delivery: 409.
  const again = await call('POST', `${w.api}/turns`, { token: w.alice.token, body: { client_conversation_id: 'c', client_turn_id: 't', user_message_id: 'm', user_input: 'homepage', knowledge_delivery: 'on_demand' } });
  assert.equal(again.json.run_id, r.json.run_id);
  const other = await call('POST', `${w.api}/turns`, { token: w.alice.token, body: { client_conversation_id: 'c', client_turn_id: 't', user_message_id: 'm', user_input: 'homepage' } });
  assert.equal(other.status, 409);
  assert.equal(other.json.error, 'turn_conflict');
});

test('a lost turn response is replayed by the retry', async () => {
  const w = await world();
  assert.equal((await ctl('POST', '/faults', { kind: 'lose_next_turn_response', route: w.route })).status, 201);
  const body = { client_conversation_id: 'c', client_turn_id: 'lost', user_message_id: 'm', user_input: 'homepage', knowledge_delivery: 'on_demand' };
  const lost = await call('POST', `${w.api}/turns`, { token: w.alice.token, body });
  assert.ok(lost.status >= 500);
  const retry = await call('POST', `${w.api}/turns`, { token: w.alice.token, body });
  const withheld = (await ctl('GET', `/faults/lost?route=${w.route}`)).json.responses;
  assert.equal(withheld.at(-1).body.run_id, retry.json.run_id);
});

test('search stays within 4096 UTF-8 bytes with multibyte, escape-heavy hints', async () => {
  const heavy = (i) => ({ id: `heavy${i}`, title: `homepage ${'東"\\\u0001'.repeat(900)}`, summary: `homepage ${'😀\n'.repeat(3000)}`, content: 'homepage text' });
  const w = await world({ extra: [heavy(1), heavy(2), heavy(3)] });
  const run = await w.turn();
  const r = await w.search(w.alice, run, 'homepage');
  assert.equal(r.status, 200);
  assert.ok(r.bytes <= 4096, `${r.bytes} bytes`);
  assert.ok(r.json.hints.length <= 3);
  assert.equal(r.json.trust, 'reference_only');
});

test('search validation: limit over 3 and wrong types are refused', async () => {
  const w = await world();
  const run = await w.turn();
  assert.equal((await w.search(w.alice, run, 'homepage', { limit: 4 })).status, 400);
  assert.equal((await w.search(w.alice, run, 'homepage', { limit: '2' })).status, 400);
  assert.equal((await w.search(w.alice, run, 'homepage', { extra: 1 })).status, 400);
  assert.equal((await w.search(w.alice, randomUUID(), 'homepage')).status, 404);
  assert.equal((await call('POST', `${w.api}/knowledge/search`, { token: w.alice.token, raw: '{"query": "homepage", ' })).status, 400);
});

test('read pages: 16384 by default, max_bytes validated and clamped, chain rebuilds the text within the budget', async () => {
  const text = 'ü東😀 homepage "q" \\ \n'.repeat(12000); // about 300 KB, past the budget
  const w = await world({ content: text });
  const run = await w.turn();
  const ref = (await w.search(w.alice, run, 'binding')).json.hints[0].ref;
  const first = await w.read(w.alice, { ref, run_id: run });
  assert.equal(first.status, 200);
  assert.ok(first.bytes <= 16384 && first.bytes > 15000, `${first.bytes}`);
  assert.equal((await w.read(w.alice, { ref, run_id: run, max_bytes: '8192' })).status, 400);
  assert.equal((await w.read(w.alice, { ref, run_id: run, max_bytes: 8192.5 })).status, 400);
  const small = await w.read(w.alice, { ref, run_id: run, max_bytes: 100 });
  assert.equal(small.status, 200);
  assert.ok(small.bytes <= 4096);
  let page = await w.read(w.alice, { ref, run_id: run, max_bytes: 32768 });
  let got = '';
  let pages = 0;
  for (;;) {
    assert.equal(page.status, 200, page.text);
    assert.ok(page.bytes <= 32768);
    assert.equal(page.json.ref, ref);
    got += page.json.content;
    pages++;
    if (!page.json.next_cursor) break;
    page = await w.read(w.alice, { ref, run_id: run, cursor: page.json.next_cursor, max_bytes: 32768 });
  }
  assert.ok(pages > 4);
  assert.equal(page.json.budget_exhausted, true);
  assert.equal(page.json.truncated, true);
  assert.ok(Buffer.byteLength(got) <= 131072);
  assert.ok(Buffer.byteLength(got) > 131072 - 32);
  assert.ok(text.startsWith(got));
  assert.ok(!got.includes('\uFFFD'));
});

test('references: bound to session, run and revision; expire after 300 s of the control clock', async () => {
  const w = await world();
  const run = await w.turn();
  const ref = (await w.search(w.alice, run, 'binding')).json.hints[0].ref;
  const bob = (await ctl('POST', '/identities', { account: 'alice', route: w.route })).json; // another session
  const bobRun = await w.turn(bob);
  const stranger = await w.read(bob, { ref, run_id: bobRun });
  assert.equal(stranger.status, 403);
  assert.match(stranger.json.error, /^knowledge_reference_/);
  assert.equal(stranger.json.feedback.next_action, 'search_knowledge');
  assert.ok(!('content' in stranger.json));
  const otherRun = await w.turn();
  assert.equal((await w.read(w.alice, { ref, run_id: otherRun })).status, 403);
  assert.equal((await w.read(w.alice, { ref: ref + 'x', run_id: run })).json.error, 'knowledge_reference_invalid');
  assert.equal((await w.read(w.alice, { ref: 'a'.repeat(4097), run_id: run })).json.error, 'knowledge_reference_invalid');
  await ctl('POST', '/clock/advance', { seconds: 299, routes: [w.route] });
  assert.equal((await w.read(w.alice, { ref, run_id: run })).status, 200);
  await ctl('POST', '/clock/advance', { seconds: 1.5, routes: [w.route] });
  const expired = await w.read(w.alice, { ref, run_id: run });
  assert.equal(expired.status, 410);
  assert.equal(expired.json.error, 'knowledge_reference_expired');
  const fresh = (await w.search(w.alice, run, 'binding')).json.hints[0].ref;
  await ctl('POST', '/workspaces/' + w.route + '/items/doc1/revisions', { content: 'new text' });
  assert.equal((await w.read(w.alice, { ref: fresh, run_id: run })).json.error, 'knowledge_revision_changed');
});

test('scope: a reference stays readable while the scope holds its base, refused once it does not', async () => {
  const w = await world();
  const run = await w.turn();
  const ref = (await w.search(w.alice, run, 'binding')).json.hints[0].ref;
  await ctl('PUT', `/workspaces/${w.route}/scopes/alice`, { bases: ['kb1'] });
  assert.equal((await w.read(w.alice, { ref, run_id: run })).status, 200);
  await ctl('PUT', `/workspaces/${w.route}/scopes/alice`, { bases: ['kb2'] });
  const r = await w.read(w.alice, { ref, run_id: run });
  assert.equal(r.status, 409);
  assert.equal(r.json.error, 'knowledge_scope_changed');
});

test('modes: disabled refuses an on_demand turn, searches say disabled; legacy answers 404', async () => {
  const w = await world();
  const run = await w.turn();
  await ctl('PUT', `/workspaces/${w.route}/mode`, { mode: 'disabled' });
  const caps = await call('GET', `${w.api}/knowledge/capabilities`, { token: w.alice.token });
  assert.equal(caps.json.enabled, false);
  assert.equal((await w.search(w.alice, run, 'homepage')).json.status, 'disabled');
  const t = await call('POST', `${w.api}/turns`, { token: w.alice.token, body: { client_conversation_id: 'c', client_turn_id: 'x', user_message_id: 'm', user_input: 'homepage', knowledge_delivery: 'on_demand' } });
  assert.equal(t.status, 403);
  await ctl('PUT', `/workspaces/${w.route}/mode`, { mode: 'legacy', legacy_status: 501 });
  assert.equal((await call('GET', `${w.api}/knowledge/capabilities`, { token: w.alice.token })).status, 501);
  await ctl('PUT', `/workspaces/${w.route}/mode`, { mode: 'unavailable' });
  assert.equal((await w.search(w.alice, run, 'homepage')).json.status, 'unavailable');
});

test('control requires its own credential', async () => {
  assert.equal((await call('GET', '/_control/v1/')).status, 401);
  const r = await ctl('GET', '/');
  assert.equal(r.json.version, '1.1.0');
});
