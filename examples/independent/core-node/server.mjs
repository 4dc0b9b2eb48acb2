// An independent Core of the agent knowledge search/read contract (seed 000)
// with the test-control extension (schemas/control-openapi.yaml, release 1.1.0).
// Node 20, standard library only. Written apart from the conformance suite.
//
//   node server.mjs --host 127.0.0.1 --port 8080
//
// Environment: NODECORE_CONTROL_TOKEN (the control credential; without it the
// control extension is not served), NODECORE_BROKEN=<variant> (one broken variant,
// see variants.json).

import http from 'node:http';
import crypto from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { readFileSync, createWriteStream } from 'node:fs';

// ------------------------------------------------------------------ constants
const CAPS_SCHEMA = 'bailing.agent-knowledge-capabilities.v1';
const KNOWLEDGE_SCHEMA = 'bailing.agent-knowledge.v1';
const TURN_SCHEMA = 'bailing.agent-turn-context.v1';
const FEEDBACK_SCHEMA = 'bailing.agent-feedback.v1';
const TRUST = 'reference_only';
const SEARCH_MAX_HINTS = 3;
const SEARCH_MAX_BYTES = 4096;
const READ_DEFAULT = 16384;
const READ_MIN = 4096;
const READ_MAX = 32768;
const REF_MAX_BYTES = 4096;
const CHAIN_BUDGET = 131072;
const TTL_SECONDS = 300;
const CORE_BODY_LIMIT = 1048576;
const CONTROL_BODY_LIMIT = 256 * 1048576;
const TRANSCRIPT_MAX = 20000;

const ROUTE_RE = /^[a-z0-9][a-z0-9_-]{1,63}$/;
const ID_RE = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;
const UUID_RE = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

const hasOwn = (o, k) => Object.prototype.hasOwnProperty.call(o, k);
const isPlainObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const cpLength = (s) => { let n = 0; for (const _ of s) n++; return n; };
const validRoute = (r) => typeof r === 'string' && ROUTE_RE.test(r) && r !== 'auto';
const b64u = (buf) => Buffer.from(buf).toString('base64url');

class HttpError extends Error {
  constructor(status, code, message, extra) {
    super(message);
    this.status = status;
    this.code = code;
    this.extra = extra;
  }
}
const invalid = (message) => new HttpError(400, 'invalid_request', message);

// JSON.stringify byte size of one character (UTF-8), as it appears inside a string.
function escapedBytes(cp) {
  if (cp === 0x22 || cp === 0x5c) return 2;
  if (cp < 0x20) return (cp === 8 || cp === 9 || cp === 10 || cp === 12 || cp === 13) ? 2 : 6;
  if (cp < 0x80) return 1;
  if (cp < 0x800) return 2;
  if (cp >= 0xd800 && cp <= 0xdfff) return 6; // lone surrogate: \udXXX
  if (cp < 0x10000) return 3;
  return 4;
}

// Cut a string to at most maxBytes of JSON-escaped UTF-8, never inside a code point.
function cutEscaped(s, maxBytes, utf16 = false) {
  let used = 0;
  let out = '';
  if (utf16) { // broken variant: counts UTF-16 units, one per unit
    return s.length <= maxBytes ? s : s.slice(0, Math.max(0, maxBytes));
  }
  for (const ch of s) {
    const b = escapedBytes(ch.codePointAt(0));
    if (used + b > maxBytes) break;
    used += b;
    out += ch;
  }
  return out;
}
function cutCodePoints(s, n) {
  let i = 0;
  let out = '';
  for (const ch of s) { if (i++ >= n) break; out += ch; }
  return out;
}

