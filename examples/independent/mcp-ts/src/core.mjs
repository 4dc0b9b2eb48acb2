// A minimal in-process Core: seed 000's knowledge model (capabilities, turns, search, read,
// references bound to Hub/session/account/route/run/scope/revision, 300 s expiry, byte-bounded
// pages and chains), seed 003's Knowledge service (search_knowledge), and the test-control
// extension (control-openapi.yaml) so a conformance run can drive its states.
import crypto from 'node:crypto';
import { rank, normaliseMode, lexicalScores } from './ranking.mjs';
import { broken } from './broken.mjs';

export const LIMITS = {
  search_max_hints: 3, search_max_bytes: 4096, read_default_max_bytes: 16384,
  read_min_max_bytes: 4096, read_max_max_bytes: 32768, reference_max_bytes: 4096,
  read_chain_max_bytes: 131072, reference_ttl_seconds: 300,
};
const KNOWLEDGE_SCHEMA = 'bailing.agent-knowledge.v1';
const ROUTE_RE = /^[a-z0-9][a-z0-9_-]{1,63}$/;
const ID_RE = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;
const UUID_RE = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
const MAX_BODY = 1024 * 1024;
const REF_ERROR_FAMILY = /^knowledge_(reference_[a-z0-9_]+|[a-z0-9_]*changed)$/;

const bytes = (s) => Buffer.byteLength(s, 'utf8');
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const isInt = (v) => typeof v === 'number' && Number.isInteger(v);
const cpLen = (s) => { let n = 0; for (const _ of s) n++; return n; };

function err(status, error, message, extra = {}) {
  return { status, body: { error, message, ...extra } };
}
function ok(body, status = 200) { return { status, body }; }
export function isReferenceError(code) { return REF_ERROR_FAMILY.test(code || ''); }

function canonical(v) {
  if (Array.isArray(v)) return '[' + v.map(canonical).join(',') + ']';
  if (isObj(v)) return '{' + Object.keys(v).sort().map((k) => JSON.stringify(k) + ':' + canonical(v[k])).join(',') + '}';
  return JSON.stringify(v);
}

// Cut a string to at most maxBytes of JSON-escaped UTF-8, on a code point boundary.
function cutEscaped(s, maxBytes) {
  let out = '', used = 0;
  for (const ch of s) {
    const b = bytes(JSON.stringify(ch)) - 2;
    if (used + b > maxBytes) break;
    out += ch; used += b;
  }
  return out;
}

// A hint is discovery data: its title and summary never carry the whole document.
function notWhole(text, content) {
  const c = content.trim();
  if (!text || c.length === 0 || !text.includes(c)) return text;
  const cps = Array.from(c);
  return cps.slice(0, Math.floor(cps.length / 2)).join('') + '…';
}
function summaryOf(rev) {
  const cps = Array.from(rev.content);
  const s = rev.summary ?? cps.slice(0, Math.min(200, Math.floor(cps.length / 2))).join('');
  return notWhole(s, rev.content);
}

export class Core {
  constructor({ controlToken = 'mcpts-control-token', hub = 'http://127.0.0.1', key } = {}) {
    this.controlToken = controlToken;
    this.hub = hub;
    this.key = key || crypto.randomBytes(32);
    this.reset();
  }

  reset() {
    this.workspaces = new Map();
    this.identities = new Map(); // token -> identity
    this.runs = new Map();
    this.turns = new Map();
    this.faults = [];
    this.lost = [];
    this.transcript = [];
    this.clockOffset = 0;
    this.seq = 0;
  }

  // ---------------------------------------------------------------- clock
  now(route) {
    const w = route && this.workspaces.get(route);
    return Date.now() / 1000 + this.clockOffset + (w ? w.clockOffset : 0);
  }

  // ------------------------------------------------------------ workspaces
  createWorkspace(route, mode = 'normal') {
    const w = {
      route, mode, legacyStatus: 404, clockOffset: 0,
      bases: new Map(), items: new Map(), scopes: new Map(), kscopes: new Map(),
      runtime: true, audit: [],
    };
    this.workspaces.set(route, w);
    return w;
  }
  mintIdentity({ account, route, hub, session_id }) {
    const token = 'bha_' + crypto.randomBytes(30).toString('base64url');
    const id = { token, account, route, hub: hub || this.hub, session_id: session_id || crypto.randomUUID() };
    this.identities.set(token, id);
    return id;
  }
  newRevisionId() { return 'rev_' + (++this.seq).toString(36) + '_' + crypto.randomBytes(6).toString('hex'); }
  replaceCorpus(w, bases) {
    w.bases = new Map(); w.items = new Map();
    const receipt = {};
    for (const b of bases) {
      w.bases.set(b.id, { id: b.id, name: b.name || b.id, active: true });
      for (const it of b.items) {
        const rev = { id: this.newRevisionId(), n: 1, title: it.title, summary: it.summary ?? null, content: it.content, at: this.now(w.route) };
        w.items.set(it.id, { id: it.id, baseId: b.id, revisions: [rev], current: rev, active: true, published: true });
        receipt[it.id] = rev.id;
      }
    }
    return receipt;
  }
  publishRevision(w, item, { title, summary, content }) {
    const prev = item.current || item.revisions[item.revisions.length - 1];
    const rev = { id: this.newRevisionId(), n: item.revisions.length + 1, title: title ?? prev.title, summary: summary !== undefined ? summary : (title === undefined ? prev.summary : null), content, at: this.now(w.route) };
    item.revisions.push(rev); item.current = rev; item.published = true;
    return rev;
  }

