// Blind knowledge SDK and host transport for the agent knowledge search/read contract.
// Written from the specification only (spec/seeds, spec/CONVENTIONS.md, spec/schemas).
// Node.js 20, standard library only (global fetch).

export const SDK_NAME = 'blind-knowledge-sdk';
export const SDK_VERSION = '0.1.0';

export const CAPABILITIES_SCHEMA = 'bailing.agent-knowledge-capabilities.v1';
export const KNOWLEDGE_SCHEMA = 'bailing.agent-knowledge.v1';
export const TURN_SCHEMA = 'bailing.agent-turn-context.v1';
export const FEEDBACK_SCHEMA = 'bailing.agent-feedback.v1';

export const DEFAULT_PATHS = Object.freeze({
  capabilities: '/agent-api/v1/workspaces/{route}/knowledge/capabilities',
  search: '/agent-api/v1/workspaces/{route}/knowledge/search',
  read: '/agent-api/v1/workspaces/{route}/knowledge/read',
  turn: '/agent-api/v1/workspaces/{route}/turns',
});

// The seed's numbers (seed 000): bounds a capabilities answer must stay within.
const LIMIT_BOUNDS = Object.freeze({
  search_max_hints: [1, 3],
  search_max_bytes: [1, 4096],
  read_default_max_bytes: [16384, 16384],
  read_min_max_bytes: [4096, 4096],
  read_max_max_bytes: [32768, 32768],
  reference_max_bytes: [1, 4096],
  read_chain_max_bytes: [1, 131072],
  reference_ttl_seconds: [1, 300],
});
const SEARCH_MAX_BYTES = 4096;
const READ_DEFAULT_MAX_BYTES = 16384;
const READ_MIN_MAX_BYTES = 4096;
const READ_MAX_MAX_BYTES = 32768;
const TOKEN_MAX_BYTES = 4096;
const CHAIN_MAX_BYTES = 131072;
const CHAIN_MAX_PAGES = 4096;
const SEARCH_STATUSES = new Set(['ok', 'disabled', 'unavailable', 'partial']);
const REFERENCE_CODE = /^knowledge_(reference_[a-z0-9_]+|[a-z0-9_]*changed)$/;
const TURN_ID = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;
// Codes that name a live Core condition: a 404 carrying one of them is an error, never "old Core".
const LIVE_404_CODE = /^(route_|agent_|run_|knowledge_|workspace_|session_|token_)|^(unauthorized|forbidden|invalid_route)$/;
const BINDING_KEYS = ['hubUrl', 'clientAppId', 'workspace', 'sessionId'];
const OPERATIONS = {
  capabilities: 'get_knowledge_capabilities', turn: 'start_turn', search: 'search_knowledge', read: 'read_knowledge',
};

const utf8Bytes = (s) => Buffer.byteLength(s, 'utf8');
const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const isSafeCount = (v) => Number.isSafeInteger(v) && v >= 0;
const own = (o, k) => Object.prototype.hasOwnProperty.call(o, k);

/** Every failure the SDK or host transport raises. `kind` is the harness protocol's stable error kind. */
export class KnowledgeError extends Error {
  constructor(kind, message, { status = null, code = null, nextAction = null, operation = 'unknown', origin = 'sdk', dispatch = 'not_dispatched', cause } = {}) {
    super(message, cause ? { cause } : undefined);
    this.name = 'KnowledgeError';
    this.kind = kind;
    this.status = status;
    this.code = code;
    this.next_action = nextAction;
    // `retryable` refers to next_action only, never to repeating the call (CONVENTIONS).
    this.retryable = nextAction !== null;
    this.feedback = {
      schema_version: FEEDBACK_SCHEMA,
      category: code && REFERENCE_CODE.test(code) ? 'knowledge_reference' : kind,
      code: code ?? kind,
      origin,
      operation,
      dispatch,
      retryable: this.retryable,
      next_action: nextAction,
      message,
    };
  }
  toJSON() {
    return { kind: this.kind, message: this.message, status: this.status, code: this.code, next_action: this.next_action, retryable: this.retryable, feedback: this.feedback };
  }
}

