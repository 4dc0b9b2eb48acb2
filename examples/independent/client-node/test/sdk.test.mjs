import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { KnowledgeClient, KnowledgeError, createHostTransport } from '../sdk.mjs';
import { startFakeCore, capabilitiesBody, TOKEN, ROUTE } from './fake-core.mjs';

const BINDING = { hubUrl: 'http://hub.test', clientAppId: 'app', workspace: ROUTE, sessionId: 's-1' };
const IDS = { clientConversationId: 'c1', clientTurnId: 't1', userMessageId: 'm1' };
let core;
const big = 'abcdefghij'.repeat(20000); // 200000 bytes: past the 131072-byte chain budget

before(async () => { core = await startFakeCore({ docs: { d1: 'Homepage binding body. '.repeat(10), big, mid: 'x'.repeat(40000) } }); });
after(async () => { await core.close(); });
beforeEach(() => { core.transcript.length = 0; core.clearOverrides(); Object.assign(core.state, { searchStatus: 'ok', dropNextTurnResponse: false, chainBudget: 131072, legacy: false }); });

function client(extra = {}) {
  const state = { binding: { ...BINDING } };
  const c = new KnowledgeClient({ baseUrl: core.url, route: ROUTE, token: TOKEN, expectedBinding: BINDING, getBinding: () => state.binding, timeoutMs: 5000, ...extra });
  return Object.assign(c, { _state: state });
}
async function rejects(p, kind, check = () => {}) {
  await assert.rejects(p, (e) => { assert.ok(e instanceof KnowledgeError, String(e)); assert.equal(e.kind, kind, e.message); check(e); return true; });
}
async function turn(c, delivery = 'on_demand', ids = IDS) { return c.startTurn('homepage binding', { knowledgeDelivery: delivery, ...ids }); }

// ------------------------------------------------------------------ negotiation
test('capabilities: a valid answer is supported, with enabled and limits', async () => {
  const caps = await client().getKnowledgeCapabilities();
  assert.equal(caps.supported, true);
  assert.equal(caps.enabled, true);
  assert.equal(caps.limits.read_chain_max_bytes, 131072);
  assert.equal(core.wire('capabilities')[0].method, 'GET');
});

for (const status of [404, 405, 501]) {
  test(`capabilities: ${status} from an old endpoint is supported false`, async () => {
    core.override('capabilities', () => ({ status, json: { error: 'not_found' } }));
    assert.equal((await client().getKnowledgeCapabilities()).supported, false);
  });
}

test('capabilities: 404 with a live-Core code (route_unavailable) is an error; an unknown code is old-Core', async () => {
  core.override('capabilities', () => ({ status: 404, json: { error: 'route_unavailable' } }));
  await rejects(client().getKnowledgeCapabilities(), 'core_error', (e) => { assert.equal(e.status, 404); assert.equal(e.code, 'route_unavailable'); });
  core.override('capabilities', () => ({ status: 404, raw: '<html>Not Found</html>' }));
  assert.equal((await client().getKnowledgeCapabilities()).supported, false);
});

for (const status of [401, 403, 500, 503]) {
  test(`capabilities: ${status} is an error, never supported false`, async () => {
    core.override('capabilities', () => ({ status, json: { error: 'x_failure' } }));
    await rejects(client().getKnowledgeCapabilities(), 'core_error', (e) => assert.equal(e.status, status));
  });
}

test('capabilities: unknown schemas and non-JSON are invalid_response; route/modes/limits mismatches are not supported', async () => {
  core.override('capabilities', () => ({ status: 200, json: capabilitiesBody(ROUTE, { schema_version: 'bailing.agent-knowledge-capabilities.v2' }) }));
  await rejects(client().getKnowledgeCapabilities(), 'invalid_response');
  core.override('capabilities', () => ({ status: 200, json: capabilitiesBody(ROUTE, { knowledge_schema_version: 'bailing.agent-knowledge.v2' }) }));
  await rejects(client().getKnowledgeCapabilities(), 'invalid_response');
  core.override('capabilities', () => ({ status: 200, raw: 'not json' }));
  await rejects(client().getKnowledgeCapabilities(), 'invalid_response');
  for (const patch of [{ route: 'other' }, { delivery_modes: ['inline'] }, { limits: { ...capabilitiesBody().limits, search_max_hints: 5 } }]) {
    core.override('capabilities', () => ({ status: 200, json: capabilitiesBody(ROUTE, patch) }));
    assert.equal((await client().getKnowledgeCapabilities()).supported, false, JSON.stringify(patch));
  }
});

test('capabilities: enabled false is supported with enabled false', async () => {
  core.override('capabilities', () => ({ status: 200, json: capabilitiesBody(ROUTE, { enabled: false }) }));
  const caps = await client().getKnowledgeCapabilities();
  assert.deepEqual([caps.supported, caps.enabled], [true, false]);
});