  // Visible to an account: base active and in its scope, item active and published.
  baseVisible(w, account, baseId) {
    const b = w.bases.get(baseId);
    if (!b || !b.active) return false;
    const sc = w.scopes.get(account);
    return !sc || sc.bases.includes(baseId);
  }
  itemVisible(w, account, item) {
    if (broken('sk_unpublished_visible')) return item && this.baseVisible(w, account, item.baseId);
    return item && item.active && item.published && this.baseVisible(w, account, item.baseId);
  }
  searchable(w) { // the workspace's searchable documents (corpus statistics, whoever asks)
    const out = [];
    for (const it of w.items.values()) {
      const b = w.bases.get(it.baseId);
      if (it.active && it.published && b && b.active) out.push({ key: it.id, rev: it.current, item: it });
    }
    return out;
  }

  // ------------------------------------------------------------- tokens
  sign(payload) {
    const body = Buffer.from(JSON.stringify(payload)).toString('base64url');
    const mac = crypto.createHmac('sha256', this.key).update(body).digest().subarray(0, 18).toString('base64url');
    return body + '.' + mac;
  }
  verify(token, kind) {
    if (typeof token !== 'string' || token.length === 0 || bytes(token) > LIMITS.reference_max_bytes) return null;
    const dot = token.lastIndexOf('.');
    if (dot <= 0) return null;
    const body = token.slice(0, dot), mac = token.slice(dot + 1);
    const want = crypto.createHmac('sha256', this.key).update(body).digest().subarray(0, 18).toString('base64url');
    if (mac.length !== want.length || !crypto.timingSafeEqual(Buffer.from(mac), Buffer.from(want))) return null;
    try {
      const p = JSON.parse(Buffer.from(body, 'base64url').toString('utf8'));
      return p && p.k === kind ? p : null;
    } catch { return null; }
  }
  issueRef(id, run, item) {
    return this.sign({ k: 'r', w: id.route, h: id.hub, s: id.session_id, a: id.account, r: run.run_id, i: item.id, v: item.current.id, t: Math.floor(this.now(id.route) * 1000) });
  }

  // --------------------------------------------------------------- HTTP
  // req: {method, path, query (URLSearchParams), headers (lower-case object), body (Buffer)}
  handle(req) {
    const res = this._handle(req);
    res.headers = { 'cache-control': 'no-store', ...(res.headers || {}) };
    return res;
  }

  _handle(req) {
    if (req.path === this.controlBase || req.path.startsWith(this.controlBase + '/')) return this.control(req);
    const m = /^\/agent-api\/v1\/workspaces\/([^/]+)\/(knowledge\/capabilities|knowledge\/search|knowledge\/read|turns|knowledge\/tools\/search_knowledge)$/.exec(req.path);
    const endpoint = m ? { 'knowledge/capabilities': 'capabilities', 'knowledge/search': 'search', 'knowledge/read': 'read', turns: 'turns', 'knowledge/tools/search_knowledge': 'tool' }[m[2]] : null;
    const route = m ? decodeURIComponent(m[1]) : null;
    // respond_next: before authentication, without reaching the Core
    if (endpoint && endpoint !== 'tool') {
      const f = this.faults.find((x) => x.kind === 'respond_next' && x.endpoint === endpoint && (!x.route || x.route === route));
      if (f) {
        if (f.after > 0) f.after--;
        else {
          this.faults.splice(this.faults.indexOf(f), 1);
          if (f.text !== undefined) return { status: f.status, body: f.text, contentType: 'text/plain; charset=utf-8' };
          return { status: f.status, body: f.body === undefined ? null : f.body };
        }
      }
    }
    let parsed; // for the transcript
    const auth = req.headers.authorization || '';
    const mm = /^Bearer\s+(\S+)$/i.exec(auth);
    const id = mm ? this.identities.get(mm[1]) : undefined;
    const record = (res) => {
      if (req.path.startsWith('/agent-api/')) {
        this.transcript.push({ method: req.method, path: req.path, status: res.status, at: this.now(route), ...(req.body && req.body.length ? { body: parsed === undefined ? null : parsed } : {}), ...(id ? { account: id.account, session_id: id.session_id } : {}) });
        if (this.transcript.length > 5000) this.transcript.splice(0, 1000);
      }
      return res;
    };
    if (req.body && req.body.length && req.body.length <= 65536) {
      try { parsed = JSON.parse(req.body.toString('utf8')); } catch { parsed = undefined; }
    }
    if (!id) return record(err(403, 'unauthorized', 'A valid Agent Session bearer token is required.'));
    if (!m) return record(err(404, 'not_found', 'No such endpoint.'));
    const method = endpoint === 'capabilities' ? 'GET' : 'POST';
    if (req.method !== method) return record(err(404, 'not_found', 'No such endpoint.'));
    if (!ROUTE_RE.test(route) || route === 'auto') return record(err(400, 'invalid_route', 'The route is not a valid workspace route.'));
    const w = this.workspaces.get(route);
    if (!w) return record(err(404, 'route_unavailable', 'The workspace is not available.'));
    if (id.route !== route) return record(err(403, 'route_not_allowed', 'This Agent Session may not use this workspace.'));
    let body = null;
    if (method === 'POST') {
      if (req.body.length > MAX_BODY) return record(err(413, 'payload_too_large', 'The request body is larger than 1 MiB.'));
      // Any media type is read as JSON (CHOICES: a 200 to JSON sent as text/plain is allowed).
      try { body = JSON.parse(req.body.toString('utf8')); } catch { return record(err(400, 'invalid_request', 'The body is not valid JSON.')); }
      if (!isObj(body)) return record(err(400, 'invalid_request', 'The body must be a JSON object.'));
      parsed = body;
    }
    if (w.mode === 'legacy' && endpoint !== 'turns' && endpoint !== 'tool') {
      const st = w.legacyStatus;
      return record(err(st, st === 404 ? 'not_found' : st === 405 ? 'method_not_allowed' : 'not_implemented', 'Not supported.'));
    }
    let res;
    try {
      if (endpoint === 'capabilities') res = this.capabilities(w);
      else if (endpoint === 'turns') res = this.turn(w, id, body);
      else if (endpoint === 'search') res = this.search(w, id, body);
      else if (endpoint === 'read') res = this.read(w, id, body);
      else res = this.searchKnowledge(w, id, body);
    } catch (e) {
      res = err(500, 'internal_error', 'Unexpected failure.');
      if (process.env.MCPTS_DEBUG) console.error(e);
    }
    return record(res);
  }

