import test from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { Core, seedDemo } from '../src/core.mjs';
import { createHttpServer } from '../src/http.mjs';

const BIN = path.join(path.dirname(new URL(import.meta.url).pathname), '..', 'bin', 'knowledge-mcp-ts.mjs');

async function listAll(c) {
  const names = []; let cursor, pages = 0;
  do { const r = await c.listTools(cursor ? { cursor } : {}); names.push(...r.tools.map((t) => t.name)); cursor = r.nextCursor; pages++; } while (cursor);
  return { names, pages };
}

async function exercise(c) {
  const { names, pages } = await listAll(c);
  assert.deepEqual(names, ['start_business_turn', 'search_business_knowledge', 'read_business_knowledge']);
  assert.equal(pages, 3, 'one tool per page');
  const early = await c.callTool({ name: 'search_business_knowledge', arguments: { query: 'archive' } });
  assert.equal(early.isError, true);
  assert.equal(early.structuredContent.feedback.code, 'turn_required');
  const turn = await c.callTool({ name: 'start_business_turn', arguments: { user_input: 'ticket archive' } });
  assert.ok(!turn.isError);
  assert.match(turn.structuredContent.run_id, /^[0-9a-f-]{36}$/);
  const s = await c.callTool({ name: 'search_business_knowledge', arguments: { query: 'support ticket archive' } });
  assert.equal(s.structuredContent.dispatch, 'not_dispatched');
  assert.equal(s.structuredContent.business_operation_performed, false);
  assert.deepEqual(JSON.parse(s.content[0].text), s.structuredContent);
  const ref = s.structuredContent.hints[0].ref;
  const p = await c.callTool({ name: 'read_business_knowledge', arguments: { ref, max_bytes: 4096 } });
  assert.ok(Buffer.byteLength(JSON.stringify({ ...p.structuredContent, dispatch: undefined, business_operation_performed: undefined })) <= 4096);
  const bad = await c.callTool({ name: 'read_business_knowledge', arguments: { ref: ref.slice(0, -2) + 'xx' } });
  assert.equal(bad.isError, true);
  assert.equal(bad.structuredContent.feedback.next_action, 'search_knowledge');
  const sk = await c.callTool({ name: 'search_knowledge', arguments: { query: 'onboarding' } });
  assert.equal(sk.structuredContent.type, 'knowledge_search');
}

test('streamable HTTP: paginated tools, turn first, flags, DNS-rebinding protection', async () => {
  const core = new Core({});
  seedDemo(core, 'demo');
  const id = core.mintIdentity({ account: 'alice', route: 'demo' });
  const server = createHttpServer(core);
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${server.address().port}/agent-api/v1/workspaces/demo/mcp`;
  try {
    const c = new Client({ name: 'test', version: '1' });
    await c.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: 'Bearer ' + id.token } } }));
    await exercise(c);
    await c.close();
    const init = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '1' } } };
    for (const origin of ['http://evil.example', 'http://localhost.evil.example', 'http://127.0.0.1@evil.example', 'http://evil.example/localhost']) {
      const r = await fetch(url, { method: 'POST', headers: { authorization: 'Bearer ' + id.token, origin, 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: JSON.stringify(init) });
      assert.equal(r.status, 403, origin);
    }
  } finally { server.closeAllConnections?.(); server.close(); }
});

test('stdio with a standalone in-process Core', async () => {
  const c = new Client({ name: 'test', version: '1' });
  await c.connect(new StdioClientTransport({ command: process.execPath, args: [BIN, 'stdio', '--route', 'demo'] }));
  try { await exercise(c); } finally { await c.close(); }
});

test('job path lists exactly the three job tools', async () => {
  const c = new Client({ name: 'test', version: '1' });
  await c.connect(new StdioClientTransport({ command: process.execPath, args: [BIN, 'jobs', '--job-seconds', '0.2'] }));
  try {
    const { names } = await listAll(c);
    assert.deepEqual(names, ['submit_governed_job', 'get_governed_job', 'wait_for_governed_job']);
    const j = await c.callTool({ name: 'submit_governed_job', arguments: { request_id: 'r1', input: 'hello' } });
    const w = await c.callTool({ name: 'wait_for_governed_job', arguments: { job_id: j.structuredContent.job_id, max_wait_seconds: 5 } });
    assert.equal(w.structuredContent.status, 'done');
  } finally { await c.close(); }
});