// ------------------------------------------------------------------ turns
test('turn: on_demand emits knowledge_delivery; inline omits it; the run becomes current', async () => {
  const c = client();
  const t = await turn(c, 'on_demand');
  assert.equal(core.wire('turn')[0].body.knowledge_delivery, 'on_demand');
  assert.equal(c.currentRunId, t.run_id);
  assert.deepEqual(t.context.knowledge, []);
  await turn(c, 'inline', { ...IDS, clientTurnId: 't2' });
  assert.equal('knowledge_delivery' in core.wire('turn')[1].body, false);
});

test('turn: negotiate asks capabilities first; on_demand only when supported', async () => {
  const c = client();
  await turn(c, 'negotiate');
  assert.deepEqual(core.transcript.map((e) => e.path.split('/').pop()), ['capabilities', 'turns']);
  assert.equal(core.wire('turn')[0].body.knowledge_delivery, 'on_demand');
  core.transcript.length = 0;
  core.state.legacy = true;
  const t = await turn(c, 'negotiate', { ...IDS, clientTurnId: 't9' });
  assert.equal('knowledge_delivery' in core.wire('turn')[0].body, false);
  assert.equal(t.context.knowledge[0].content.length > 0, true, 'legacy inline body retained');
});

test('turn: negotiate does not turn a capabilities failure into a plain turn', async () => {
  core.override('capabilities', () => ({ status: 503, json: { error: 'unavailable' } }));
  await rejects(turn(client(), 'negotiate'), 'core_error');
  assert.equal(core.wire('turn').length, 0);
});

test('turn: a model input member never chooses the delivery (refused, nothing sent)', async () => {
  const c = client();
  await rejects(c.startTurn({ userInput: 'hi', knowledge_delivery: 'inline' }, { knowledgeDelivery: 'on_demand', ...IDS }), 'invalid_input');
  assert.equal(core.transcript.length, 0);
});

test('turn: a legacy answer keeps its inline bodies although on_demand was asked', async () => {
  core.override('turn', ({ body }) => ({ status: 200, json: { schema_version: 'bailing.agent-turn-context.v1', run_id: '3f2a1c9e-8b7d-4e6f-a5c4-1b2d3e4f5a6b', context: { knowledge: [{ title: 'T', content: 'Full body text.' }], knowledge_refs: [{ title: 'T' }], echo: body.knowledge_delivery } } }));
  const t = await turn(client(), 'on_demand');
  assert.equal(t.context.knowledge[0].content, 'Full body text.');
});

test('turn: a delivery object carrying bodies is refused as invalid_response', async () => {
  core.override('turn', () => ({ status: 200, json: { schema_version: 'bailing.agent-turn-context.v1', run_id: '3f2a1c9e-8b7d-4e6f-a5c4-1b2d3e4f5a6b', context: { knowledge: [], knowledge_refs: [], knowledge_delivery: { mode: 'on_demand', hints: [], bodies: ['x'] } } } }));
  await rejects(turn(client(), 'on_demand'), 'invalid_response');
});

test('turn: delivery pinned across a response-loss retry (same key and payload, same run)', async () => {
  const c = client();
  const ids = { ...IDS, clientConversationId: 'c-retry' };
  core.state.dropNextTurnResponse = true;
  const runsBefore = core.runs.size;
  await rejects(turn(c, 'on_demand', ids), 'network_error');
  assert.equal(core.runs.size, runsBefore + 1, 'the lost turn was committed');
  const t = await turn(c, 'on_demand', ids);
  const [first, second] = core.wire('turn');
  assert.equal(first.status, 'dropped');
  assert.deepEqual(second.body, first.body);
  assert.equal(second.body.knowledge_delivery, 'on_demand');
  assert.equal(t.run_id, [...core.runs].at(-1));
  // A retry that changes the delivery is refused locally; negotiate keeps the pinned choice.
  core.state.legacy = true;
  await rejects(turn(c, 'inline', ids), 'invalid_input', (e) => assert.equal(e.code, 'turn_delivery_pinned'));
  assert.equal(core.wire('turn').length, 2);
  const again = await turn(c, 'negotiate', ids);
  assert.equal(core.wire('turn')[2].body.knowledge_delivery, 'on_demand');
  assert.equal(again.run_id, t.run_id);
});

// ------------------------------------------------------------------ search
test('search: runId -> run_id on the wire, at most three hints returned', async () => {
  const c = client();
  const t = await turn(c);
  const found = await c.searchKnowledge({ query: 'homepage binding', runId: t.run_id, limit: 3 });
  assert.deepEqual(core.wire('search')[0].body, { query: 'homepage binding', run_id: t.run_id, limit: 3 });
  assert.equal(found.status, 'ok');
  assert.ok(found.hints.length <= 3 && found.hints[0].ref);
});