// ---------------------------------------------------------------- the Core
export function createCore(options = {}) {
  const broken = options.broken || '';
  const B = (name) => broken === name;
  const controlToken = options.controlToken || '';
  const logStream = options.logFile ? createWriteStream(options.logFile, { flags: 'a' }) : null;
  let selfHub = options.hub || 'http://127.0.0.1';
  const key = crypto.randomBytes(32); // signing key; kept across reset

  let state;
  function resetState() {
    state = {
      workspaces: new Map(),
      tokens: new Map(),
      clockOffsetMs: 0,
      routeOffsetMs: new Map(),
      faults: [],
      lost: [],
      transcript: [],
      searchCache: new Map(),
    };
  }
  resetState();

  // ----------------------------------------------------------- clock
  const nowMs = (route) => Date.now() + state.clockOffsetMs + (route ? (state.routeOffsetMs.get(route) || 0) : 0);

  // ----------------------------------------------------------- tokens
  function sign(payload) {
    const p = b64u(JSON.stringify(payload));
    const s = b64u(crypto.createHmac('sha256', key).update(p).digest().subarray(0, 24));
    return `${p}.${s}`;
  }
  function verify(token, type) {
    if (typeof token !== 'string') return null;
    const dot = token.indexOf('.');
    if (dot <= 0 || dot !== token.lastIndexOf('.')) return null;
    const p = token.slice(0, dot);
    const s = token.slice(dot + 1);
    const want = b64u(crypto.createHmac('sha256', key).update(p).digest().subarray(0, 24));
    if (B('sig_decoded_lenient')) {
      // compare the decoded MAC bytes (base64url decoding is lenient: extra or foreign characters are skipped)
      if (!Buffer.from(s, 'base64url').subarray(0, 24).equals(crypto.createHmac('sha256', key).update(p).digest().subarray(0, 24))) return null;
    } else {
      const a = Buffer.from(s);
      const b = Buffer.from(want);
      if (a.length !== b.length || !crypto.timingSafeEqual(a, b)) return null;
    }
    let payload;
    try { payload = JSON.parse(Buffer.from(p, 'base64url').toString('utf8')); } catch { return null; }
    if (!isPlainObject(payload) || payload.t !== type) return null;
    return payload;
  }
  function ownerHash(identity) {
    const parts = [
      B('ref_unbound_hub') ? '' : identity.hub,
      B('ref_unbound_session') ? '' : identity.session_id,
      B('ref_unbound_account') ? '' : identity.account,
      identity.route,
    ];
    return b64u(crypto.createHash('sha256').update(JSON.stringify(parts)).digest().subarray(0, 16));
  }
  // Runs are owned by the same complete identity (Hub, session, account, route).
  const runOwner = ownerHash;

  // ----------------------------------------------------------- corpus
  function makeRevision(ws, title, summary, content) {
    ws.revCounter += 1;
    return { n: ws.revCounter, title, summary, content, buf: Buffer.from(content, 'utf8'), terms: null };
  }
  function termsOf(rev) {
    if (!rev.terms) {
      const count = (text, weight, map) => {
        for (const m of text.toLowerCase().matchAll(/[\p{L}\p{N}]+/gu)) map.set(m[0], (map.get(m[0]) || 0) + weight);
      };
      const map = new Map();
      count(rev.title, 5, map);
      count(rev.summary, 2, map);
      count(rev.content, 1, map);
      rev.terms = map;
    }
    return rev.terms;
  }
  function scopeAllows(ws, account, base) {
    const sc = ws.scopes.get(account);
    return !sc || sc.bases.has(base);
  }
  function rank(ws, identity, query, limit) {
    const terms = [...new Set(query.toLowerCase().match(/[\p{L}\p{N}]+/gu) || [])];
    if (!terms.length) return [];
    const scored = [];
    // Partial: the index of the last knowledge base is down (when there are several).
    const down = ws.mode === 'partial' && ws.bases.size > 1 ? [...ws.bases.keys()].pop() : null;
    for (const item of ws.items.values()) {
      if (!scopeAllows(ws, identity.account, item.base)) continue;
      if (item.base === down) continue;
      const tf = termsOf(item.current);
      let score = 0;
      let matched = 0;
      for (const t of terms) {
        const c = tf.get(t) || 0;
        if (c) { matched++; score += 1 + Math.log(1 + c); }
      }
      if (score > 0) scored.push({ item, score: score + matched * 10 });
    }
    scored.sort((a, b) => (b.score - a.score) || (a.item.id < b.item.id ? -1 : a.item.id > b.item.id ? 1 : 0));
    return scored.slice(0, limit).map((s) => s.item);
  }
  function issueRef(ws, identity, runId, item) {
    const sc = ws.scopes.get(identity.account);
    return sign({
      t: 'r', w: ws.incarnation, o: ownerHash(identity), u: runId, i: item.id, b: item.base,
      r: item.current.n, s: sc ? sc.version : 0, at: Math.round(nowMs(ws.route)),
    });
  }
  // A hint never carries the whole document: a title or summary holding the whole
  // content is cut inside its first occurrence.
  function withoutWhole(text, content) {
    const whole = content.trim();
    if (!whole || B('summary_sent_whole')) return text;
    const at = text.indexOf(whole);
    if (at < 0) return text;
    return text.slice(0, at) + cutCodePoints(whole, Math.floor(cpLength(whole) / 2));
  }
  function hintsFor(ws, identity, runId, items) {
    return items.map((item) => {
      const h = {
        title: withoutWhole(cutCodePoints(item.current.title, 256), item.current.content),
        summary: withoutWhole(cutCodePoints(item.current.summary, 512), item.current.content),
        ref: issueRef(ws, identity, runId, item),
      };
      return h;
    });
  }
  // Trim a body holding `hints` to `max` UTF-8 bytes of JSON: summaries first, then titles, then hints.
  function fitHints(body, max) {
    const size = () => (B('search_bound_utf16') ? JSON.stringify(body).length : Buffer.byteLength(JSON.stringify(body)));
    const utf16 = B('search_bound_utf16');
    for (const field of ['summary', 'title']) {
      for (let i = body.hints.length - 1; i >= 0 && size() > max; i--) {
        const h = body.hints[i];
        const cur = utf16 ? JSON.stringify(h[field]).length - 2 : Buffer.byteLength(JSON.stringify(h[field])) - 2;
        h[field] = cutEscaped(h[field], Math.max(0, cur - (size() - max)), utf16);
      }
    }
    while (size() > max && body.hints.length) body.hints.pop();
    return body;
  }

  // ----------------------------------------------------------- helpers
  function findFault(kind, route, endpoint) {
    const i = state.faults.findIndex((f) => f.kind === kind && (!f.route || f.route === route)
      && (endpoint === undefined || f.endpoint === endpoint));
    return i;
  }
  function takeFault(kind, route) {
    const i = findFault(kind, route);
    if (i < 0) return false;
    state.faults.splice(i, 1);
    return true;
  }

  function errorBody(code, message, extra) {
    return { error: code, message: message || code.replace(/_/g, ' '), ...(extra || {}) };
  }
  function refError(status, code, message) {
    const fb = {
      schema_version: FEEDBACK_SCHEMA, category: 'knowledge_reference', code, origin: 'core',
      operation: 'read_knowledge', dispatch: 'not_dispatched', retryable: true,
      next_action: (B('expired_next_action_retry') && code === 'knowledge_reference_expired') ? 'retry' : 'search_knowledge', message,
    };
    return new HttpError(status, code, message, { feedback: fb });
  }

  function parseJsonBody(raw) {
    if (!raw || raw.length === 0) throw invalid('A JSON object body is required.');
    let text;
    try { text = new TextDecoder('utf-8', { fatal: true }).decode(raw); } catch { throw invalid('The body is not UTF-8.'); }
    let v;
    try { v = JSON.parse(text); } catch { throw invalid('The body is not valid JSON.'); }
    if (!isPlainObject(v)) throw invalid('The body must be a JSON object.');
    return v;
  }
  function onlyKeys(body, allowed) {
    for (const k of Object.keys(body)) if (!allowed.includes(k)) throw invalid(`Unknown field: ${k}.`);
  }
  function requireString(body, k, { min = 1, max = Infinity, re } = {}) {
    if (!hasOwn(body, k)) throw invalid(`${k} is required.`);
    const v = body[k];
    if (typeof v !== 'string') throw invalid(`${k} must be a string.`);
    const n = cpLength(v);
    if (n < min || n > max) throw invalid(`${k} must have ${min}..${max} characters.`);
    if (re && !re.test(v)) throw invalid(`${k} is malformed.`);
    return v;
  }
  function requireRunId(body) {
    if (B('run_id_lowercase_first')) body.run_id = body.run_id.toLowerCase(); // normalise first (crashes on a non-string)
    const v = requireString(body, 'run_id');
    if (!UUID_RE.test(v)) throw invalid('run_id must be a UUID.');
    return v.toLowerCase();
  }
  function findRun(ws, identity, runId) {
    const run = ws.runs.get(runId);
    if (!run || (!B('run_any_owner') && run.owner !== runOwner(identity))) {
      throw new HttpError(404, 'run_not_found', 'No such run for this Agent Session and route.');
    }
    return run;
  }

  // ----------------------------------------------------------- Agent API
  const capsMemo = new Map();
  function capabilities(ws) {
    if (B('caps_memoized_per_route')) {
      if (!capsMemo.has(ws.route)) capsMemo.set(ws.route, capabilitiesFresh(ws));
      return capsMemo.get(ws.route);
    }
    return capabilitiesFresh(ws);
  }
  function capabilitiesFresh(ws) {
    return {
      schema_version: CAPS_SCHEMA,
      knowledge_schema_version: KNOWLEDGE_SCHEMA,
      route: ws.route,
      enabled: ws.mode !== 'disabled',
      delivery_modes: ['inline', 'on_demand'],
      limits: {
        search_max_hints: SEARCH_MAX_HINTS,
        search_max_bytes: SEARCH_MAX_BYTES,
        read_default_max_bytes: B('caps_default_4096') ? 4096 : READ_DEFAULT,
        read_min_max_bytes: READ_MIN,
        read_max_max_bytes: READ_MAX,
        reference_max_bytes: REF_MAX_BYTES,
        read_chain_max_bytes: B('caps_limits_strings') ? (process.env.KNOWLEDGE_CHAIN_BUDGET || '131072') : CHAIN_BUDGET,
        reference_ttl_seconds: TTL_SECONDS,
      },
    };
  }

  function turn(ws, identity, body) {
    const allowed = ['client_conversation_id', 'client_turn_id', 'user_message_id', 'user_input'];
    if (ws.mode !== 'legacy') allowed.push('knowledge_delivery');
    onlyKeys(body, allowed);
    const conv = requireString(body, 'client_conversation_id', { re: ID_RE });
    const tid = requireString(body, 'client_turn_id', { re: ID_RE });
    const mid = requireString(body, 'user_message_id', { re: ID_RE });
    const input = requireString(body, 'user_input', { max: 64000 });
    let delivery = 'inline';
    if (hasOwn(body, 'knowledge_delivery')) {
      const d = body.knowledge_delivery;
      if (d !== 'inline' && d !== 'on_demand') throw invalid('knowledge_delivery must be inline or on_demand.');
      delivery = d;
    }
    const owner = runOwner(identity);
    // The payload as parsed and serialised again: member order counts (a reordered replay is a conflict).
    const fingerprint = JSON.stringify(body);
    const turnKey = JSON.stringify([B('turn_key_without_session') ? '' : owner, conv, tid, mid,
      B('turn_payload_in_key') ? fingerprint : '']);
    const prior = ws.turns.get(turnKey);
    if (prior) {
      if (prior.fingerprint !== fingerprint) {
        throw new HttpError(409, 'turn_conflict', 'This turn was started with another payload.');
      }
      return { status: 200, body: prior.body };
    }
    if (delivery === 'on_demand' && ws.mode === 'disabled' && !B('disabled_on_demand_inline')) {
      throw new HttpError(403, 'knowledge_disabled', 'Knowledge is disabled in this workspace; start the turn without on_demand delivery.');
    }
    const runId = crypto.randomUUID();
    ws.runs.set(runId, { id: runId, owner, delivery });
    const context = {
      governance: { knowledge_trust: TRUST },
      knowledge: [],
      knowledge_refs: [],
    };
    const effective = (delivery === 'on_demand' && ws.mode === 'disabled') ? 'inline' : delivery;
    const searchable = ws.mode === 'normal' || ws.mode === 'partial' || ws.mode === 'legacy'
      || (B('disabled_on_demand_inline') && ws.mode === 'disabled' && delivery === 'on_demand');
    if (effective === 'on_demand') {
      let status = ws.mode === 'partial' ? 'partial' : ws.mode === 'unavailable' ? 'unavailable' : 'ok';
      const items = status === 'unavailable' ? [] : rank(ws, identity, input, SEARCH_MAX_HINTS);
      const kd = { schema_version: KNOWLEDGE_SCHEMA, mode: 'on_demand', status, hints: [], trust: TRUST };
      kd.hints = hintsFor(ws, identity, runId, items);
      if (B('delivery_hint_summary_undefined')) kd.hints = kd.hints.map((h) => ({ ...h, summary: h.summary || undefined })); // leave empty summaries out of the turn
      fitHints(kd, SEARCH_MAX_BYTES);
      context.knowledge_delivery = kd;
      if (B('on_demand_refs_filled')) context.knowledge_refs = kd.hints.map((h) => ({ ref: h.ref, title: h.title }));
    } else if (searchable) {
      const items = rank(ws, identity, input, SEARCH_MAX_HINTS);
      for (const item of items) {
        const ref = issueRef(ws, identity, runId, item);
        context.knowledge.push({ title: item.current.title, content: cutCodePoints(item.current.content, 2000), ref });
        context.knowledge_refs.push({ ref, title: item.current.title });
      }
    }
    const resp = { schema_version: TURN_SCHEMA, run_id: runId, context };
    if (!B('lost_turn_not_committed')) ws.turns.set(turnKey, { fingerprint, body: resp });
    return { status: 200, body: resp, commit: () => ws.turns.set(turnKey, { fingerprint, body: resp }) };
  }

  function search(ws, identity, body) {
    onlyKeys(body, ['query', 'run_id', 'limit']);
    const query = requireString(body, 'query', { max: 1000 });
    const runId = (B('search_run_optional') && !hasOwn(body, 'run_id')) ? null : requireRunId(body);
    let limit = SEARCH_MAX_HINTS;
    if (hasOwn(body, 'limit')) {
      const l = body.limit;
      if (typeof l !== 'number' || !Number.isInteger(l) || l < 1) throw invalid('limit must be an integer from 1 to 3.');
      if (l > SEARCH_MAX_HINTS && !B('search_limit_unclamped')) throw invalid('limit must be an integer from 1 to 3: a search returns at most three hints.');
      limit = l;
    }
    const base = { schema_version: KNOWLEDGE_SCHEMA, status: 'ok', hints: [], trust: TRUST };
    if (ws.mode === 'disabled') return { ...base, status: 'disabled' };
    if (ws.mode === 'unavailable') return B('unavailable_search_ok_empty') ? { ...base } : { ...base, status: 'unavailable', message: 'The knowledge service is unavailable; this is not an empty result.' };
    if (runId !== null) findRun(ws, identity, runId);
    if (takeFault('fail_next_search_unavailable', ws.route)) {
      if (B('unavailable_search_ok_empty')) return { ...base }; // index error caught: no hits
      return { ...base, status: 'unavailable', message: 'The knowledge service is unavailable; this is not an empty result.' };
    }
    const status = ws.mode === 'partial' ? 'partial' : 'ok';
    let hints;
    if (B('search_cache_query_only')) {
      const cached = state.searchCache.get(query);
      if (cached) return JSON.parse(cached);
    }
    const items = rank(ws, identity, query, limit);
    hints = hintsFor(ws, identity, runId, items);
    const out = { ...base, status, hints };
    if (!(B('partial_search_unbounded') && status === 'partial')) fitHints(out, SEARCH_MAX_BYTES);
    if (B('search_cache_query_only')) state.searchCache.set(query, JSON.stringify(out));
    return out;
  }

  function checkTokenSize(name, v) {
    if (B('ref_size_off_by_one')) {
      if (Buffer.byteLength(v) >= REF_MAX_BYTES) throw new HttpError(413, 'payload_too_large', `${name} is too large.`);
      return;
    }
    if (Buffer.byteLength(v) > REF_MAX_BYTES) {
      throw refError(400, 'knowledge_reference_invalid', `The ${name} is over ${REF_MAX_BYTES} bytes; search again.`);
    }
  }

  function read(ws, identity, body) {
    onlyKeys(body, ['ref', 'run_id', 'cursor', 'max_bytes']);
    if (!hasOwn(body, 'ref')) throw invalid('ref is required.');
    if (typeof body.ref !== 'string' || body.ref.length === 0) throw invalid('ref must be a non-empty string.');
    const runId = requireRunId(body);
    let cursorTok = null;
    if (hasOwn(body, 'cursor')) {
      if (typeof body.cursor !== 'string' || body.cursor.length === 0) throw invalid('cursor must be a non-empty string.');
      cursorTok = body.cursor;
    }
    let requested = false;
    let maxBytes = B('read_default_4096') ? 4096 : B('read_default_32768') ? READ_MAX : B('default_page_content_16384') ? Infinity : READ_DEFAULT;
    if (hasOwn(body, 'max_bytes')) {
      let m = body.max_bytes;
      if (B('max_bytes_string') && typeof m === 'string' && m.trim() !== '') m = Number(m);
      if (B('max_bytes_float') && typeof m === 'number') m = Math.floor(m);
      if (typeof m !== 'number' || !Number.isInteger(m)) throw invalid('max_bytes must be an integer (4096..32768).');
      // Outside 4096..32768: clamped into the range.
      maxBytes = Math.min(READ_MAX, Math.max(READ_MIN, m));
      requested = true;
    }
    if (ws.mode === 'disabled') throw new HttpError(403, 'knowledge_disabled', 'Knowledge is disabled in this workspace.');
    if (ws.mode === 'unavailable' || takeFault('fail_next_read_unavailable', ws.route)) {
      throw new HttpError(503, 'knowledge_unavailable', 'The knowledge service is unavailable; try again later.');
    }
    checkTokenSize('reference', body.ref);
    if (cursorTok !== null) checkTokenSize('cursor', cursorTok);
    const refP = verify(body.ref, 'r');
    if (!refP) throw refError(400, 'knowledge_reference_invalid', 'The reference is not one this Core issued; search again.');
    let chain = refP;
    let offset = 0;
    let issuedAt = refP.at;
    if (cursorTok !== null) {
      const cur = verify(cursorTok, 'c');
      if (!cur || !isPlainObject(cur.ref) || !Number.isInteger(cur.off)) {
        throw refError(400, 'knowledge_reference_invalid', 'The cursor is not one this Core issued; search again.');
      }
      // A cursor names its own chain: its page is that chain's next one.
      chain = cur.ref;
      offset = cur.off;
      issuedAt = B('cursor_no_expiry') ? nowMs(ws.route) : cur.at;
      if (refP.w !== ws.incarnation) throw refError(403, 'knowledge_reference_mismatch', 'The reference belongs to another workspace; search again.');
      if (refP.o !== ownerHash(identity)) throw refError(403, 'knowledge_reference_mismatch', 'The reference belongs to another Agent Session; search again.');
    }
    if (chain.w !== ws.incarnation) {
      throw refError(403, 'knowledge_reference_mismatch', 'The reference was issued for another workspace; search again.');
    }
    if (chain.o !== ownerHash(identity)) {
      throw refError(403, 'knowledge_reference_mismatch', 'The reference was issued to another Agent Session; search again.');
    }
    const ageMs = nowMs(ws.route) - issuedAt;
    const expired = B('expiry_whole_seconds') ? Math.ceil(ageMs / 1000) >= TTL_SECONDS
      : B('expiry_floor_seconds') ? Math.floor(ageMs / 1000) > TTL_SECONDS
      : B('ttl_400') ? ageMs > 400 * 1000 : ageMs > TTL_SECONDS * 1000;
    if (expired) throw refError(410, 'knowledge_reference_expired', 'The reference expired after 300 seconds; search again.');
    findRun(ws, identity, runId);
    if (chain.u !== runId && !(B('cursor_unbound_run') && cursorTok !== null)) {
      throw refError(403, 'knowledge_reference_mismatch', 'The reference belongs to another run; search again.');
    }
    const item = ws.items.get(chain.i);
    if (!item) throw refError(409, 'knowledge_revision_changed', 'The referenced document is gone; search again.');
    if (!B('scope_unbound') && !scopeAllows(ws, identity.account, item.base)) {
      throw refError(409, 'knowledge_scope_changed', 'The knowledge scope changed; search again.');
    }
    if (!B('revision_unbound') && item.current.n !== chain.r) {
      const e = refError(409, 'knowledge_revision_changed', 'The document has a new revision; search again.');
      if (B('changed_error_preview')) e.extra.current = { revision: item.current.n, title: item.current.title, preview: cutCodePoints(item.current.content, 200) };
      throw e;
    }
    return page(ws, sign(chain), chain, item.current, offset, maxBytes, requested);
  }

  function page(ws, ref, chain, rev, offset, maxBytes, requested) {
    const utf16 = B('page_bound_utf16') && requested; // the requested-size path measured string length
    const buf = rev.buf;
    const total = buf.length;
    const budget = B('budget_in_chars') ? Infinity : CHAIN_BUDGET;
    const skeleton = (content, cursor, more, exhausted) => {
      const o = { schema_version: KNOWLEDGE_SCHEMA, ref, revision: rev.n, content, next_cursor: cursor };
      if (more) o.truncated = true;
      if (exhausted) o.budget_exhausted = true;
      if (B('read_no_trust')) { /* forgot trust */ } else o.trust = TRUST;
      o.total_content_bytes = B('total_bytes_utf16') ? rev.content.length : total;
      o.read_chain_max_bytes = CHAIN_BUDGET;
      return o;
    };
    const cursorFor = (off) => sign({ t: 'c', ref: chain, off, at: Math.round(nowMs(ws.route)) });
    const size = (o) => (utf16 ? JSON.stringify(o).length : Buffer.byteLength(JSON.stringify(o)));
    const start = Math.min(Math.max(0, offset), total);
    // default_page_content_16384: the default page is 16384 bytes of content, not of complete JSON
    let room = Number.isFinite(maxBytes) ? maxBytes - size(skeleton('', cursorFor(total + 1e9), true, true)) : READ_DEFAULT;
    const unitsBefore = B('budget_in_chars') ? buf.toString('utf8', 0, start).length : 0;
    for (let attempt = 0; attempt < 50; attempt++) {
      let i = start;
      let used = 0;
      let chars = 0;
      let stop = 'end';
      while (i < total) {
        const b0 = buf[i];
        const len = b0 < 0x80 ? 1 : b0 < 0xe0 ? 2 : b0 < 0xf0 ? 3 : 4;
        let esc;
        if (len === 1) esc = escapedBytes(b0);
        else esc = utf16 ? (len === 4 ? 2 : 1) : len;
        if (used + esc > room) { stop = 'room'; break; }
        if (B('budget_in_chars') ? unitsBefore + chars + (len === 4 ? 2 : 1) > CHAIN_BUDGET : i + len > budget) { stop = 'budget'; break; }
        used += esc;
        chars += len === 4 ? 2 : 1;
        i += len;
      }
      let end = i;
      let split = false;
      if (B('page_splits_characters') && stop === 'room' && end < total && buf[end] >= 0x80) { end += 1; split = true; }
      const content = buf.toString('utf8', start, end);
      let o;
      if (end >= total) {
        o = skeleton(content, null, false, false);
      } else if (stop === 'budget' && end === start) {
        // The chain budget is spent: an empty page says so.
        o = B('budget_no_flag') ? skeleton(content, null, false, false) : skeleton(content, null, true, true);
      } else if (stop === 'budget' && B('budget_no_flag')) {
        o = skeleton(content, null, false, false);
      } else {
        o = skeleton(content, cursorFor(end), true, false);
      }
      const s = size(o);
      if (s <= maxBytes || room <= 0 || split) return o;
      room -= (s - maxBytes);
    }
    throw new Error('page did not fit');
  }

  // ----------------------------------------------------------- control
  function needWorkspace(route) {
    const ws = state.workspaces.get(route);
    if (!ws) throw new HttpError(404, 'not_found', 'No such workspace.');
    return ws;
  }
  function newWorkspace(route, mode) {
    return {
      route, mode: mode || 'normal', legacyStatus: 404, incarnation: b64u(crypto.randomBytes(9)),
      bases: new Map(), items: new Map(), revCounter: 0, scopes: new Map(), runs: new Map(), turns: new Map(),
    };
  }
  const MODES = ['normal', 'disabled', 'unavailable', 'partial', 'legacy'];
  function optString(o, k, max) {
    if (!hasOwn(o, k)) return undefined;
    if (typeof o[k] !== 'string' || cpLength(o[k]) > max) throw invalid(`${k} must be a string of at most ${max} characters.`);
    return o[k];
  }

  function control(method, segs, query, body) {
    // segs: path segments after /_control/v1
    const p = segs.join('/');
    if (method === 'GET' && p === '') {
      return [200, { version: '1.1.0', features: ['clock.routes', 'faults.lost', 'faults.respond_next', 'faults.respond_next.after', 'faults.respond_next.text', 'transcript'] }];
    }
    if (method === 'POST' && p === 'reset') { resetState(); return [204, null]; }
    if (method === 'POST' && p === 'workspaces') {
      const b = body();
      onlyKeys(b, ['route', 'mode']);
      if (!validRoute(b.route)) throw new HttpError(400, 'invalid_route', 'route is malformed.');
      if (hasOwn(b, 'mode') && !MODES.includes(b.mode)) throw invalid('mode is unknown.');
      if (state.workspaces.has(b.route)) throw new HttpError(409, 'workspace_exists', 'The workspace exists.');
      const ws = newWorkspace(b.route, b.mode);
      state.workspaces.set(b.route, ws);
      return [201, { route: ws.route, mode: ws.mode }];
    }
    if (segs[0] === 'workspaces' && segs.length >= 2) {
      const route = segs[1];
      const rest = segs.slice(2);
      if (method === 'DELETE' && rest.length === 0) {
        needWorkspace(route);
        state.workspaces.delete(route);
        state.routeOffsetMs.delete(route);
        for (const [t, id] of state.tokens) if (id.route === route) state.tokens.delete(t);
        return [204, null];
      }
      if (method === 'PUT' && rest.length === 1 && rest[0] === 'corpus') {
        const ws = needWorkspace(route);
        const b = body();
        onlyKeys(b, ['bases']);
        if (!Array.isArray(b.bases)) throw invalid('bases must be an array.');
        const bases = new Map();
        const items = new Map();
        const receipt = {};
        for (const base of b.bases) {
          if (!isPlainObject(base)) throw invalid('a base must be an object.');
          onlyKeys(base, ['id', 'name', 'items']);
          if (typeof base.id !== 'string' || !ID_RE.test(base.id)) throw invalid('base id is malformed.');
          if (bases.has(base.id)) throw invalid(`duplicate base ${base.id}.`);
          const name = optString(base, 'name', 256);
          if (!Array.isArray(base.items)) throw invalid('items must be an array.');
          const ids = [];
          for (const it of base.items) {
            if (!isPlainObject(it)) throw invalid('an item must be an object.');
            onlyKeys(it, ['id', 'title', 'summary', 'content']);
            if (typeof it.id !== 'string' || !ID_RE.test(it.id)) throw invalid('item id is malformed.');
            if (items.has(it.id)) throw invalid(`duplicate item ${it.id}.`);
            const title = optString(it, 'title', 4096);
            const content = optString(it, 'content', 4194304);
            if (title === undefined || content === undefined) throw invalid('an item needs title and content.');
            const summary = optString(it, 'summary', 16384) ?? '';
            const rev = makeRevision(ws, title, summary, content);
            items.set(it.id, { id: it.id, base: base.id, current: rev, revisions: [rev] });
            ids.push(it.id);
            receipt[it.id] = String(rev.n);
          }
          bases.set(base.id, { id: base.id, name: name ?? base.id, items: ids });
        }
        ws.bases = bases;
        ws.items = items;
        return [200, { items: receipt }];
      }
      if (method === 'POST' && rest.length === 3 && rest[0] === 'items' && rest[2] === 'revisions') {
        const ws = needWorkspace(route);
        const item = ws.items.get(rest[1]);
        if (!item) throw new HttpError(404, 'not_found', 'No such item.');
        const b = body();
        onlyKeys(b, ['title', 'summary', 'content']);
        const content = optString(b, 'content', 4194304);
        if (content === undefined) throw invalid('content is required.');
        const title = optString(b, 'title', 4096) ?? item.current.title;
        const summary = optString(b, 'summary', 16384) ?? item.current.summary;
        const rev = makeRevision(ws, title, summary, content);
        item.current = rev;
        item.revisions.push(rev);
        return [201, { item_id: item.id, revision_id: String(rev.n) }];
      }
      if (method === 'PUT' && rest.length === 2 && rest[0] === 'scopes') {
        const ws = needWorkspace(route);
        const b = body();
        onlyKeys(b, ['bases', 'version']);
        if (!Array.isArray(b.bases) || b.bases.some((x) => typeof x !== 'string')) throw invalid('bases must be an array of strings.');
        if (new Set(b.bases).size !== b.bases.length) throw invalid('bases must be unique.');
        const prev = ws.scopes.get(rest[1]);
        const sc = { bases: new Set(b.bases), version: (prev ? prev.version : 0) + 1 };
        ws.scopes.set(rest[1], sc);
        return [200, { bases: [...sc.bases], version: sc.version }];
      }
      if (method === 'PUT' && rest.length === 1 && rest[0] === 'mode') {
        const ws = needWorkspace(route);
        const b = body();
        onlyKeys(b, ['mode', 'legacy_status']);
        if (!MODES.includes(b.mode)) throw invalid('mode is unknown.');
        if (hasOwn(b, 'legacy_status') && ![404, 405, 501].includes(b.legacy_status)) throw invalid('legacy_status must be 404, 405 or 501.');
        ws.mode = b.mode;
        ws.legacyStatus = hasOwn(b, 'legacy_status') ? b.legacy_status : 404;
        const out = { mode: ws.mode };
        if (ws.mode === 'legacy') out.legacy_status = ws.legacyStatus;
        return [200, out];
      }
    }
    if (p === 'clock' && method === 'GET') return [200, { now: nowMs() / 1000 }];
    if (p === 'clock' && method === 'PUT') {
      const b = body();
      onlyKeys(b, ['now']);
      if (typeof b.now !== 'number' || !Number.isFinite(b.now)) throw invalid('now must be a number.');
      state.clockOffsetMs = b.now * 1000 - Date.now();
      return [200, { now: nowMs() / 1000 }];
    }
    if (p === 'clock/advance' && method === 'POST') {
      const b = body();
      onlyKeys(b, ['seconds', 'routes']);
      if (typeof b.seconds !== 'number' || !Number.isFinite(b.seconds) || b.seconds < 0 || b.seconds > 31536000) {
        throw invalid('seconds must be a number from 0 to 31536000.');
      }
      if (hasOwn(b, 'routes')) {
        if (!Array.isArray(b.routes) || b.routes.length > 10000 || !b.routes.every(validRoute)) throw invalid('routes must be an array of routes.');
        for (const r of new Set(b.routes)) state.routeOffsetMs.set(r, (state.routeOffsetMs.get(r) || 0) + b.seconds * 1000);
        const one = b.routes.length === 1 ? b.routes[0] : undefined;
        return [200, { now: nowMs(one) / 1000 }];
      }
      state.clockOffsetMs += b.seconds * 1000;
      return [200, { now: nowMs() / 1000 }];
    }
    if (p === 'identities' && method === 'POST') {
      const b = body();
      onlyKeys(b, ['account', 'route', 'hub', 'session_id']);
      if (typeof b.account !== 'string' || !ID_RE.test(b.account)) throw invalid('account is malformed.');
      if (!validRoute(b.route)) throw new HttpError(400, 'invalid_route', 'route is malformed.');
      const hub = optString(b, 'hub', 512) ?? selfHub;
      let session = crypto.randomUUID();
      if (hasOwn(b, 'session_id')) {
        if (typeof b.session_id !== 'string' || !UUID_RE.test(b.session_id)) throw invalid('session_id must be a UUID.');
        session = b.session_id.toLowerCase();
      }
      needWorkspace(b.route);
      const token = `bha_${b64u(crypto.randomBytes(33))}`;
      const id = { token, account: b.account, route: b.route, hub, session_id: session };
      state.tokens.set(token, id);
      return [201, { ...id }];
    }
    if (p === 'faults' && method === 'POST') {
      const b = body();
      onlyKeys(b, ['kind', 'route', 'endpoint', 'status', 'body', 'after', 'text']);
      const kinds = ['lose_next_turn_response', 'fail_next_search_unavailable', 'fail_next_read_unavailable', 'respond_next'];
      if (!kinds.includes(b.kind)) throw invalid('kind is unknown.');
      if (hasOwn(b, 'route') && !validRoute(b.route)) throw new HttpError(400, 'invalid_route', 'route is malformed.');
      const f = { kind: b.kind };
      if (hasOwn(b, 'route')) f.route = b.route;
      if (b.kind === 'respond_next') {
        if (!['capabilities', 'search', 'read', 'turns'].includes(b.endpoint)) throw invalid('endpoint is unknown.');
        if (!Number.isInteger(b.status) || b.status < 200 || b.status > 599) throw invalid('status must be 200..599.');
        f.endpoint = b.endpoint;
        f.status = b.status;
        f.body = hasOwn(b, 'body') ? b.body : null;
        if (hasOwn(b, 'after')) {
          if (!Number.isInteger(b.after) || b.after < 0 || b.after > 1000) throw invalid('after must be 0..1000.');
          f.after = b.after;
        }
        if (hasOwn(b, 'text')) {
          if (typeof b.text !== 'string' || b.text.length > 65536) throw invalid('text must be a string.');
          f.text = b.text;
        }
      } else if (['endpoint', 'status', 'body', 'after', 'text'].some((k) => hasOwn(b, k))) {
        throw invalid('endpoint, status, body, after and text belong to respond_next.');
      }
      state.faults.push({ ...f, remaining: f.after || 0 });
      return [201, f];
    }
    if (p === 'faults/lost' && method === 'GET') {
      const r = query.get('route');
      return [200, { responses: state.lost.filter((x) => !r || x.route === r) }];
    }
    if (p === 'transcript' && method === 'GET') return [200, { requests: state.transcript }];
    throw new HttpError(404, 'not_found', 'No such control endpoint.');
  }

  // ----------------------------------------------------------- HTTP plumbing
  function send(res, status, body, extraHeaders = {}) {
    const headers = { 'Cache-Control': 'no-store', ...extraHeaders };
    if (status === 204 || body === undefined) {
      res.writeHead(status, headers);
      res.end();
      return;
    }
    let payload;
    if (typeof body === 'string' && headers['Content-Type']) payload = body;
    else { payload = JSON.stringify(body); headers['Content-Type'] = 'application/json'; }
    headers['Content-Length'] = Buffer.byteLength(payload);
    res.writeHead(status, headers);
    res.end(payload);
  }

  function readBody(req, limit) {
    return new Promise((resolve) => {
      const declared = Number(req.headers['content-length']);
      if (Number.isFinite(declared) && declared > limit) { resolve({ tooLarge: true }); return; }
      const chunks = [];
      let n = 0;
      let done = false;
      req.on('data', (c) => {
        if (done) return;
        n += c.length;
        if (n > limit) { done = true; resolve({ tooLarge: true }); return; }
        chunks.push(c);
      });
      req.on('end', () => { if (!done) { done = true; resolve({ raw: Buffer.concat(chunks) }); } });
      req.on('error', () => { if (!done) { done = true; resolve({ raw: Buffer.alloc(0), aborted: true }); } });
    });
  }

  function bearer(req) {
    const h = req.headers.authorization;
    if (typeof h !== 'string') return null;
    const m = /^Bearer +(\S+) *$/i.exec(h);
    return m ? m[1] : null;
  }

  const ENDPOINTS = { 'knowledge/capabilities': ['GET', 'capabilities'], 'knowledge/search': ['POST', 'search'], 'knowledge/read': ['POST', 'read'], turns: ['POST', 'turns'] };

  async function handle(req, res) {
    let url;
    try { url = new URL(req.url, 'http://core.invalid'); } catch { send(res, 400, errorBody('invalid_request', 'Malformed request target.')); return; }
    const rawSegs = url.pathname.split('/').slice(1);
    let segs;
    try { segs = rawSegs.map((s) => decodeURIComponent(s)); } catch { send(res, 404, errorBody('not_found', 'No such path.')); return; }
    const method = req.method;

    // ------------------------------------------------- control extension
    if (segs[0] === '_control' && segs[1] === 'v1' && controlToken) {
      const tok = bearer(req);
      const ok = tok !== null && tok.length === controlToken.length
        && crypto.timingSafeEqual(Buffer.from(tok), Buffer.from(controlToken));
      if (!ok) {
        req.resume();
        send(res, 401, errorBody('unauthorized', 'The control credential is missing or wrong.'));
        return;
      }
      const got = await readBody(req, CONTROL_BODY_LIMIT);
      if (got.tooLarge) { send(res, 413, errorBody('payload_too_large', 'The body is too large.'), { Connection: 'close' }); return; }
      let rest = segs.slice(2);
      if (rest.length && rest[rest.length - 1] === '') rest = rest.slice(0, -1);
      try {
        const [status, out] = control(method, rest, url.searchParams, () => parseJsonBody(got.raw));
        send(res, status, status === 204 ? undefined : out);
      } catch (e) {
        if (e instanceof HttpError) send(res, e.status, errorBody(e.code, e.message, e.extra));
        else { console.error(e); send(res, 500, errorBody('internal_error', 'Unexpected failure.')); }
      }
      return;
    }

    // ------------------------------------------------- Agent API
    const isApi = segs[0] === 'agent-api' && segs[1] === 'v1';
    let endpoint = null;
    let routeSeg = null;
    if (isApi && segs[2] === 'workspaces' && segs.length >= 5) {
      const tail = segs.slice(4).join('/');
      if (hasOwn(ENDPOINTS, tail)) { routeSeg = segs[3]; endpoint = tail; }
    }
    const entry = { method, path: url.pathname, status: 0, at: nowMs() / 1000 };
    const got = isApi ? await readBody(req, CORE_BODY_LIMIT) : (req.resume(), { raw: Buffer.alloc(0) });
    if (isApi && got.raw && got.raw.length) {
      if (got.raw.length > 65536) entry.body = null;
      else {
        // A body nested too deeply to serialise again is kept as null.
        try { entry.body = JSON.parse(got.raw.toString('utf8')); JSON.stringify(entry.body); } catch { entry.body = null; }
      }
    } else if (isApi && got.tooLarge) entry.body = null;
    const done = (status, body, headers) => {
      if (isApi) {
        entry.status = status;
        state.transcript.push(entry);
        if (state.transcript.length > TRANSCRIPT_MAX) state.transcript.shift();
      }
      if (logStream) try { logStream.write(`${JSON.stringify({ method, path: url.pathname, status, body: entry.body, answer: status >= 400 ? body : undefined })}\n`); } catch { /* not loggable */ }
      send(res, status, body, headers);
    };

    // respond_next: answered before authentication, without reaching the Core.
    if (endpoint && method === ENDPOINTS[endpoint][0]) {
      const name = ENDPOINTS[endpoint][1];
      const i = state.faults.findIndex((f) => f.kind === 'respond_next' && f.endpoint === name && (!f.route || f.route === routeSeg));
      if (i >= 0) {
        const f = state.faults[i];
        if (f.remaining > 0) f.remaining -= 1;
        else {
          state.faults.splice(i, 1);
          if (hasOwn(f, 'text')) done(f.status, f.text, { 'Content-Type': 'text/plain; charset=utf-8' });
          else done(f.status, f.body === undefined ? null : f.body);
          return;
        }
      }
    }

    if (!isApi) { done(404, errorBody('not_found', 'No such path.')); return; }

    // Authentication comes before route matching.
    const tok = bearer(req);
    if (tok === null) {
      // capabilities is discovery only: served without a token
      if (B('caps_public') && endpoint === 'knowledge/capabilities' && method === 'GET' && state.workspaces.has(routeSeg)) { done(200, capabilities(state.workspaces.get(routeSeg))); return; }
      done(401, errorBody('unauthorized', 'An Agent Session bearer token is required.')); return;
    }
    const identity = state.tokens.get(tok);
    if (!identity && !B('accept_any_token')) { done(403, errorBody('invalid_token', 'The Agent Session token is not valid.')); return; }
    const who = identity || [...state.tokens.values()].find((x) => x.route === routeSeg) || { account: 'anonymous', route: routeSeg, hub: selfHub, session_id: '00000000-0000-0000-0000-000000000000' };
    entry.account = who.account;
    entry.session_id = who.session_id;

    if (!endpoint || method !== ENDPOINTS[endpoint][0]) { done(404, errorBody('not_found', 'No such path.')); return; }
    if (!validRoute(routeSeg)) { done(400, errorBody('invalid_route', 'The route is malformed.')); return; }
    const routeOk = B('route_regex_unanchored') ? new RegExp(who.route).test(routeSeg) : who.route === routeSeg; // route patterns
    if (!routeOk) { done(403, errorBody('route_not_allowed', 'This token is not for that workspace.')); return; }
    const ws = state.workspaces.get(routeSeg);
    if (!ws) { done(404, errorBody('route_unavailable', 'The workspace is unavailable.')); return; }
    if (got.tooLarge) { done(413, errorBody('payload_too_large', 'The body is over 1 MiB.'), { Connection: 'close' }); return; }

    const name = ENDPOINTS[endpoint][1];
    try {
      if (ws.mode === 'legacy' && name !== 'turns') {
        done(ws.legacyStatus, { error: 'not_found' });
        return;
      }
      if (name === 'capabilities') { done(200, capabilities(ws)); return; }
      const body = parseJsonBody(got.raw);
      if (name === 'search') { done(200, search(ws, who, body)); return; }
      if (name === 'read') { done(200, read(ws, who, body)); return; }
      const out = turn(ws, who, body);
      if (takeFault('lose_next_turn_response', ws.route)) {
        if (!B('lost_turn_not_committed') && out.commit) out.commit();
        state.lost.push({ route: ws.route, status: out.status, body: out.body });
        done(503, errorBody('service_unavailable', 'The response was lost.'));
        return;
      }
      if (B('lost_turn_not_committed') && out.commit) out.commit();
      done(out.status, out.body);
    } catch (e) {
      if (e instanceof HttpError) done(e.status, errorBody(e.code, e.message, e.extra));
      else { console.error(e); done(500, errorBody('internal_error', 'Unexpected failure.')); }
    }
  }

  return {
    handle,
    setHub(h) { selfHub = h; },
  };
}