  capabilities(w) {
    return ok({
      schema_version: 'bailing.agent-knowledge-capabilities.v1', knowledge_schema_version: KNOWLEDGE_SCHEMA,
      route: w.route, enabled: w.mode !== 'disabled', delivery_modes: ['inline', 'on_demand'], limits: { ...LIMITS },
    });
  }

  findRun(w, id, runId) {
    if (typeof runId !== 'string' || !UUID_RE.test(runId)) return null;
    const r = this.runs.get(runId.toLowerCase());
    if (!r || r.route !== w.route || r.hub !== id.hub || r.session_id !== id.session_id || r.account !== id.account) return null;
    return r;
  }

  // Bounded hints: at most `limit`, the whole JSON of `wrap(hints)` within maxBytes.
  hints(w, id, run, query, limit, wrap, maxBytes) {
    const docs = this.searchable(w).filter((d) => this.itemVisible(w, id.account, d.item));
    const stats = this.searchable(w);
    const scores = lexicalScores(query, docs, stats);
    const ranked = docs.filter((d) => scores.get(d.key) > 0).sort((a, b) => scores.get(b.key) - scores.get(a.key) || (a.key < b.key ? -1 : 1)).slice(0, limit);
    let hints = ranked.map((d) => ({ title: notWhole(d.rev.title, d.rev.content), summary: summaryOf(d.rev), ref: this.issueRef(id, run, d.item) }));
    while (hints.length) {
      const skeleton = bytes(JSON.stringify(wrap(hints.map((h) => ({ ...h, title: '', summary: '' })))));
      const room = Math.floor((maxBytes - skeleton - 8) / hints.length);
      if (room >= 16) {
        const cut = hints.map((h) => {
          const title = cutEscaped(cutEscaped(h.title, Math.floor(room / 3)), 4000);
          const t = Array.from(title).slice(0, 1024).join('');
          const summary = Array.from(cutEscaped(h.summary, room - (bytes(JSON.stringify(t)) - 2))).slice(0, 4096).join('');
          return { title: t, summary, ref: h.ref };
        });
        if (bytes(JSON.stringify(wrap(cut))) <= maxBytes) return cut;
      }
      hints = hints.slice(0, -1);
    }
    return [];
  }

  turn(w, id, body) {
    const allowed = ['client_conversation_id', 'client_turn_id', 'user_message_id', 'user_input', 'knowledge_delivery'];
    for (const k of Object.keys(body)) {
      if (!allowed.includes(k) || (k === 'knowledge_delivery' && w.mode === 'legacy')) return err(400, 'invalid_request', `Unknown field ${k}.`);
    }
    for (const k of ['client_conversation_id', 'client_turn_id', 'user_message_id']) {
      if (typeof body[k] !== 'string' || !ID_RE.test(body[k])) return err(400, 'invalid_request', `${k} is missing or malformed.`);
    }
    if (typeof body.user_input !== 'string' || body.user_input.length === 0 || cpLen(body.user_input) > 64000) return err(400, 'invalid_request', 'user_input must be 1..64000 characters.');
    if (body.knowledge_delivery !== undefined && body.knowledge_delivery !== 'inline' && body.knowledge_delivery !== 'on_demand') return err(400, 'invalid_request', 'knowledge_delivery must be inline or on_demand.');
    const key = [id.hub, id.session_id, w.route, body.client_conversation_id, body.client_turn_id, body.user_message_id].join('\u0000');
    const fp = canonical(body);
    let committed = this.turns.get(key);
    let res;
    if (committed) {
      // Same key: the committed run and its frozen context, whatever the payload (the delivery choice stays pinned).
      res = ok(committed.response);
    } else {
      const run = { run_id: crypto.randomUUID(), route: w.route, hub: id.hub, session_id: id.session_id, account: id.account, delivery: body.knowledge_delivery || 'inline' };
      this.runs.set(run.run_id, run);
      const context = { knowledge: [], knowledge_refs: [], governance: { knowledge_trust: 'reference_only' } };
      const available = w.mode !== 'disabled' && w.mode !== 'unavailable';
      if (run.delivery === 'on_demand') {
        const status = w.mode === 'disabled' ? 'disabled' : w.mode === 'unavailable' ? 'unavailable' : w.mode === 'partial' ? 'partial' : 'ok';
        const wrap = (hints) => ({ schema_version: KNOWLEDGE_SCHEMA, mode: 'on_demand', status, hints, trust: 'reference_only' });
        context.knowledge_delivery = wrap(available ? this.hints(w, id, run, body.user_input, 3, wrap, 4096) : []);
      } else if (available) {
        const docs = this.searchable(w).filter((d) => this.itemVisible(w, id.account, d.item));
        const sc = lexicalScores(body.user_input, docs, this.searchable(w));
        const top = docs.filter((d) => sc.get(d.key) > 0).sort((a, b) => sc.get(b.key) - sc.get(a.key)).slice(0, 2);
        for (const d of top) {
          const ref = this.issueRef(id, run, d.item);
          context.knowledge.push({ title: d.rev.title, content: Array.from(d.rev.content).slice(0, 4000).join(''), ref });
          context.knowledge_refs.push({ ref, title: d.rev.title });
        }
      }
      const response = { schema_version: 'bailing.agent-turn-context.v1', run_id: run.run_id, context };
      committed = { fp, response };
      this.turns.set(key, committed);
      res = ok(response);
    }
    const fi = this.faults.findIndex((f) => f.kind === 'lose_next_turn_response' && (!f.route || f.route === w.route));
    if (fi >= 0) {
      this.faults.splice(fi, 1);
      this.lost.push({ route: w.route, status: res.status, body: res.body });
      return err(503, 'service_unavailable', 'The turn response was lost.');
    }
    return res;
  }