test('search: unavailability is status unavailable or an error, never ok with no hints', async () => {
  const c = client();
  const t = await turn(c);
  core.state.searchStatus = 'unavailable';
  const found = await c.searchKnowledge({ query: 'q', runId: t.run_id });
  assert.equal(found.status, 'unavailable');
  core.override('search', () => ({ status: 503, json: { error: 'knowledge_unavailable' } }));
  await rejects(c.searchKnowledge({ query: 'q', runId: t.run_id }), 'core_error', (e) => assert.equal(e.status, 503));
  core.override('search', () => ({ status: 200, json: { status: 'ok', trust: 'reference_only', hints: [1, 2, 3, 4].map((n) => ({ title: 't', summary: 's', ref: `r${n}` })) } }));
  await rejects(c.searchKnowledge({ query: 'q', runId: t.run_id }), 'invalid_response');
});

test('search: extra input members are refused before anything is sent', async () => {
  await rejects(client().searchKnowledge({ query: 'q', runId: 'r', route: 'elsewhere' }), 'invalid_input');
  assert.equal(core.transcript.length, 0);
});

// ------------------------------------------------------------------ read
test('read: runId/maxBytes -> run_id/max_bytes; one page only', async () => {
  const c = client();
  const t = await turn(c);
  const ref = `kref_mid_${t.run_id}`;
  const page = await c.readKnowledge({ ref, runId: t.run_id, maxBytes: 4096 });
  assert.deepEqual(core.wire('read')[0].body, { ref, run_id: t.run_id, max_bytes: 4096 });
  assert.equal(core.wire('read').length, 1);
  assert.equal(page.truncated, true);
  assert.ok(page.next_cursor);
  const next = await c.readKnowledge({ ref: page.ref, runId: t.run_id, cursor: page.next_cursor });
  assert.equal(core.wire('read')[1].body.cursor, page.next_cursor);
  assert.equal(next.ref, ref);
});

test('read: maxBytes outside 4096..32768 is refused locally', async () => {
  await rejects(client().readKnowledge({ ref: 'kref_x', runId: 'r', maxBytes: 100 }), 'invalid_input');
  await rejects(client().readKnowledge({ ref: 'k'.repeat(4097), runId: 'r' }), 'invalid_input', (e) => assert.equal(e.next_action, 'search_knowledge'));
  assert.equal(core.transcript.length, 0);
});

test('chain: follows to the end and says complete', async () => {
  const c = client();
  const t = await turn(c);
  const r = await c.readKnowledgeChain({ ref: `kref_mid_${t.run_id}`, runId: t.run_id });
  assert.equal(r.complete, true);
  assert.equal(r.content.length, 40000);
  assert.equal(r.pages, core.wire('read').length);
});

test('chain: the Core budget gives budget_exhausted, never a full read', async () => {
  const c = client();
  const t = await turn(c);
  const r = await c.readKnowledgeChain({ ref: `kref_big_${t.run_id}`, runId: t.run_id, maxBytes: 32768 });
  assert.deepEqual([r.complete, r.truncated, r.budget_exhausted], [false, true, true]);
  assert.equal(r.content.length, 131072);
  assert.match(r.description, /not the whole document/);
});

test('chain: the client stops at its own budget when the Core keeps giving cursors', async () => {
  const c = client();
  const t = await turn(c);
  core.state.chainBudget = 10 ** 9; // a Core that never says budget_exhausted
  const r = await c.readKnowledgeChain({ ref: `kref_big_${t.run_id}`, runId: t.run_id, maxBytes: 32768 });
  assert.deepEqual([r.complete, r.truncated, r.budget_exhausted], [false, true, true]);
  assert.ok(r.content.length >= 131072 && r.content.length < 200000);
});

test('chain: an error after a page reports what was read; on the first page it raises', async () => {
  const c = client();
  const t = await turn(c);
  let n = 0;
  core.override('read', () => (n++ === 1 ? { status: 409, json: { error: 'knowledge_revision_changed', message: 'changed' } } : null));
  const r = await c.readKnowledgeChain({ ref: `kref_mid_${t.run_id}`, runId: t.run_id });
  assert.equal(r.complete, false);
  assert.equal(r.pages, 1);
  assert.equal(r.error.code, 'knowledge_revision_changed');
  assert.equal(r.error.next_action, 'search_knowledge');
  core.override('read', () => ({ status: 410, json: { error: 'knowledge_reference_expired' } }));
  await rejects(c.readKnowledgeChain({ ref: `kref_mid_${t.run_id}`, runId: t.run_id }), 'core_error');
});

