// The Agent Session adapter's answers judged by the Core's own rules, and the negotiation behind
// start_business_turn: each check holds on the clean server, and each broken variant of this file
// fails exactly its own check (the others still hold).
import test from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { Core } from '../src/core.mjs';
import { InProcessCoreClient } from '../src/coreclient.mjs';
import { createHttpServer } from '../src/http.mjs';
import { createAgentServer, newSessionState } from '../src/mcp-agent.mjs';

const BIN = path.join(path.dirname(new URL(import.meta.url).pathname), '..', 'bin', 'knowledge-mcp-ts.mjs');
const CAPS_V9 = 'bailing.agent-knowledge-capabilities.v9';
const cpLen = (s) => Array.from(s).length;

function world() {
  const core = new Core({ controlToken: 'ctl' });
  const w = core.createWorkspace('acme');
  const notes = Array.from({ length: 6 }, (_, k) => ({
    id: `note${k}`, title: `Note ${k}`,
    content: `Note ${k}: how the team keeps its onboarding checklist number ${k} current. `.repeat(6),
  }));
  const big = { id: 'big', title: 'Big archive', content: 'résumé 東京 🚀 text '.repeat(9000) }; // > 131072 bytes, > 10000 chars
  core.replaceCorpus(w, [{ id: 'kb', items: [...notes, big] }]);
  const id = core.mintIdentity({ account: 'alice', route: 'acme' });
  const control = (method, p, body) => core.handle({
    method, path: '/_control/v1' + p, query: new URLSearchParams(),
    headers: { authorization: 'Bearer ctl' }, body: Buffer.from(body === undefined ? '' : JSON.stringify(body)),
  });
  return { core, id, control, documents: [...notes, big].map((d) => d.content) };
}

async function connect(core, id) {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  const server = createAgentServer({ client: new InProcessCoreClient(core), route: 'acme', token: id.token, state: newSessionState() });
  await server.connect(serverSide);
  const c = new Client({ name: 'test', version: '1' });
  await c.connect(clientSide);
  return c;
}

const call = (c, name, args) => c.callTool({ name, arguments: args });
const capsFault = (status, body) => ({ kind: 'respond_next', route: 'acme', endpoint: 'capabilities', status, ...(body ? { body } : {}) });

// Each check: true when the answer keeps the rule.
const CHECKS = {
  async no_hint_is_a_whole_document({ c, documents }) { // SRCH-006
    await call(c, 'start_business_turn', { user_input: 'hello' });
    const s = await call(c, 'search_business_knowledge', { query: 'onboarding checklist' });
    return s.structuredContent.hints.length > 0
      && s.structuredContent.hints.every((h) => documents.every((d) => !h.summary.includes(d.trim()) && !h.title.includes(d.trim())));
  },
  async at_most_three_hints({ c }) { // SRCH-003
    await call(c, 'start_business_turn', { user_input: 'hello' });
    const s = await call(c, 'search_business_knowledge', { query: 'onboarding checklist' });
    return s.structuredContent.hints.length === 3;
  },
  async budget_page_says_budget_exhausted({ c }) { // READ-011
    await call(c, 'start_business_turn', { user_input: 'hello' });
    const s = await call(c, 'search_business_knowledge', { query: 'résumé archive' });
    const ref = s.structuredContent.hints.find((h) => h.title === 'Big archive').ref;
    let page, cursor, pages = 0;
    do {
      page = (await call(c, 'read_business_knowledge', { ref, max_bytes: 32768, ...(cursor ? { cursor } : {}) })).structuredContent;
      cursor = page.next_cursor; pages++;
    } while (cursor && pages < 50);
    return page.budget_exhausted === true && page.truncated === true && page.next_cursor === null;
  },
  async turn_asks_on_demand({ c, core }) { // TURN-002
    const t = await call(c, 'start_business_turn', { user_input: 'hello' });
    const sent = core.transcript.filter((r) => r.path.endsWith('/turns')).at(-1);
    return !t.isError && t.structuredContent.knowledge_supported === true && sent.body.knowledge_delivery === 'on_demand';
  },
  async capabilities_5xx_is_an_error({ c, control }) { // NEG-002
    control('POST', '/faults', capsFault(503));
    const t = await call(c, 'start_business_turn', { user_input: 'hello' });
    return t.isError === true && t.structuredContent.feedback.schema_version === 'bailing.agent-feedback.v1'
      && t.structuredContent.feedback.category === 'unavailable';
  },
  async unknown_schema_is_an_error({ c, control, core }) { // NEG-003
    const caps = core.capabilities(core.workspaces.get('acme')).body;
    control('POST', '/faults', capsFault(200, { ...caps, schema_version: CAPS_V9 }));
    const t = await call(c, 'start_business_turn', { user_input: 'hello' });
    return t.isError === true && t.structuredContent.feedback.code === 'knowledge_capabilities_unknown';
  },
  async search_knowledge_text_is_the_json({ c }) { // SK-017
    const r = await call(c, 'search_knowledge', { query: 'onboarding' });
    try { return JSON.stringify(JSON.parse(r.content[0].text)) === JSON.stringify(r.structuredContent); } catch { return false; }
  },
  async search_knowledge_excerpts_are_bounded({ c }) { // SK-017
    const r = await call(c, 'search_knowledge', { query: 'résumé' });
    return r.structuredContent.results.length > 0 && r.structuredContent.results.every((x) => cpLen(x.excerpt) <= 500);
  },
};