  search(w, id, body) {
    for (const k of Object.keys(body)) if (!['query', 'run_id', 'limit'].includes(k)) return err(400, 'invalid_request', `Unknown field ${k}.`);
    if (typeof body.query !== 'string' || body.query.length === 0 || cpLen(body.query) > 1000) return err(400, 'invalid_request', 'query must be 1..1000 characters.');
    if (typeof body.run_id !== 'string') return err(400, 'invalid_request', 'run_id is required.');
    if (body.limit !== undefined && (!isInt(body.limit) || body.limit < 1 || body.limit > 3)) return err(400, 'invalid_request', 'limit must be an integer from 1 to 3.');
    const run = this.findRun(w, id, body.run_id);
    if (!run) return err(404, 'run_not_found', 'No such run for this Agent Session and route.');
    const wrap = (status) => (hints) => ({ schema_version: KNOWLEDGE_SCHEMA, status, hints, trust: 'reference_only' });
    const fi = this.faults.findIndex((f) => f.kind === 'fail_next_search_unavailable' && (!f.route || f.route === w.route));
    if (fi >= 0) { this.faults.splice(fi, 1); return ok(wrap('unavailable')([])); }
    if (w.mode === 'disabled') return ok(wrap('disabled')([]));
    if (w.mode === 'unavailable') return ok(wrap('unavailable')([]));
    const status = w.mode === 'partial' ? 'partial' : 'ok';
    return ok(wrap(status)(this.hints(w, id, run, body.query, body.limit ?? 3, wrap(status), LIMITS.search_max_bytes)));
  }

  read(w, id, body) {
    for (const k of Object.keys(body)) if (!['ref', 'run_id', 'cursor', 'max_bytes'].includes(k)) return err(400, 'invalid_request', `Unknown field ${k}.`);
    if (typeof body.ref !== 'string' || body.ref.length === 0) return err(400, 'invalid_request', 'ref is required.');
    if (typeof body.run_id !== 'string') return err(400, 'invalid_request', 'run_id is required.');
    if (body.cursor !== undefined && body.cursor !== null && (typeof body.cursor !== 'string' || body.cursor.length === 0)) return err(400, 'invalid_request', 'cursor must be a string.');
    if (body.max_bytes !== undefined && !isInt(body.max_bytes)) return err(400, 'invalid_request', 'max_bytes must be an integer.');
    // A max_bytes outside 4096..32768 is clamped into the range (CHOICES: clamping is allowed).
    const maxBytes = Math.min(LIMITS.read_max_max_bytes, Math.max(LIMITS.read_min_max_bytes, body.max_bytes ?? LIMITS.read_default_max_bytes));
    if (w.mode === 'disabled') return err(403, 'knowledge_disabled', 'Knowledge is disabled for this workspace.');
    const fi = this.faults.findIndex((f) => f.kind === 'fail_next_read_unavailable' && (!f.route || f.route === w.route));
    if (fi >= 0) { this.faults.splice(fi, 1); return err(503, 'knowledge_unavailable', 'The knowledge service is unavailable.'); }
    if (w.mode === 'unavailable') return err(503, 'knowledge_unavailable', 'The knowledge service is unavailable.');
    // Core's reference errors carry {error, message}; the feedback (next_action) is the SDK's/MCP's to build.
    const refErr = (status, code, message) => err(status, code, message);
    const ref = this.verify(body.ref, 'r');
    if (!ref) return refErr(400, 'knowledge_reference_invalid', 'The reference is malformed, tampered with or too long.');
    let cur = null;
    if (typeof body.cursor === 'string') {
      cur = this.verify(body.cursor, 'c');
      if (!cur) return refErr(400, 'knowledge_reference_invalid', 'The cursor is malformed, tampered with or too long.');
    }
    const now = this.now(w.route);
    for (const t of [ref, cur]) {
      if (!t) continue;
      if (t.h !== id.hub || t.s !== id.session_id || t.a !== id.account || t.w !== w.route) return refErr(403, 'knowledge_reference_mismatch', 'The reference belongs to another Hub, session, account or route.');
      if (now - t.t / 1000 > LIMITS.reference_ttl_seconds) return refErr(410, 'knowledge_reference_expired', 'The reference has expired; search again.');
    }
    const run = this.findRun(w, id, body.run_id);
    if (!run) return err(404, 'run_not_found', 'No such run for this Agent Session and route.');
    for (const t of [ref, cur]) if (t && t.r !== run.run_id) return refErr(403, 'knowledge_reference_mismatch', 'The reference belongs to another run.');
    const src = cur || ref; // a cursor names its own chain (CHOICES: allowed)
    const item = w.items.get(src.i);
    if (!item || !item.active || !item.published || !w.bases.get(item.baseId)?.active) return refErr(409, 'knowledge_revision_changed', 'The referenced document changed; search again.');
    if (!this.baseVisible(w, id.account, item.baseId)) return refErr(409, 'knowledge_scope_changed', 'The knowledge scope changed; search again.');
    if (item.current.id !== src.v) return refErr(409, 'knowledge_revision_changed', 'The referenced revision changed; search again.');
    return ok(this.page(w, id, run, body.ref, item, cur ? cur.o : 0, cur ? cur.c : 0, maxBytes));
  }