// ------------------------------------------------------------------ reference errors
test('reference errors: next_action search_knowledge, feedback object, no replay', async () => {
  const c = client();
  const t = await turn(c);
  await rejects(c.readKnowledge({ ref: `kref_gone_${t.run_id}`, runId: t.run_id }), 'core_error', (e) => {
    assert.equal(e.status, 410);
    assert.equal(e.code, 'knowledge_reference_expired');
    assert.equal(e.next_action, 'search_knowledge');
    assert.equal(e.feedback.schema_version, 'bailing.agent-feedback.v1');
    assert.equal(e.feedback.next_action, 'search_knowledge');
    assert.equal(e.feedback.origin, 'core');
    assert.equal(e.retryable, true);
  });
  assert.equal(core.wire('read').length, 1);
  // next_action is derived from the code family even when the Core leaves it out or names another action
  core.override('read', () => ({ status: 409, json: { error: 'knowledge_scope_changed', next_action: 'retry_read' } }));
  await rejects(c.readKnowledge({ ref: `kref_d1_${t.run_id}`, runId: t.run_id }), 'core_error', (e) => assert.equal(e.next_action, 'search_knowledge'));
});

// ------------------------------------------------------------------ host transport
function hostFor(c) { return createHostTransport({ connections: new Map([['main', c]]) }); }
const opts = (extra = {}) => ({ workspace: ROUTE, connectionKey: 'main', expectedBinding: { ...BINDING }, ...extra });

test('host: snake-case aliases, the current run, and a model run_id refused', async () => {
  const c = client();
  const host = hostFor(c);
  const t = await turn(c);
  const page = await host.readKnowledge({ ref: `kref_mid_${t.run_id}`, max_bytes: 4096 }, opts());
  assert.deepEqual(core.wire('read')[0].body, { ref: `kref_mid_${t.run_id}`, run_id: t.run_id, max_bytes: 4096 });
  await host.readKnowledge({ ref: page.ref, next_cursor: page.next_cursor, max_bytes: 4096 }, opts());
  assert.equal(core.wire('read')[1].body.cursor, page.next_cursor);
  const found = await host.searchKnowledge({ query: 'homepage', limit: 3 }, opts());
  assert.equal(core.wire('search')[0].body.run_id, t.run_id);
  assert.equal(found.status, 'ok');
  for (const hostile of [{ run_id: 'another' }, { runId: t.run_id }, { route: 'elsewhere' }, { connectionKey: 'other' }, { token: 'bha_x' }]) {
    await rejects(host.readKnowledge({ ref: page.ref, ...hostile }, opts()), 'invalid_input');
  }
  assert.equal(core.wire('read').length, 2);
  assert.equal((await host.getKnowledgeCapabilities(opts())).supported, true);
});

test('host: no current run means no request', async () => {
  await rejects(hostFor(client()).searchKnowledge({ query: 'q' }, opts()), 'invalid_input', (e) => assert.equal(e.code, 'no_current_run'));
  assert.equal(core.transcript.length, 0);
});

test('host: the binding is validated before and after the request', async () => {
  const c = client();
  const host = hostFor(c);
  const t = await turn(c);
  core.transcript.length = 0;
  await rejects(host.searchKnowledge({ query: 'q' }, opts({ expectedBinding: { ...BINDING, sessionId: 's-2' } })), 'binding_changed');
  await rejects(host.searchKnowledge({ query: 'q' }, opts({ workspace: 'other' })), 'binding_changed');
  assert.equal(core.transcript.length, 0);
  // the session changes while the request is in flight: the request went out, the answer is withheld
  core.override('search', () => { c._state.binding = { ...BINDING, sessionId: 's-3' }; return null; });
  await rejects(host.searchKnowledge({ query: 'q' }, opts()), 'binding_changed', (e) => assert.equal(e.code, 'agent_binding_changed'));
  assert.equal(core.wire('search').length, 1);
  assert.ok(t.run_id);
});

test('host: an aborted signal sends nothing; an abort in flight gives up', async () => {
  const c = client();
  const host = hostFor(c);
  await turn(c);
  core.transcript.length = 0;
  const ac = new AbortController();
  ac.abort();
  await rejects(host.searchKnowledge({ query: 'q' }, opts({ signal: ac.signal })), 'cancelled');
  assert.equal(core.transcript.length, 0);
  const ac2 = new AbortController();
  core.override('search', () => new Promise((r) => { ac2.abort(); setTimeout(() => r(null), 50); }));
  await rejects(host.searchKnowledge({ query: 'q' }, opts({ signal: ac2.signal })), 'cancelled');
  await rejects(host.getKnowledgeCapabilities({ workspace: ROUTE, connectionKey: 'nope', expectedBinding: BINDING }), 'invalid_input');
});