// variant -> the one check it fails
const VARIANTS = {
  mcp_hints_full_document: 'no_hint_is_a_whole_document',
  mcp_budget_flag_dropped: 'budget_page_says_budget_exhausted',
  mcp_turn_inline: 'turn_asks_on_demand',
  mcp_caps_5xx_legacy: 'capabilities_5xx_is_an_error',
  mcp_unknown_schema_supported: 'unknown_schema_is_an_error',
  mcp_hints_merged: 'at_most_three_hints',
  sk_text_not_json: 'search_knowledge_text_is_the_json',
  sk_excerpt_whole: 'search_knowledge_excerpts_are_bounded',
};

async function outcomes(variant) {
  const prev = process.env.MCPTS_BROKEN;
  process.env.MCPTS_BROKEN = variant;
  try {
    const out = {};
    for (const [name, check] of Object.entries(CHECKS)) {
      const wd = world();
      const c = await connect(wd.core, wd.id);
      try { out[name] = await check({ ...wd, c }); } finally { await c.close(); }
    }
    return out;
  } finally {
    if (prev === undefined) delete process.env.MCPTS_BROKEN; else process.env.MCPTS_BROKEN = prev;
  }
}

test('the clean adapter keeps every rule', async () => {
  const out = await outcomes('');
  assert.deepEqual(Object.entries(out).filter(([, ok]) => !ok).map(([n]) => n), []);
});

for (const [variant, breaks] of Object.entries(VARIANTS)) {
  test(`${variant} breaks ${breaks} and nothing else here`, async () => {
    const out = await outcomes(variant);
    assert.deepEqual(Object.entries(out).filter(([, ok]) => !ok).map(([n]) => n), [breaks]);
  });
}

test('mcp_hints_merged lists the widened schema it answers with', async () => {
  process.env.MCPTS_BROKEN = 'mcp_hints_merged';
  try {
    const wd = world();
    const c = await connect(wd.core, wd.id);
    let cursor, tools = [];
    do { const r = await c.listTools(cursor ? { cursor } : {}); tools.push(...r.tools); cursor = r.nextCursor; } while (cursor);
    const search = tools.find((t) => t.name === 'search_business_knowledge');
    assert.equal(search.outputSchema.anyOf[0].properties.hints.maxItems, 8);
    await call(c, 'start_business_turn', { user_input: 'hello' });
    const s = await call(c, 'search_business_knowledge', { query: 'onboarding checklist' });
    assert.equal(s.structuredContent.hints.length, 6); // every matching note, with a ref that reads
    const p = await call(c, 'read_business_knowledge', { ref: s.structuredContent.hints[5].ref });
    assert.ok(!p.isError);
    await c.close();
  } finally { delete process.env.MCPTS_BROKEN; }
});

// respond_next on capabilities reaches the adapter on both transports of a served Core: over
// streamable HTTP (in-process Core) and over stdio (--core-url, the Core over HTTP).
test('respond_next on capabilities reaches start_business_turn over streamable HTTP and stdio', async () => {
  const { core, id } = world();
  const server = createHttpServer(core);
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const hub = `http://127.0.0.1:${server.address().port}`;
  const fault = (f) => fetch(hub + '/_control/v1/faults', { method: 'POST', headers: { authorization: 'Bearer ctl', 'content-type': 'application/json' }, body: JSON.stringify(f) });
  const caps = core.capabilities(core.workspaces.get('acme')).body;
  const clients = {
    http: () => new StreamableHTTPClientTransport(new URL(hub + '/agent-api/v1/workspaces/acme/mcp'), { requestInit: { headers: { authorization: 'Bearer ' + id.token } } }),
    stdio: () => new StdioClientTransport({ command: process.execPath, args: [BIN, 'stdio', '--route', 'acme', '--core-url', hub], env: { ...process.env, KC_AGENT_TOKEN: id.token, MCPTS_BROKEN: '' } }),
  };
  try {
    for (const [name, transport] of Object.entries(clients)) {
      const c = new Client({ name: 'test', version: '1' });
      await c.connect(transport());
      try {
        assert.equal((await fault(capsFault(503))).status, 201);
        const failed = await call(c, 'start_business_turn', { user_input: 'hello' });
        assert.equal(failed.isError, true, name);
        assert.equal(failed.structuredContent.feedback.category, 'unavailable', name);
        assert.equal((await fault(capsFault(200, { ...caps, schema_version: CAPS_V9 }))).status, 201);
        const unknown = await call(c, 'start_business_turn', { user_input: 'hello' });
        assert.equal(unknown.isError, true, name);
        assert.equal(unknown.structuredContent.feedback.code, 'knowledge_capabilities_unknown', name);
        const t = await call(c, 'start_business_turn', { user_input: 'hello' }); // the fault was used once
        assert.ok(!t.isError, name);
        assert.equal(t.structuredContent.knowledge_delivery.mode, 'on_demand', name);
      } finally { await c.close(); }
    }
  } finally { server.closeAllConnections?.(); server.close(); }
});