  page(w, id, run, refText, item, offset, used, maxBytes) {
    const rev = item.current;
    const cps = rev._cps || (rev._cps = Array.from(rev.content));
    const total = rev._bytes ?? (rev._bytes = bytes(rev.content));
    const budget = LIMITS.read_chain_max_bytes;
    const cursorFor = (o, c) => this.sign({ k: 'c', w: id.route, h: id.hub, s: id.session_id, a: id.account, r: run.run_id, i: item.id, v: rev.id, o, c, t: Math.floor(this.now(w.route) * 1000) });
    const make = (content, next, truncated, exhausted) => {
      const p = { schema_version: KNOWLEDGE_SCHEMA, ref: refText, revision: rev.n, content, next_cursor: next };
      if (truncated) p.truncated = true; // left out on the page that completes the revision (CHOICES: allowed)
      if (exhausted) p.budget_exhausted = true;
      p.trust = 'reference_only'; p.total_content_bytes = total; p.read_chain_max_bytes = budget;
      return p;
    };
    const worstCursor = cursorFor(cps.length + 1000000, budget + 1000000);
    const overhead = bytes(JSON.stringify(make('', worstCursor, true, false)));
    const room = maxBytes - overhead;
    let i = offset, pageRaw = 0, pageEsc = 0;
    const parts = [];
    let stop = 'end';
    while (i < cps.length) {
      const ch = cps[i];
      const esc = bytes(JSON.stringify(ch)) - 2, raw = bytes(ch);
      if (pageEsc + esc > room) { stop = 'space'; break; }
      if (used + pageRaw + raw > budget) { stop = 'budget'; break; }
      parts.push(ch); pageEsc += esc; pageRaw += raw; i++;
    }
    const content = parts.join('');
    if (i >= cps.length) return make(content, null, false, false);
    const nextRaw = bytes(cps[i]);
    if (stop === 'budget' || used + pageRaw + nextRaw > budget) return make(content, null, true, true);
    return make(content, cursorFor(i, used + pageRaw), true, false);
  }