const invalidInput = (operation, message, code = 'invalid_input', origin = 'sdk', nextAction = null) =>
  new KnowledgeError('invalid_input', message, { code, operation, origin, nextAction });
const invalidResponse = (operation, message, status) =>
  new KnowledgeError('invalid_response', message, { status, code: 'invalid_response', operation, origin: 'sdk', dispatch: 'attempted' });

export function sameBinding(a, b) {
  return isObject(a) && isObject(b) && BINDING_KEYS.every((k) => typeof a[k] === 'string' && a[k] === b[k]);
}

/**
 * Map an input onto its canonical members. `spec` is {canonical: [accepted names...]}. A member that is not
 * accepted is refused (this SDK's choice: extra members are never silently dropped); two names of one member
 * with different values are refused too.
 */
function normalizeInput(input, spec, operation, origin) {
  if (!isObject(input)) throw invalidInput(operation, 'input must be an object', 'invalid_input', origin);
  const accepted = new Map();
  for (const [canonical, names] of Object.entries(spec)) for (const n of names) accepted.set(n, canonical);
  const unknown = Object.keys(input).filter((k) => !accepted.has(k));
  if (unknown.length) {
    throw invalidInput(operation, `input members not accepted: ${unknown.slice(0, 8).join(', ')}`, 'unknown_input_member', origin);
  }
  const out = {};
  for (const [name, canonical] of accepted) {
    if (!own(input, name) || input[name] === undefined) continue;
    if (own(out, canonical) && out[canonical] !== input[name]) {
      throw invalidInput(operation, `conflicting values for ${canonical}`, 'conflicting_input_member', origin);
    }
    out[canonical] = input[name];
  }
  return out;
}

function checkToken(value, what, operation, origin) {
  if (typeof value !== 'string' || value.length === 0) throw invalidInput(operation, `${what} must be a non-empty string`, 'invalid_input', origin);
  if (utf8Bytes(value) > TOKEN_MAX_BYTES) {
    throw invalidInput(operation, `${what} is over ${TOKEN_MAX_BYTES} bytes`, 'knowledge_reference_invalid', origin, 'search_knowledge');
  }
}

function checkHint(h) {
  return isObject(h) && typeof h.title === 'string' && typeof h.summary === 'string' && typeof h.ref === 'string'
    && h.ref.length > 0 && utf8Bytes(h.ref) <= TOKEN_MAX_BYTES && !own(h, 'content') && !own(h, 'body') && !own(h, 'text');
}

function checkDelivery(d) {
  if (!isObject(d)) return 'knowledge_delivery is not an object';
  if (d.mode !== 'on_demand') return 'knowledge_delivery.mode is not on_demand';
  for (const k of ['bodies', 'body', 'content', 'knowledge']) if (own(d, k)) return `knowledge_delivery carries ${k}`;
  if (!Array.isArray(d.hints) || d.hints.length > 3 || !d.hints.every(checkHint)) return 'knowledge_delivery.hints are not at most three bounded hints';
  if (own(d, 'status') && !SEARCH_STATUSES.has(d.status)) return 'knowledge_delivery.status is unknown';
  if (own(d, 'trust') && d.trust !== 'reference_only') return 'knowledge_delivery.trust is not reference_only';
  if (own(d, 'schema_version') && d.schema_version !== KNOWLEDGE_SCHEMA) return 'knowledge_delivery.schema_version is unknown';
  return null;
}

function legacyUnsupported(status, code) {
  if (status === 405 || status === 501) return true;
  if (status !== 404) return false;
  return !(typeof code === 'string' && LIVE_404_CODE.test(code));
}

/** One authenticated connection: a Core base URL, a workspace route, a bearer token and its expected binding. */
export class KnowledgeClient {
  #base; #route; #token; #expected; #getBinding; #fetch; #timeoutMs; #paths;
  #currentRunId = null;
  #limits = null;
  #turnPins = new Map();