// ---------------------------------------------------------------- CLI
export function startServer({ host = '127.0.0.1', port = 0, broken, controlToken, logFile } = {}) {
  const core = createCore({ broken, controlToken, logFile });
  const server = http.createServer({ keepAliveTimeout: 30000 }, (req, res) => {
    core.handle(req, res).catch((e) => {
      console.error(e);
      try { res.writeHead(500, { 'Content-Type': 'application/json', 'Cache-Control': 'no-store' }); res.end('{"error":"internal_error"}'); } catch { /* gone */ }
    });
  });
  return new Promise((resolve) => {
    server.listen(port, host, () => {
      const addr = server.address();
      core.setHub(`http://${host}:${addr.port}`);
      resolve({ server, port: addr.port, core });
    });
  });
}

function parseArgs(argv) {
  const out = { host: '127.0.0.1', port: 8080 };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--host') out.host = argv[++i];
    else if (argv[i] === '--port') out.port = Number(argv[++i]);
    else { console.error(`unknown argument ${argv[i]}`); process.exit(2); }
  }
  if (!Number.isInteger(out.port) || out.port < 0 || out.port > 65535) { console.error('bad --port'); process.exit(2); }
  return out;
}

if (import.meta.url === pathToFileURL(process.argv[1] || '').href) {
  const args = parseArgs(process.argv.slice(2));
  const broken = process.env.NODECORE_BROKEN || '';
  if (broken) {
    const known = JSON.parse(readFileSync(new URL('./variants.json', import.meta.url), 'utf8')).map((v) => v.name);
    if (!known.includes(broken)) { console.error(`unknown NODECORE_BROKEN variant: ${broken}`); process.exit(2); }
  }
  const { port } = await startServer({ host: args.host, port: args.port, broken, controlToken: process.env.NODECORE_CONTROL_TOKEN || '', logFile: process.env.NODECORE_LOG || '' });
  console.error(`core-node listening on http://${args.host}:${port}${broken ? ` (broken: ${broken})` : ''}${process.env.NODECORE_CONTROL_TOKEN ? '' : ' (no control extension)'}`);
}