  // ------------------------------------------------- seed 003: search_knowledge
  searchKnowledge(w, id, args) {
    if (process.env.MCPTS_LOG_TOOL) console.error('search_knowledge', JSON.stringify(args).slice(0, 300));
    const kerr = (status, error, message, type = 'knowledge_error') => ({ status, body: { type, error, message } });
    const scopes = w.kscopes.get(id.account) || ['knowledge:read'];
    if (broken('sk_scope_prefix') ? !scopes.some((sc) => sc.startsWith('knowledge:')) : !scopes.includes('knowledge:read')) return kerr(403, 'insufficient_scope', 'knowledge:read is required.');
    const a = { ...args };
    const strs = ['query', 'knowledge_base_id', 'knowledge_item_id', 'knowledge_revision_id', 'mode'];
    for (const k of strs) if (a[k] !== undefined && a[k] !== null && typeof a[k] !== 'string') return kerr(400, 'invalid_arguments', `${k} must be a string.`);
    if (broken('sk_limit_chars_string') && typeof a.limit_chars === 'string' && /^\s*-?\d+\s*$/.test(a.limit_chars)) a.limit_chars = parseInt(a.limit_chars, 10);
    if (broken('sk_numeric_strings')) for (const k of ['offset', 'limit_chars', 'max_results']) if (typeof a[k] === 'string' && a[k].trim() !== '' && Number.isFinite(Number(a[k]))) a[k] = Number(a[k]);
    for (const k of ['offset', 'limit_chars', 'max_results']) if (a[k] !== undefined && a[k] !== null && !isInt(a[k])) return kerr(400, 'invalid_arguments', `${k} must be an integer.`);
    if (a.alpha !== undefined && a.alpha !== null && (typeof a.alpha !== 'number' || !Number.isFinite(a.alpha))) return kerr(400, 'invalid_arguments', 'alpha must be a number.');
    const query = a.query ?? '', baseId = a.knowledge_base_id ?? '', itemId = a.knowledge_item_id ?? '', revId = a.knowledge_revision_id ?? '';
    if (cpLen(query) > 2000) return kerr(400, 'invalid_arguments', 'query is longer than 2000 characters.');
    if (!w.runtime && broken('sk_runtime_off_empty')) return ok({ type: 'knowledge_search', query, mode: normaliseMode(a.mode), results: [] }); // nothing to search while the runtime is off
    if (!w.runtime) return kerr(503, 'knowledge_runtime_disabled', 'The Knowledge runtime is switched off for this workspace.', 'knowledge_unavailable');
    const offset = a.offset ?? 0, limitChars = a.limit_chars ?? 4000, maxResults = a.max_results ?? (broken('sk_max_results_default') ? 5 : 10);
    if (offset < 0 || limitChars < 1 || (broken('sk_limit_chars_10000_refused') ? limitChars >= 10000 : limitChars > 10000) || maxResults < (broken('sk_max_results_zero') ? 0 : 1) || maxResults > 50) return kerr(400, 'knowledge_invalid_request', 'offset, limit_chars or max_results is out of bounds.');
    const hasQuery = query.trim().length > 0;
    if (hasQuery && (itemId || revId) && !broken('sk_mixed_allowed')) return kerr(400, 'knowledge_invalid_request', 'query cannot be mixed with knowledge_item_id or knowledge_revision_id.');
    const unavailable = () => kerr(404, 'knowledge_resource_unavailable', 'The requested knowledge resource is unavailable.');
    let mode = normaliseMode(a.mode);
    if (broken('sk_mode_not_normalised')) {
      const m = String(a.mode ?? 'hybrid');
      if (!['hybrid', 'lexical', 'semantic', 'rrf'].includes(m)) return kerr(400, 'knowledge_invalid_request', `Unknown mode ${m}.`);
      mode = m;
    }
    if (hasQuery) {
      if (baseId && !this.baseVisible(w, id.account, baseId)) return unavailable();
      const account = broken('sk_owner_from_caller') && typeof args.owner === 'string' ? args.owner : id.account;
      const stats = this.searchable(w);
      const docs = stats.filter((d) => this.itemVisible(w, account, d.item) && (!baseId || d.item.baseId === baseId));
      const rows = rank(query, docs, stats, mode, a.alpha ?? 0.5).slice(0, maxResults);
      const byKey = new Map(docs.map((d) => [d.key, d]));
      const results = rows.map((r) => {
        const d = byKey.get(r.key), rev = d.rev;
        return {
          knowledge_base_id: d.item.baseId, knowledge_item_id: d.item.id, knowledge_revision_id: rev.id,
          title: rev.title, excerpt: broken('sk_excerpt_whole') ? rev.content : Array.from(rev.content).slice(0, 500).join(''),
          citation: { title: rev.title, knowledge_base_id: d.item.baseId, uri: `knowledge://${w.route}/${d.item.baseId}/${d.item.id}/${rev.id}` },
          reference: { knowledge_item_id: d.item.id, knowledge_revision_id: rev.id, uri: `knowledge://${w.route}/${d.item.baseId}/${d.item.id}/${rev.id}` },
          scores: r.scores,
        };
      });
      const out = { type: 'knowledge_search', query, mode, results };
      if (broken('sk_audit_envelope')) out.audit = { action: 'knowledge_search', at: this.now(w.route) };
      return ok(out);
    }
    let addressed = itemId;
    if (!itemId && revId && broken('sk_revision_without_item')) {
      // the item is resolved from the revision; an unknown revision is then "unavailable"
      addressed = '\u0000no-item';
      for (const it of w.items.values()) if (it.revisions.some((r) => r.id === revId)) addressed = it.id;
    }
    if (!addressed) {
      if (revId) return kerr(400, 'knowledge_item_required', 'knowledge_revision_id requires knowledge_item_id.');
      return kerr(400, 'knowledge_query_required', 'Give a query or a knowledge_item_id.');
    }
    const item = w.items.get(addressed);
    if (!item || !this.itemVisible(w, id.account, item) || (baseId && item.baseId !== baseId && !broken('sk_base_unchecked_on_read'))) return unavailable();
    const rev = broken('sk_read_first_revision') ? item.revisions.find((r) => !revId || r.id === revId) : revId ? item.revisions.find((r) => r.id === revId) : item.current;
    if (!rev) return unavailable();
    const cps = rev._cps || (rev._cps = Array.from(rev.content));
    let window, total;
    if (broken('sk_offset_bytes')) { // offset and limit counted in UTF-8 bytes
      const buf = Buffer.from(rev.content, 'utf8');
      total = buf.length;
      window = buf.subarray(offset, offset + limitChars).toString('utf8');
    } else {
      total = broken('sk_total_chars_utf16') ? rev.content.length : cps.length;
      if (offset > total) return kerr(400, 'knowledge_invalid_request', 'offset is past the end of the content.'); // CHOICES: a refusal past the end is allowed
      window = cps.slice(offset, offset + limitChars).join('');
    }
    if (broken('sk_audit_on_read')) w.audit.push({ action: 'item_read', item_id: item.id, revision_id: rev.id, at: this.now(w.route) });
    return ok({
      type: 'knowledge', owner: id.account, team: null, scope: `workspace:${w.route}`,
      knowledge_base_id: item.baseId, knowledge_item_id: item.id, knowledge_revision_id: rev.id,
      title: rev.title, content: window,
      locator: { knowledge_item_id: item.id, knowledge_revision_id: rev.id, offset, limit_chars: limitChars },
      source: { title: rev.title, knowledge_base_id: item.baseId, uri: `knowledge://${w.route}/${item.baseId}/${item.id}/${rev.id}` },
      reference: { knowledge_item_id: item.id, knowledge_revision_id: rev.id, uri: `knowledge://${w.route}/${item.baseId}/${item.id}/${rev.id}` },
      content_offset: offset, content_limit: limitChars, content_total_chars: total,
      content_truncated: offset + limitChars < total,
    });
  }

  // ------------------------------------------------------------- control
  get controlBase() { return '/_control/v1'; }