  constructor({ baseUrl, route, token, expectedBinding, getBinding, fetch: fetchImpl, timeoutMs = 30000, paths } = {}) {
    if (typeof baseUrl !== 'string' || !baseUrl) throw new TypeError('baseUrl is required');
    if (typeof route !== 'string' || !route) throw new TypeError('route is required');
    if (typeof token !== 'string' || !token) throw new TypeError('token is required');
    if (!sameBinding(expectedBinding, expectedBinding)) throw new TypeError('expectedBinding {hubUrl, clientAppId, workspace, sessionId} is required');
    this.#base = baseUrl.replace(/\/+$/, '');
    this.#route = route;
    this.#token = token;
    this.#expected = Object.freeze({ ...expectedBinding });
    // The session the connection belongs to right now (an auth layer may change it); defaults to the expected one.
    this.#getBinding = typeof getBinding === 'function' ? getBinding : () => this.#expected;
    this.#fetch = fetchImpl ?? globalThis.fetch;
    this.#timeoutMs = timeoutMs;
    this.#paths = { ...DEFAULT_PATHS, ...(paths ?? {}) };
  }

  get route() { return this.#route; }
  get expectedBinding() { return this.#expected; }
  get currentBinding() { return this.#getBinding(); }
  /** The run of the latest successful turn of this connection (what host reads bind). */
  get currentRunId() { return this.#currentRunId; }

  #checkBinding(expected, operation, origin, dispatch, when) {
    if (!sameBinding(expected, this.#getBinding())) {
      throw new KnowledgeError('binding_changed', `the connection's Agent Session binding is not the expected one (${when} the request)`, {
        status: 403, code: 'agent_binding_changed', operation, origin, dispatch,
      });
    }
  }

  async #request(kind, method, body, { signal, expectedBinding, origin = 'sdk' } = {}) {
    const operation = OPERATIONS[kind];
    const expected = expectedBinding ?? this.#expected;
    if (signal?.aborted) throw new KnowledgeError('cancelled', 'cancelled before the request was sent', { operation, origin });
    this.#checkBinding(expected, operation, origin, 'not_dispatched', 'before');
    const url = this.#base + this.#paths[kind].replace('{route}', encodeURIComponent(this.#route));
    const timeout = AbortSignal.timeout(this.#timeoutMs);
    const combined = signal ? AbortSignal.any([signal, timeout]) : timeout;
    const headers = { Authorization: `Bearer ${this.#token}`, Accept: 'application/json' };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let status, text;
    try {
      const res = await this.#fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: combined });
      status = res.status;
      text = await res.text();
    } catch (err) {
      if (signal?.aborted) throw new KnowledgeError('cancelled', 'cancelled while the request was in flight', { operation, origin, dispatch: 'unknown', cause: err });
      const msg = timeout.aborted ? `no answer within ${this.#timeoutMs} ms` : `network failure: ${err?.cause?.code ?? err?.message ?? 'unknown'}`;
      throw new KnowledgeError('network_error', msg, { code: 'network_error', operation, origin, dispatch: 'unknown', cause: err });
    }
    // After the asynchronous work: the binding again, then the cancellation signal. Either withholds the result.
    this.#checkBinding(expected, operation, origin, 'attempted', 'after');
    if (signal?.aborted) throw new KnowledgeError('cancelled', 'cancelled; the answer was discarded', { operation, origin, dispatch: 'attempted' });
    let json;
    try { json = text.length ? JSON.parse(text) : undefined; } catch { json = undefined; }
    return { status, text, json, bytes: utf8Bytes(text), operation };
  }

  #coreError(r) {
    const body = isObject(r.json) ? r.json : {};
    const code = typeof body.error === 'string' ? body.error : null;
    let next = typeof body.next_action === 'string' ? body.next_action
      : isObject(body.feedback) && typeof body.feedback.next_action === 'string' ? body.feedback.next_action : null;
    // Changed, invalid or expired references: search again on the same target, never replay (seed 000).
    if (code && REFERENCE_CODE.test(code)) next = 'search_knowledge';
    const message = typeof body.message === 'string' ? body.message.slice(0, 1024) : `Core answered HTTP ${r.status}${code ? ` (${code})` : ''}`;
    return new KnowledgeError('core_error', message, { status: r.status, code, nextAction: next, operation: r.operation, origin: 'core', dispatch: 'attempted' });
  }

  /** GET capabilities. Only 404/405/501 (an old endpoint) become {supported: false}; everything else failing raises. */
  async getKnowledgeCapabilities(options = {}) {
    const r = await this.#request('capabilities', 'GET', undefined, options);
    const code = isObject(r.json) && typeof r.json.error === 'string' ? r.json.error : null;
    if (legacyUnsupported(r.status, code)) return { supported: false, status: r.status, code, reason: 'legacy_endpoint' };
    if (r.status < 200 || r.status > 299) throw this.#coreError(r);
    const c = r.json;
    if (!isObject(c)) throw invalidResponse(r.operation, 'capabilities answer is not a JSON object', r.status);
    const schema = c.schema_version ?? c.schema;
    if (schema !== CAPABILITIES_SCHEMA) throw invalidResponse(r.operation, `unknown capabilities schema ${JSON.stringify(schema)}`, r.status);
    if (c.knowledge_schema_version !== KNOWLEDGE_SCHEMA) {
      throw invalidResponse(r.operation, `unknown knowledge schema ${JSON.stringify(c.knowledge_schema_version)}`, r.status);
    }
    if (typeof c.enabled !== 'boolean') throw invalidResponse(r.operation, 'capabilities enabled is not a boolean', r.status);
    const unsupported = (reason) => ({ supported: false, enabled: c.enabled, status: r.status, reason });
    if (c.route !== this.#route) return unsupported('route_mismatch');
    const modes = c.delivery_modes;
    if (!Array.isArray(modes) || modes.length !== 2 || !modes.includes('inline') || !modes.includes('on_demand')) return unsupported('delivery_modes');
    if (!isObject(c.limits)) return unsupported('limits');
    for (const [name, [lo, hi]] of Object.entries(LIMIT_BOUNDS)) {
      const v = c.limits[name];
      if (!Number.isSafeInteger(v) || v < lo || v > hi) return unsupported(`limits.${name}`);
    }
    this.#limits = { ...c.limits };
    return {
      supported: true, enabled: c.enabled, route: c.route, delivery_modes: [...modes], limits: { ...c.limits },
      schema_version: CAPABILITIES_SCHEMA, knowledge_schema_version: KNOWLEDGE_SCHEMA,
    };
  }

  /**
   * Start (or idempotently retry) a turn. `input` is the user text, or {userInput} (anything else in it is refused:
   * model-controlled turn input never chooses the delivery). `options.knowledgeDelivery` is the trusted host option:
   * 'on_demand', 'inline' (or absent) or 'negotiate' (capabilities first, on_demand only when supported).
   * The choice is pinned per turn identity: a retry sends the same payload; a retry with another explicit
   * delivery is refused locally, nothing is sent.
   */
  async startTurn(input, options = {}) {
    const operation = OPERATIONS.turn;
    let userInput;
    if (typeof input === 'string') userInput = input;
    else userInput = normalizeInput(input, { userInput: ['userInput', 'user_input'] }, operation, 'sdk').userInput;
    if (typeof userInput !== 'string' || userInput.length === 0 || userInput.length > 64000) {
      throw invalidInput(operation, 'user input must be a string of 1 to 64000 characters');
    }
    if (!isObject(options)) throw invalidInput(operation, 'options must be an object');
    const o = normalizeInput(options, {
      knowledgeDelivery: ['knowledgeDelivery'], signal: ['signal'],
      clientConversationId: ['clientConversationId', 'client_conversation_id'],
      clientTurnId: ['clientTurnId', 'client_turn_id'], userMessageId: ['userMessageId', 'user_message_id'],
    }, operation, 'sdk');
    for (const k of ['clientConversationId', 'clientTurnId', 'userMessageId']) {
      if (typeof o[k] !== 'string' || !TURN_ID.test(o[k])) throw invalidInput(operation, `${k} must match ${TURN_ID}`);
    }
    const asked = o.knowledgeDelivery;
    if (asked !== undefined && !['on_demand', 'inline', 'negotiate'].includes(asked)) {
      throw invalidInput(operation, 'knowledgeDelivery must be on_demand, inline or negotiate');
    }
    const key = JSON.stringify([o.clientConversationId, o.clientTurnId, o.userMessageId]);
    const pinned = this.#turnPins.get(key);
    let delivery;
    if (asked === 'negotiate') {
      const caps = await this.getKnowledgeCapabilities({ signal: o.signal });
      delivery = pinned ? pinned.delivery : caps.supported ? 'on_demand' : 'inline';
    } else {
      delivery = asked ?? 'inline';
      if (pinned && pinned.delivery !== delivery) {
        throw invalidInput(operation, `this turn was started with knowledge delivery ${pinned.delivery}; a retry cannot change it`, 'turn_delivery_pinned');
      }
    }
    const body = {
      client_conversation_id: o.clientConversationId, client_turn_id: o.clientTurnId, user_message_id: o.userMessageId, user_input: userInput,
    };
    if (delivery === 'on_demand') body.knowledge_delivery = 'on_demand';
    if (!pinned) this.#turnPins.set(key, { delivery });
    let r;
    try {
      r = await this.#request('turn', 'POST', body, { signal: o.signal });
    } catch (err) {
      if (!pinned && err.feedback?.dispatch === 'not_dispatched') this.#turnPins.delete(key);
      throw err;
    }
    if (r.status < 200 || r.status > 299) {
      // A definite refusal committed nothing: the pin goes (except a conflict, which means the key is taken).
      if (!pinned && r.status >= 400 && r.status < 500 && r.status !== 409) this.#turnPins.delete(key);
      throw this.#coreError(r);
    }
    const t = r.json;
    if (!isObject(t)) throw invalidResponse(operation, 'turn answer is not a JSON object', r.status);
    if ((t.schema_version ?? t.schema) !== TURN_SCHEMA) throw invalidResponse(operation, 'unknown turn schema', r.status);
    if (typeof t.run_id !== 'string' || !t.run_id) throw invalidResponse(operation, 'turn answer has no run_id', r.status);
    if (!isObject(t.context) || !Array.isArray(t.context.knowledge) || !Array.isArray(t.context.knowledge_refs)) {
      throw invalidResponse(operation, 'turn context lacks knowledge / knowledge_refs arrays', r.status);
    }
    if (own(t.context, 'knowledge_delivery')) {
      const problem = checkDelivery(t.context.knowledge_delivery);
      if (problem) throw invalidResponse(operation, problem, r.status);
    }
    this.#currentRunId = t.run_id;
    // Returned whole: a legacy answer's inline bodies are retained whatever delivery was asked for.
    return t;
  }

  /** POST /knowledge/search: {query, runId, limit?} -> wire {query, run_id, limit?}. */
  async searchKnowledge(input, options = {}) {
    const operation = OPERATIONS.search;
    const origin = options.origin ?? 'sdk';
    const i = normalizeInput(input, { query: ['query'], runId: ['runId', 'run_id'], limit: ['limit'] }, operation, origin);
    if (typeof i.query !== 'string' || i.query.length === 0 || i.query.length > 1000) {
      throw invalidInput(operation, 'query must be a string of 1 to 1000 characters', 'invalid_input', origin);
    }
    if (typeof i.runId !== 'string' || !i.runId) throw invalidInput(operation, 'runId is required', 'invalid_input', origin);
    if (i.limit !== undefined && (!Number.isSafeInteger(i.limit) || i.limit < 1)) {
      throw invalidInput(operation, 'limit must be a positive integer', 'invalid_input', origin);
    }
    const body = { query: i.query, run_id: i.runId };
    if (i.limit !== undefined) body.limit = i.limit;
    const r = await this.#request('search', 'POST', body, options);
    if (r.status < 200 || r.status > 299) throw this.#coreError(r);
    if (r.bytes > SEARCH_MAX_BYTES) throw invalidResponse(operation, `search answer is ${r.bytes} bytes, over ${SEARCH_MAX_BYTES}`, r.status);
    const s = r.json;
    if (!isObject(s)) throw invalidResponse(operation, 'search answer is not a JSON object', r.status);
    if (!SEARCH_STATUSES.has(s.status)) throw invalidResponse(operation, `unknown search status ${JSON.stringify(s.status)}`, r.status);
    if (own(s, 'schema_version') && s.schema_version !== KNOWLEDGE_SCHEMA) throw invalidResponse(operation, 'unknown search schema', r.status);
    if (s.trust !== 'reference_only') throw invalidResponse(operation, 'search answer is not trust reference_only', r.status);
    if (own(s, 'content') || own(s, 'body')) throw invalidResponse(operation, 'search answer carries document content', r.status);
    if (!Array.isArray(s.hints) || s.hints.length > 3 || !s.hints.every(checkHint)) {
      throw invalidResponse(operation, 'search hints are not at most three title/summary/ref hints', r.status);
    }
    // Unavailability is returned as such (status unavailable), never as an ok empty result.
    const out = { status: s.status, hints: s.hints.map((h) => ({ title: h.title, summary: h.summary, ref: h.ref })), trust: s.trust };
    if (own(s, 'schema_version')) out.schema_version = s.schema_version;
    if (typeof s.message === 'string') out.message = s.message;
    return out;
  }

  /** POST /knowledge/read: one page, never followed. {ref, runId, maxBytes?, cursor?} -> wire {ref, run_id, max_bytes?, cursor?}. */
  async readKnowledge(input, options = {}) {
    const operation = OPERATIONS.read;
    const origin = options.origin ?? 'sdk';
    const i = normalizeInput(input, { ref: ['ref'], runId: ['runId', 'run_id'], maxBytes: ['maxBytes', 'max_bytes'], cursor: ['cursor'] }, operation, origin);
    checkToken(i.ref, 'ref', operation, origin);
    if (typeof i.runId !== 'string' || !i.runId) throw invalidInput(operation, 'runId is required', 'invalid_input', origin);
    if (i.cursor === null) delete i.cursor;
    if (i.cursor !== undefined) checkToken(i.cursor, 'cursor', operation, origin);
    if (i.maxBytes !== undefined && (!Number.isSafeInteger(i.maxBytes) || i.maxBytes < READ_MIN_MAX_BYTES || i.maxBytes > READ_MAX_MAX_BYTES)) {
      throw invalidInput(operation, `maxBytes must be an integer from ${READ_MIN_MAX_BYTES} to ${READ_MAX_MAX_BYTES}`, 'invalid_input', origin);
    }
    const body = { ref: i.ref, run_id: i.runId };
    if (i.cursor !== undefined) body.cursor = i.cursor;
    if (i.maxBytes !== undefined) body.max_bytes = i.maxBytes;
    const r = await this.#request('read', 'POST', body, options);
    if (r.status < 200 || r.status > 299) throw this.#coreError(r);
    const bound = i.maxBytes ?? READ_DEFAULT_MAX_BYTES;
    if (r.bytes > bound) throw invalidResponse(operation, `read answer is ${r.bytes} bytes, over ${bound}`, r.status);
    const p = r.json;
    if (!isObject(p)) throw invalidResponse(operation, 'read answer is not a JSON object', r.status);
    const problems = [];
    if (p.ref !== i.ref) problems.push('ref is not the original ref');
    if (!((typeof p.revision === 'string' && p.revision.length > 0) || isSafeCount(p.revision))) problems.push('revision missing');
    if (typeof p.content !== 'string') problems.push('content is not a string');
    if (!(p.next_cursor === null || (typeof p.next_cursor === 'string' && p.next_cursor.length > 0 && utf8Bytes(p.next_cursor) <= TOKEN_MAX_BYTES))) problems.push('next_cursor is not a bounded string or null');
    if (typeof p.truncated !== 'boolean') problems.push('truncated is not a boolean');
    if (own(p, 'budget_exhausted') && typeof p.budget_exhausted !== 'boolean') problems.push('budget_exhausted is not a boolean');
    if (p.trust !== 'reference_only') problems.push('trust is not reference_only');
    if (typeof p.next_cursor === 'string' && p.truncated !== true) problems.push('a next_cursor without truncated true');
    if (p.budget_exhausted === true && (p.truncated !== true || p.next_cursor !== null)) problems.push('budget_exhausted without truncated true and next_cursor null');
    for (const k of ['total_content_bytes', 'read_chain_max_bytes']) if (own(p, k) && !isSafeCount(p[k])) problems.push(`${k} is not a safe count`);
    if (own(p, 'schema_version') && p.schema_version !== KNOWLEDGE_SCHEMA) problems.push('unknown schema_version');
    if (problems.length) throw invalidResponse(operation, `read page refused: ${problems.join('; ')}`, r.status);
    const out = { ref: p.ref, revision: p.revision, content: p.content, next_cursor: p.next_cursor, truncated: p.truncated, trust: p.trust };
    if (own(p, 'budget_exhausted')) out.budget_exhausted = p.budget_exhausted;
    for (const k of ['total_content_bytes', 'read_chain_max_bytes', 'schema_version']) if (own(p, k)) out[k] = p[k];
    return out;
  }

  /**
   * Follow a read chain from `ref` within the read-chain budget (131072 content bytes, or less when the Core says so).
   * Reports honestly: complete only when the last page says the whole revision was read. A Core error after at least
   * one page stops the chain and is reported with what was read (`error`); an error on the first page is raised.
   */
  async readKnowledgeChain(input, options = {}) {
    const operation = OPERATIONS.read;
    const origin = options.origin ?? 'sdk';
    const i = normalizeInput(input, { ref: ['ref'], runId: ['runId', 'run_id'], maxBytes: ['maxBytes', 'max_bytes'] }, operation, origin);
    let budget = Math.min(CHAIN_MAX_BYTES, this.#limits?.read_chain_max_bytes ?? CHAIN_MAX_BYTES);
    let cursor, revision, error = null;
    let pages = 0, bytes = 0, content = '', truncated = true, budgetExhausted = false;
    for (;;) {
      const ask = { ref: i.ref, runId: i.runId };
      if (i.maxBytes !== undefined) ask.maxBytes = i.maxBytes;
      if (cursor !== undefined) ask.cursor = cursor;
      let page;
      try {
        page = await this.readKnowledge(ask, options);
      } catch (err) {
        if (pages === 0 || !(err instanceof KnowledgeError) || err.kind !== 'core_error') throw err;
        error = err.toJSON();
        truncated = true;
        break;
      }
      if (pages > 0 && page.revision !== revision) {
        error = invalidResponse(operation, 'the revision changed within the chain', 200).toJSON();
        truncated = true;
        break;
      }
      revision = page.revision;
      pages += 1;
      content += page.content;
      bytes += utf8Bytes(page.content);
      if (isSafeCount(page.read_chain_max_bytes) && page.read_chain_max_bytes > 0) budget = Math.min(budget, page.read_chain_max_bytes);
      truncated = page.truncated;
      if (page.budget_exhausted === true) { budgetExhausted = true; truncated = true; break; }
      if (page.next_cursor === null) break;
      if (bytes >= budget) { budgetExhausted = true; truncated = true; break; }
      if (page.next_cursor === cursor || pages >= CHAIN_MAX_PAGES) {
        error = invalidResponse(operation, 'the chain does not advance', 200).toJSON();
        truncated = true;
        break;
      }
      cursor = page.next_cursor;
    }
    const complete = !truncated && !budgetExhausted && error === null;
    const description = complete
      ? `complete read: ${bytes} content bytes in ${pages} page(s)`
      : budgetExhausted
        ? `incomplete: the read-chain budget stopped the chain after ${bytes} content bytes in ${pages} page(s); this is not the whole document`
        : error
          ? `incomplete: the chain stopped at an error (${error.code ?? error.kind}) after ${bytes} content bytes in ${pages} page(s)`
          : `incomplete: the Core marked the last page truncated after ${bytes} content bytes in ${pages} page(s)`;
    const out = { complete, truncated, budget_exhausted: budgetExhausted, pages, content, content_bytes: bytes, ref: i.ref, revision, description };
    if (error) out.error = error;
    return out;
  }
}

export function createKnowledgeClient(config) {
  return new KnowledgeClient(config);
}

/**
 * Generic host transport over SDK connections. `connections` maps connectionKey -> KnowledgeClient (a Map or a
 * function). Every call takes explicit options {workspace, connectionKey, expectedBinding, signal?}; the run is the
 * connection's current run; model arguments can never choose identity, route, connection or run.
 */
export function createHostTransport({ connections }) {
  const lookup = typeof connections === 'function' ? connections : (k) => connections.get(k);

  function prepare(options, operation) {
    if (!isObject(options)) throw invalidInput(operation, 'host options are required', 'invalid_options', 'host');
    const extra = Object.keys(options).filter((k) => !['workspace', 'connectionKey', 'expectedBinding', 'signal'].includes(k));
    if (extra.length) throw invalidInput(operation, `host options not accepted: ${extra.join(', ')}`, 'invalid_options', 'host');
    const { workspace, connectionKey, expectedBinding, signal } = options;
    if (typeof workspace !== 'string' || !workspace) throw invalidInput(operation, 'options.workspace is required', 'invalid_options', 'host');
    if (typeof connectionKey !== 'string' || !connectionKey) throw invalidInput(operation, 'options.connectionKey is required', 'invalid_options', 'host');
    if (!sameBinding(expectedBinding, expectedBinding)) throw invalidInput(operation, 'options.expectedBinding is required', 'invalid_options', 'host');
    if (signal !== undefined && !(signal instanceof AbortSignal)) throw invalidInput(operation, 'options.signal must be an AbortSignal', 'invalid_options', 'host');
    const client = lookup(connectionKey);
    if (!(client instanceof KnowledgeClient)) throw invalidInput(operation, 'unknown connectionKey', 'unknown_connection', 'host');
    if (signal?.aborted) throw new KnowledgeError('cancelled', 'cancelled before the request was sent', { operation, origin: 'host' });
    check(client, workspace, expectedBinding, operation, 'not_dispatched', 'before');
    return { client, signal, expectedBinding, workspace };
  }

  function check(client, workspace, expectedBinding, operation, dispatch, when) {
    if (workspace !== client.route || !sameBinding(expectedBinding, client.currentBinding)) {
      throw new KnowledgeError('binding_changed', `the connection is not the one the host expected (${when} the call)`, {
        status: 403, code: 'agent_binding_changed', operation, origin: 'host', dispatch,
      });
    }
  }

  async function run(operation, options, work) {
    const p = prepare(options, operation);
    const value = await work(p);
    check(p.client, p.workspace, p.expectedBinding, operation, 'attempted', 'after');
    return value;
  }

  const currentRun = (client, operation) => {
    const runId = client.currentRunId;
    if (!runId) throw invalidInput(operation, 'no current run: start the authorized user turn first', 'no_current_run', 'host');
    return runId;
  };

  return {
    getKnowledgeCapabilities(options) {
      return run(OPERATIONS.capabilities, options, ({ client, signal, expectedBinding }) =>
        client.getKnowledgeCapabilities({ signal, expectedBinding, origin: 'host' }));
    },
    searchKnowledge(input, options) {
      return run(OPERATIONS.search, options, ({ client, signal, expectedBinding }) => {
        const i = normalizeInput(input, { query: ['query'], limit: ['limit'] }, OPERATIONS.search, 'host');
        return client.searchKnowledge({ ...i, runId: currentRun(client, OPERATIONS.search) }, { signal, expectedBinding, origin: 'host' });
      });
    },
    readKnowledge(input, options) {
      return run(OPERATIONS.read, options, ({ client, signal, expectedBinding }) => {
        const i = normalizeInput(input, {
          ref: ['ref'], maxBytes: ['maxBytes', 'max_bytes'], cursor: ['cursor', 'next_cursor', 'nextCursor'],
        }, OPERATIONS.read, 'host');
        return client.readKnowledge({ ...i, runId: currentRun(client, OPERATIONS.read) }, { signal, expectedBinding, origin: 'host' });
      });
    },
  };
}
