import test from 'node:test';
import assert from 'node:assert/strict';
import { Core } from '../src/core.mjs';

const bytes = (s) => Buffer.byteLength(s, 'utf8');
function world() {
  const core = new Core({ controlToken: 'ctl' });
  const w = core.createWorkspace('acme');
  const big = 'résumé 東京 🚀 text '.repeat(9000); // > 131072 bytes
  core.replaceCorpus(w, [{ id: 'kb', items: [
    { id: 'big', title: 'Big archive', summary: 'A big one.', content: big },
    { id: 'small', title: 'Small note', content: 'A small note about onboarding.' },
  ] }]);
  const id = core.mintIdentity({ account: 'alice', route: 'acme' });
  const call = (method, path, body, tok = id.token) => core.handle({ method, path: `/agent-api/v1/workspaces/acme${path}`, query: new URLSearchParams(), headers: { authorization: 'Bearer ' + tok }, body: Buffer.from(body === undefined ? '' : JSON.stringify(body)) });
  const turn = call('POST', '/turns', { client_conversation_id: 'c', client_turn_id: 't', user_message_id: 'm', user_input: 'archive', knowledge_delivery: 'on_demand' });
  return { core, w, id, call, run: turn.body.run_id, turn, big };
}

test('capabilities advertise both schemas, the route and the limits', () => {
  const { call } = world();
  const r = call('GET', '/knowledge/capabilities');
  assert.equal(r.status, 200);
  assert.equal(r.body.schema_version, 'bailing.agent-knowledge-capabilities.v1');
  assert.equal(r.body.route, 'acme');
  assert.deepEqual(r.body.delivery_modes, ['inline', 'on_demand']);
  assert.equal(r.body.limits.read_chain_max_bytes, 131072);
  assert.equal(r.headers['cache-control'], 'no-store');
});

test('on_demand turn: empty knowledge arrays, bounded hints; replay pins the run', () => {
  const { turn, call } = world();
  assert.deepEqual(turn.body.context.knowledge, []);
  assert.deepEqual(turn.body.context.knowledge_refs, []);
  assert.equal(turn.body.context.knowledge_delivery.mode, 'on_demand');
  assert.ok(turn.body.context.knowledge_delivery.hints.length <= 3);
  const again = call('POST', '/turns', { user_input: 'archive', knowledge_delivery: 'on_demand', user_message_id: 'm', client_turn_id: 't', client_conversation_id: 'c' });
  assert.equal(again.body.run_id, turn.body.run_id);
});

test('search JSON stays within 4096 bytes and hints never carry the body', () => {
  const { call, run } = world();
  const r = call('POST', '/knowledge/search', { query: 'note archive onboarding', run_id: run });
  assert.equal(r.status, 200);
  assert.ok(bytes(JSON.stringify(r.body)) <= 4096);
  for (const h of r.body.hints) assert.ok(!('content' in h));
  assert.equal(r.body.trust, 'reference_only');
});

test('a read chain is page-bounded and stops at the 131072-byte budget', () => {
  const { call, run, big } = world();
  const ref = call('POST', '/knowledge/search', { query: 'archive', run_id: run }).body.hints[0].ref;
  let cursor, got = '', last;
  for (const mb of [4096, 16384, 32768]) {
    const p = call('POST', '/knowledge/read', { ref, run_id: run, max_bytes: mb });
    assert.ok(bytes(JSON.stringify(p.body)) <= mb, `page over ${mb}`);
  }
  do {
    last = call('POST', '/knowledge/read', { ref, run_id: run, max_bytes: 32768, ...(cursor ? { cursor } : {}) }).body;
    assert.ok(bytes(JSON.stringify(last)) <= 32768);
    got += last.content; cursor = last.next_cursor;
  } while (cursor);
  assert.equal(last.budget_exhausted, true);
  assert.equal(last.truncated, true);
  assert.ok(bytes(got) <= 131072);
  assert.ok(big.startsWith(got));
  const next = Array.from(big.slice(got.length))[0];
  assert.ok(bytes(got) + bytes(next) > 131072, 'exhausted only when the next character does not fit');
});

test('references expire after 300 s and are bound to the account', () => {
  const { core, call, run, id } = world();
  const ref = call('POST', '/knowledge/search', { query: 'archive', run_id: run }).body.hints[0].ref;
  const bob = core.mintIdentity({ account: 'bob', route: 'acme', session_id: id.session_id });
  assert.equal(call('POST', '/knowledge/read', { ref, run_id: run }, bob.token).body.error, 'knowledge_reference_mismatch');
  core.clockOffset += 301;
  const r = call('POST', '/knowledge/read', { ref, run_id: run });
  assert.equal(r.status, 410);
  assert.equal(r.body.error, 'knowledge_reference_expired');
});

test('a tampered or oversized reference is invalid', () => {
  const { call, run } = world();
  assert.equal(call('POST', '/knowledge/read', { ref: 'x'.repeat(4097), run_id: run }).body.error, 'knowledge_reference_invalid');
  assert.equal(call('POST', '/knowledge/read', { ref: 'abc.def', run_id: run }).body.error, 'knowledge_reference_invalid');
});

test('search_knowledge: windows in code points, codes for bad shapes', () => {
  const { core, w, id } = world();
  const sk = (args) => core.searchKnowledge(w, id, args);
  const r = sk({ knowledge_item_id: 'big', offset: 7, limit_chars: 3 });
  assert.equal(r.body.content, '東京 ');
  assert.equal(r.body.content_total_chars, Array.from(w.items.get('big').current.content).length);
  assert.equal(sk({ query: 'x', knowledge_item_id: 'big' }).body.error, 'knowledge_invalid_request');
  assert.equal(sk({}).body.error, 'knowledge_query_required');
  assert.equal(sk({ knowledge_revision_id: 'r' }).body.error, 'knowledge_item_required');
  assert.equal(sk({ knowledge_item_id: 'nope' }).body.error, 'knowledge_resource_unavailable');
  assert.equal(sk({ query: 'note', limit_chars: '4000' }).body.error, 'invalid_arguments');
  assert.equal(sk({ query: 'note', max_results: 51 }).body.error, 'knowledge_invalid_request');
  const q = sk({ query: 'small note', mode: '  LEXICAL ' });
  assert.equal(q.body.mode, 'lexical');
  assert.equal(q.body.results[0].knowledge_item_id, 'small');
  w.runtime = false;
  assert.equal(sk({ query: 'note' }).body.type, 'knowledge_unavailable');
});