  control(req) {
    const auth = req.headers.authorization || '';
    if (auth !== 'Bearer ' + this.controlToken) return err(401, 'unauthorized', 'The control credential is required.');
    const p = req.path.slice(this.controlBase.length) || '/';
    let body = null;
    if (req.method === 'POST' || req.method === 'PUT') {
      if (req.body && req.body.length) {
        try { body = JSON.parse(req.body.toString('utf8')); } catch { return err(400, 'invalid_request', 'The body is not valid JSON.'); }
      }
      if (!isObj(body)) body = body === null ? {} : body;
      if (!isObj(body)) return err(400, 'invalid_request', 'The body must be a JSON object.');
    }
    const route = (r) => {
      if (!ROUTE_RE.test(r) || r === 'auto') return [null, err(400, 'invalid_route', 'Invalid route.')];
      const w = this.workspaces.get(r);
      return w ? [w, null] : [null, err(404, 'route_unavailable', 'No such workspace.')];
    };
    let m;
    const M = req.method;
    if (p === '/' && M === 'GET') return ok({ version: '1.1.0', features: ['clock.routes', 'faults.lost', 'faults.respond_next', 'faults.respond_next.after', 'faults.respond_next.text', 'transcript', 'knowledge'] });
    if (p === '/reset' && M === 'POST') { this.reset(); return { status: 204, body: undefined }; }
    if (p === '/workspaces' && M === 'POST') {
      if (typeof body.route !== 'string' || !ROUTE_RE.test(body.route) || body.route === 'auto') return err(400, 'invalid_route', 'Invalid route.');
      if (body.mode !== undefined && !['normal', 'disabled', 'unavailable', 'partial', 'legacy'].includes(body.mode)) return err(400, 'invalid_request', 'Unknown mode.');
      if (this.workspaces.has(body.route)) return err(409, 'conflict', 'The workspace exists.');
      this.createWorkspace(body.route, body.mode || 'normal');
      return ok({ route: body.route, mode: body.mode || 'normal' }, 201);
    }
    if ((m = /^\/workspaces\/([^/]+)$/.exec(p)) && M === 'DELETE') {
      const [w, e] = route(m[1]); if (e) return e;
      this.workspaces.delete(w.route);
      for (const [t, id] of this.identities) if (id.route === w.route) this.identities.delete(t);
      for (const [k, r] of this.runs) if (r.route === w.route) this.runs.delete(k);
      for (const k of this.turns.keys()) if (k.split('\u0000')[2] === w.route) this.turns.delete(k);
      return { status: 204, body: undefined };
    }
    if ((m = /^\/workspaces\/([^/]+)\/corpus$/.exec(p)) && M === 'PUT') {
      const [w, e] = route(m[1]); if (e) return e;
      if (!Array.isArray(body.bases)) return err(400, 'invalid_request', 'bases is required.');
      for (const b of body.bases) {
        if (!isObj(b) || typeof b.id !== 'string' || !ID_RE.test(b.id) || !Array.isArray(b.items)) return err(400, 'invalid_request', 'Malformed base.');
        for (const it of b.items) if (!isObj(it) || typeof it.id !== 'string' || !ID_RE.test(it.id) || typeof it.title !== 'string' || typeof it.content !== 'string' || (it.summary !== undefined && typeof it.summary !== 'string')) return err(400, 'invalid_request', 'Malformed item.');
      }
      return ok({ items: this.replaceCorpus(w, body.bases) });
    }
    if ((m = /^\/workspaces\/([^/]+)\/(knowledge\/)?items\/([^/]+)\/revisions$/.exec(p)) && M === 'POST') {
      const [w, e] = route(m[1]); if (e) return e;
      const item = w.items.get(decodeURIComponent(m[3]));
      if (!item) return err(404, 'not_found', 'No such item.');
      if (typeof body.content !== 'string' || (body.title !== undefined && typeof body.title !== 'string') || (body.summary !== undefined && typeof body.summary !== 'string')) return err(400, 'invalid_request', 'content is required.');
      const rev = this.publishRevision(w, item, body);
      if (m[2]) w.audit.push({ action: 'revision_published', item_id: item.id, revision_id: rev.id, at: this.now(w.route) });
      return ok({ item_id: item.id, revision_id: rev.id }, 201);
    }
    if ((m = /^\/workspaces\/([^/]+)\/scopes\/([^/]+)$/.exec(p)) && M === 'PUT') {
      const [w, e] = route(m[1]); if (e) return e;
      if (!Array.isArray(body.bases) || body.bases.some((b) => typeof b !== 'string')) return err(400, 'invalid_request', 'bases is required.');
      const account = decodeURIComponent(m[2]);
      const prev = w.scopes.get(account);
      const sc = { bases: [...new Set(body.bases)], version: (prev ? prev.version : 0) + 1 };
      w.scopes.set(account, sc);
      return ok({ bases: sc.bases, version: sc.version });
    }
    if ((m = /^\/workspaces\/([^/]+)\/mode$/.exec(p)) && M === 'PUT') {
      const [w, e] = route(m[1]); if (e) return e;
      if (!['normal', 'disabled', 'unavailable', 'partial', 'legacy'].includes(body.mode)) return err(400, 'invalid_request', 'Unknown mode.');
      if (body.legacy_status !== undefined && ![404, 405, 501].includes(body.legacy_status)) return err(400, 'invalid_request', 'legacy_status must be 404, 405 or 501.');
      w.mode = body.mode; w.legacyStatus = body.legacy_status ?? 404;
      return ok({ mode: w.mode, ...(w.mode === 'legacy' ? { legacy_status: w.legacyStatus } : {}) });
    }
    if (p === '/clock' && M === 'GET') return ok({ now: this.now() });
    if (p === '/clock' && M === 'PUT') {
      if (typeof body.now !== 'number') return err(400, 'invalid_request', 'now is required.');
      this.clockOffset = body.now - Date.now() / 1000;
      return ok({ now: this.now() });
    }
    if (p === '/clock/advance' && M === 'POST') {
      if (typeof body.seconds !== 'number' || body.seconds < 0 || body.seconds > 31536000) return err(400, 'invalid_request', 'seconds must be 0..31536000.');
      if (body.routes !== undefined) {
        if (!Array.isArray(body.routes)) return err(400, 'invalid_request', 'routes must be an array.');
        for (const r of body.routes) { const w = this.workspaces.get(r); if (w) w.clockOffset += body.seconds; }
      } else this.clockOffset += body.seconds;
      return ok({ now: this.now() });
    }
    if (p === '/identities' && M === 'POST') {
      if (typeof body.account !== 'string' || !ID_RE.test(body.account)) return err(400, 'invalid_request', 'account is required.');
      const [w, e] = route(body.route); if (e) return e;
      if (body.session_id !== undefined && (typeof body.session_id !== 'string' || !UUID_RE.test(body.session_id))) return err(400, 'invalid_request', 'session_id must be a UUID.');
      if (body.hub !== undefined && typeof body.hub !== 'string') return err(400, 'invalid_request', 'hub must be a string.');
      const id = this.mintIdentity({ account: body.account, route: w.route, hub: body.hub, session_id: body.session_id && body.session_id.toLowerCase() });
      return ok({ ...id }, 201);
    }
    if (p === '/faults' && M === 'POST') {
      const kinds = ['lose_next_turn_response', 'fail_next_search_unavailable', 'fail_next_read_unavailable', 'respond_next'];
      if (!kinds.includes(body.kind)) return err(400, 'invalid_request', 'Unknown fault kind.');
      if (body.kind === 'respond_next') {
        if (!['capabilities', 'search', 'read', 'turns'].includes(body.endpoint) || !isInt(body.status)) return err(400, 'invalid_request', 'respond_next needs endpoint and status.');
      }
      const f = { ...body, after: body.after ?? 0 };
      this.faults.push(f);
      return ok(body, 201);
    }
    if (p === '/faults/lost' && M === 'GET') {
      const r = req.query && req.query.get('route');
      return ok({ responses: this.lost.filter((x) => !r || x.route === r) });
    }
    if (p === '/transcript' && M === 'GET') return ok({ requests: this.transcript });
    if ((m = /^\/workspaces\/([^/]+)\/knowledge\/items\/([^/]+)\/state$/.exec(p)) && M === 'PUT') {
      const [w, e] = route(m[1]); if (e) return e;
      const item = w.items.get(decodeURIComponent(m[2]));
      if (!item) return err(404, 'not_found', 'No such item.');
      if (!Object.keys(body).length || Object.keys(body).some((k) => !['active', 'published'].includes(k) || typeof body[k] !== 'boolean')) return err(400, 'invalid_request', 'active and/or published (booleans).');
      if (body.active !== undefined) { item.active = body.active; w.audit.push({ action: body.active ? 'item_activated' : 'item_archived', item_id: item.id, at: this.now(w.route) }); }
      if (body.published !== undefined) { item.published = body.published; w.audit.push({ action: body.published ? 'item_published' : 'item_unpublished', item_id: item.id, at: this.now(w.route) }); }
      return { status: 204, body: undefined };
    }
    if ((m = /^\/workspaces\/([^/]+)\/knowledge\/bases\/([^/]+)\/state$/.exec(p)) && M === 'PUT') {
      const [w, e] = route(m[1]); if (e) return e;
      const b = w.bases.get(decodeURIComponent(m[2]));
      if (!b) return err(404, 'not_found', 'No such base.');
      if (typeof body.active !== 'boolean') return err(400, 'invalid_request', 'active (boolean) is required.');
      b.active = body.active; w.audit.push({ action: body.active ? 'base_activated' : 'base_archived', base_id: b.id, at: this.now(w.route) });
      return { status: 204, body: undefined };
    }
    if ((m = /^\/workspaces\/([^/]+)\/knowledge\/runtime$/.exec(p)) && M === 'PUT') {
      const [w, e] = route(m[1]); if (e) return e;
      if (typeof body.enabled !== 'boolean') return err(400, 'invalid_request', 'enabled (boolean) is required.');
      w.runtime = body.enabled;
      return ok({ enabled: w.runtime });
    }
    if ((m = /^\/workspaces\/([^/]+)\/knowledge\/scopes\/([^/]+)$/.exec(p)) && M === 'PUT') {
      const [w, e] = route(m[1]); if (e) return e;
      if (!Array.isArray(body.scopes) || body.scopes.some((s) => typeof s !== 'string')) return err(400, 'invalid_request', 'scopes is required.');
      w.kscopes.set(decodeURIComponent(m[2]), [...new Set(body.scopes)]);
      return ok({ scopes: w.kscopes.get(decodeURIComponent(m[2])) });
    }
    if ((m = /^\/workspaces\/([^/]+)\/knowledge\/audit$/.exec(p)) && M === 'GET') {
      const [w, e] = route(m[1]); if (e) return e;
      return ok({ events: w.audit });
    }
    return err(404, 'not_found', 'No such control endpoint.');
  }
}

// A demo workspace for a standalone start.
export function seedDemo(core, route = 'demo') {
  const w = core.workspaces.get(route) || core.createWorkspace(route);
  const long = Array.from({ length: 1200 }, (_, i) => `Entry ${i}: the support ticket archive keeps résumé notes, 東京 offices and emoji 🚀 for ticket ${i}.`).join('\n');
  core.replaceCorpus(w, [{ id: 'handbook', name: 'Handbook', items: [
    { id: 'onboarding', title: 'Onboarding guide', summary: 'How new staff get started.', content: 'Onboarding: accounts, laptops and the first week. '.repeat(40) },
    { id: 'homepage', title: 'Homepage binding', summary: 'Binding the homepage to a workspace.', content: 'The homepage binding connects a domain to the workspace. '.repeat(30) },
    { id: 'archive', title: 'Support ticket archive', summary: 'Old tickets.', content: long },
  ] }]);
  return w;
}
