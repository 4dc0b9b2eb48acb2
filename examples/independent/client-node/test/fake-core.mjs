// A small fake Core (node:http) for the tests: capabilities, turns (idempotent), search, read with pages and a
// read-chain budget, and a transcript of what reached the wire. `core.override(kind, fn)` replaces one answer.
import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';

export const TOKEN = 'bha_' + 'x'.repeat(40);
export const ROUTE = 'acme';

export function capabilitiesBody(route = ROUTE, patch = {}) {
  return {
    schema_version: 'bailing.agent-knowledge-capabilities.v1', knowledge_schema_version: 'bailing.agent-knowledge.v1',
    route, enabled: true, delivery_modes: ['inline', 'on_demand'],
    limits: {
      search_max_hints: 3, search_max_bytes: 4096, read_default_max_bytes: 16384, read_min_max_bytes: 4096,
      read_max_max_bytes: 32768, reference_max_bytes: 4096, read_chain_max_bytes: 131072, reference_ttl_seconds: 300,
    },
    ...patch,
  };
}

export async function startFakeCore({ docs = { d1: 'Homepage binding body. '.repeat(10) } } = {}) {
  const transcript = [];
  const overrides = new Map();
  const turns = new Map(); // key -> {fingerprint, response}
  const runs = new Set();
  const state = { searchStatus: 'ok', dropNextTurnResponse: false, chainBudget: 131072, legacy: false };

  const server = createServer((req, res) => {
    let raw = '';
    req.on('data', (c) => { raw += c; });
    req.on('end', async () => {
      let body;
      try { body = raw ? JSON.parse(raw) : undefined; } catch { body = raw; }
      const entry = { method: req.method, path: req.url, body, headers: req.headers };
      transcript.push(entry);
      const send = (status, json) => {
        entry.status = status;
        const text = JSON.stringify(json);
        res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' });
        res.end(text);
      };
      if (req.headers.authorization !== `Bearer ${TOKEN}`) return send(401, { error: 'unauthorized', message: 'bad token' });
      const m = /^\/agent-api\/v1\/workspaces\/([^/]+)\/(knowledge\/capabilities|knowledge\/search|knowledge\/read|turns)$/.exec(req.url);
      if (!m) return send(404, { error: 'not_found' });
      const [, route, what] = m;
      const kind = { 'knowledge/capabilities': 'capabilities', 'knowledge/search': 'search', 'knowledge/read': 'read', turns: 'turn' }[what];
      const o = overrides.get(kind);
      if (o) {
        const r = await o({ body, route, entry, req, res });
        if (r === 'handled') return;
        if (r) {
          if (r.raw !== undefined) { entry.status = r.status; res.writeHead(r.status, { 'content-type': 'application/json' }); return res.end(r.raw); }
          return send(r.status, r.json);
        }
      }
      if (state.legacy && kind !== 'turn') return send(404, { error: 'not_found' });
      if (kind === 'capabilities') return send(200, capabilitiesBody(route));
      if (kind === 'turn') {
        const key = JSON.stringify([route, body.client_conversation_id, body.client_turn_id, body.user_message_id]);
        const fingerprint = JSON.stringify(Object.keys(body).sort().map((k) => [k, body[k]]));
        let t = turns.get(key);
        if (t && t.fingerprint !== fingerprint) return send(409, { error: 'turn_conflict', message: 'another payload' });
        if (!t) {
          const runId = randomUUID();
          runs.add(runId);
          const onDemand = body.knowledge_delivery === 'on_demand' && !state.legacy;
          const context = onDemand
            ? { knowledge: [], knowledge_refs: [], knowledge_delivery: { schema_version: 'bailing.agent-knowledge.v1', mode: 'on_demand', status: 'ok', trust: 'reference_only', hints: [{ title: 'Homepage binding', summary: 'How to bind', ref: `kref_d1_${runId}` }] }, governance: { knowledge_trust: 'reference_only' } }
            : { knowledge: [{ title: 'Homepage binding', content: docs.d1 }], knowledge_refs: [{ title: 'Homepage binding' }], governance: { knowledge_trust: 'reference_only' } };
          t = { fingerprint, response: { schema_version: 'bailing.agent-turn-context.v1', run_id: runId, context } };
          turns.set(key, t);
        }
        if (state.dropNextTurnResponse) { state.dropNextTurnResponse = false; entry.status = 'dropped'; return req.socket.destroy(); }
        return send(200, t.response);
      }
      if (!runs.has(body?.run_id)) return send(404, { error: 'run_not_found', message: 'no such run' });
      if (kind === 'search') {
        if (state.searchStatus !== 'ok') return send(200, { status: state.searchStatus, hints: [], trust: 'reference_only' });
        const hints = Object.keys(docs).slice(0, 3).map((id) => ({ title: `Doc ${id}`, summary: 'summary', ref: `kref_${id}_${body.run_id}` }));
        return send(200, { schema_version: 'bailing.agent-knowledge.v1', status: 'ok', hints, trust: 'reference_only' });
      }
      // read
      const rm = /^kref_([a-z0-9]+)_(.+)$/.exec(body.ref ?? '');
      if (!rm || rm[2] !== body.run_id) return send(400, { error: 'knowledge_reference_invalid', message: 'invalid reference', next_action: 'search_knowledge' });
      const doc = docs[rm[1]];
      if (doc === undefined) return send(410, { error: 'knowledge_reference_expired', message: 'expired', next_action: 'search_knowledge' });
      const offset = body.cursor ? Number(/^kc_(\d+)$/.exec(body.cursor)?.[1] ?? NaN) : 0;
      if (!Number.isInteger(offset)) return send(400, { error: 'knowledge_reference_invalid', next_action: 'search_knowledge' });
      const pageSize = (body.max_bytes ?? 16384) - 512; // ASCII docs: characters == bytes
      let end = Math.min(doc.length, offset + pageSize);
      let budgetExhausted = false;
      if (end >= state.chainBudget && end < doc.length) { end = state.chainBudget; budgetExhausted = true; }
      const more = end < doc.length && !budgetExhausted;
      return send(200, {
        ref: body.ref, revision: 'rev-1', content: doc.slice(offset, end), next_cursor: more ? `kc_${end}` : null,
        truncated: end < doc.length, ...(budgetExhausted ? { budget_exhausted: true } : {}), trust: 'reference_only',
        total_content_bytes: doc.length,
      });
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${server.address().port}`;
  return {
    url, transcript, state, runs,
    override(kind, fn) { overrides.set(kind, fn); },
    clearOverrides() { overrides.clear(); },
    wire(kind) {
      const suffix = { capabilities: '/knowledge/capabilities', search: '/knowledge/search', read: '/knowledge/read', turn: '/turns' }[kind];
      return transcript.filter((e) => e.path.endsWith(suffix));
    },
    close() { server.closeAllConnections?.(); return new Promise((r) => server.close(r)); },
  };
}
