#!/usr/bin/env node
// A complete, minimal client harness in JavaScript, standard library only (Node 18+: fetch, readline).
// It holds a tiny SDK (capabilities, startTurn, searchKnowledge, readKnowledge, a read chain) and a
// host transport over it, and speaks the harness protocol (schemas/harness-protocol.schema.json):
// one JSON command a line on stdin, one JSON answer a line on stdout, logs on stderr only.
//
//   knowledge-conformance client --harness "node examples/harness/node/harness.mjs"
//
// An SDK author replaces the `Sdk` class with their own SDK and keeps the loop at the bottom.
import { createInterface } from 'node:readline'

const PROTOCOL = 'knowledge-harness.v1'
const UNSUPPORTED = new Set([404, 405, 501])
// each limit and its bounds [lowest, highest] (seed 000's numbers)
const LIMITS = {
  search_max_hints: [1, 3], search_max_bytes: [1, 4096], read_default_max_bytes: [16384, 16384],
  read_min_max_bytes: [4096, 4096], read_max_max_bytes: [32768, 32768], reference_max_bytes: [1, 4096],
  read_chain_max_bytes: [1, 131072], reference_ttl_seconds: [1, 300]
}
const CHAIN_BUDGET = 131072

class Failure extends Error {
  constructor (kind, message, extra = {}) { super(message); this.kind = kind; this.extra = extra }
}

// An explicit context.knowledge_delivery must match the delivery schema (mode, at most three title/summary/ref
// hints, no bodies), whatever delivery the turn asked for; inline bodies are returned as the Core sent them.
function checkedTurn (turn) {
  const d = turn && turn.context && turn.context.knowledge_delivery
  if (d === undefined) return turn
  const hint = (h) => h && typeof h === 'object' && ['title', 'summary', 'ref'].every((k) => typeof h[k] === 'string')
  const ok = d && typeof d === 'object' && !Array.isArray(d) && d.mode === 'on_demand' &&
    Array.isArray(d.hints) && d.hints.length <= 3 && d.hints.every(hint) &&
    !['bodies', 'body', 'content', 'knowledge'].some((k) => k in d)
  if (!ok) throw new Failure('invalid_response', 'context.knowledge_delivery does not match the delivery schema')
  return turn
}

class Sdk {
  constructor (coreUrl, route, token, onResponse, onSend = () => {}) {
    this.base = `${coreUrl.replace(/\/$/, '')}/agent-api/v1/workspaces/${route}`
    this.route = route
    this.token = token
    this.onResponse = onResponse // the host hears every response (its session may change meanwhile)
    this.onSend = onSend // ... and every request as it goes out (a signal may be aborted meanwhile)
    this.pinned = new Map() // turn identity -> the exact payload first sent
  }

  async request (method, path, body) {
    let response
    this.onSend()
    try {
      response = await fetch(this.base + path, {
        method,
        headers: { Authorization: `Bearer ${this.token}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
        body: body ? JSON.stringify(body) : undefined
      })
    } catch (err) {
      throw new Failure('network_error', String(err))
    }
    const text = await response.text()
    this.onResponse()
    let json = null
    try { json = JSON.parse(text) } catch { json = null }
    return { status: response.status, json }
  }

  error ({ status, json }) {
    const code = json && typeof json.error === 'string' ? json.error : `http_${status}`
    const given = (json && (json.next_action ?? json.feedback?.next_action)) ?? null
    // a reference error's feedback says to search again, whether or not the Core said so (seed 000)
    const reference = /^knowledge_(reference_.+|.*changed)$/.test(code)
    const nextAction = given ?? (reference ? 'search_knowledge' : null)
    return new Failure('core_error', (json && json.message) || `HTTP ${status}`, { status, code, next_action: nextAction })
  }

  async getKnowledgeCapabilities () {
    const answer = await this.request('GET', '/knowledge/capabilities')
    const specific = answer.status === 404 && answer.json && answer.json.error && answer.json.error !== 'not_found'
    if (UNSUPPORTED.has(answer.status) && !specific) return { supported: false }
    if (answer.status !== 200) throw this.error(answer)
    const b = answer.json || {}
    const modes = Array.isArray(b.delivery_modes) ? b.delivery_modes : []
    const ok = b.schema_version === 'bailing.agent-knowledge-capabilities.v1' &&
      b.knowledge_schema_version === 'bailing.agent-knowledge.v1' && b.route === this.route &&
      typeof b.enabled === 'boolean' && modes.includes('inline') && modes.includes('on_demand') &&
      b.limits && Object.entries(LIMITS).every(([k, [lo, hi]]) =>
      Number.isInteger(b.limits[k]) && b.limits[k] >= lo && b.limits[k] <= hi)
    if (!ok) throw new Failure('invalid_response', 'unsupported capabilities answer (schema, route, modes or limits)')
    return { supported: true, enabled: b.enabled, limits: b.limits }
  }

  async startTurn (input, ids, options = {}) {
    const key = JSON.stringify([ids.client_conversation_id, ids.client_turn_id, ids.user_message_id])
    if (!this.pinned.has(key)) {
      const body = { ...ids, user_input: input }
      if (options.knowledgeDelivery === 'on_demand') body.knowledge_delivery = 'on_demand'
      this.pinned.set(key, body)
    }
    let last
    for (let attempt = 0; attempt < 3; attempt++) { // response-loss retries replay the pinned payload
      try { last = await this.request('POST', '/turns', this.pinned.get(key)) } catch (err) { if (attempt === 2) throw err; continue }
      if (last.status === 200) return checkedTurn(last.json)
      if (![502, 503, 504].includes(last.status)) break
    }
    throw this.error(last)
  }

  async searchKnowledge (data) {
    const body = { query: data.query, run_id: data.runId ?? data.run_id }
    if (data.limit !== undefined) body.limit = data.limit
    const answer = await this.request('POST', '/knowledge/search', body)
    if (answer.status !== 200) throw this.error(answer)
    if (!answer.json || typeof answer.json !== 'object') throw new Failure('invalid_response', 'the search answer is not a JSON object')
    return answer.json // status unavailable/partial is passed on as it is: never an empty corpus
  }

  async readKnowledge (data) {
    const body = { ref: data.ref, run_id: data.runId ?? data.run_id }
    const maxBytes = data.maxBytes ?? data.max_bytes
    if (maxBytes !== undefined && maxBytes !== null) body.max_bytes = maxBytes
    if (data.cursor) body.cursor = data.cursor
    const answer = await this.request('POST', '/knowledge/read', body)
    if (answer.status !== 200) throw this.error(answer)
    if (!answer.json || typeof answer.json !== 'object') throw new Failure('invalid_response', 'the read answer is not a JSON object')
    return answer.json
  }

  async readChain (data) {
    let cursor = null; let consumed = 0; let pages = 0; let content = ''; let page
    do {
      page = await this.readKnowledge({ ...data, cursor })
      pages++; content += page.content; consumed += Buffer.byteLength(page.content, 'utf8'); cursor = page.next_cursor
    } while (cursor && consumed <= CHAIN_BUDGET)
    const exhausted = page.budget_exhausted === true
    const truncated = Boolean(cursor) || page.truncated === true || exhausted
    return { complete: !truncated, truncated, budget_exhausted: exhausted, pages, content,
      description: truncated ? (exhausted ? 'partial read: stopped by the read-chain budget' : 'partial read: truncated') : 'full read' }
  }
}

const connections = new Map()
const aborted = new Set()
const arming = new Set() // aborted as soon as the next request has gone out (cancel ... during_next_request)
const abortArmed = () => { for (const s of arming) aborted.add(s); arming.clear() }
const HOST_INPUTS = { searchKnowledge: { query: 'query', limit: 'limit' },
  readKnowledge: { ref: 'ref', cursor: 'cursor', maxBytes: 'maxBytes', max_bytes: 'maxBytes' } }
const same = (a, b) => ['hubUrl', 'clientAppId', 'workspace', 'sessionId'].every((k) => a?.[k] === b?.[k])

function conn (key) {
  const found = connections.get(key)
  if (!found) throw new Failure('invalid_input', `no connection ${key}`)
  return found
}

async function hostCall ({ call, input, options }) {
  const c = conn(options.connectionKey)
  if (options.workspace !== c.route) throw new Failure('invalid_input', 'workspace is not the connection\'s')
  const check = (when) => {
    if (!same(c.binding, options.expectedBinding)) throw new Failure('binding_changed', `agent_binding_changed (${when} the request)`)
    if (options.signal && aborted.has(options.signal)) throw new Failure('cancelled', `signal ${options.signal} was aborted`)
  }
  check('before')
  if (call !== 'getKnowledgeCapabilities' && !c.runId) throw new Failure('invalid_input', 'start the authorized user turn first')
  try {
    if (call === 'getKnowledgeCapabilities') return await c.sdk.getKnowledgeCapabilities()
    const data = { runId: c.runId } // the model never chooses identity, route, connection or run
    for (const [k, v] of Object.entries(input)) if (HOST_INPUTS[call][k]) data[HOST_INPUTS[call][k]] = v
    return call === 'searchKnowledge' ? await c.sdk.searchKnowledge(data) : await c.sdk.readKnowledge(data)
  } finally {
    check('after') // whatever the Core answered: an error belongs to the old binding too
  }
}

const commands = {
  start (cmd) {
    for (const spec of cmd.connections) {
      const c = { route: spec.route, binding: spec.binding, pending: null, runId: null }
      c.sdk = new Sdk(cmd.core_url, spec.route, spec.token, () => { if (c.pending) { c.binding = c.pending; c.pending = null } }, abortArmed)
      connections.set(spec.key, c)
    }
    return { protocol: PROTOCOL, client: { name: 'minimal node sdk', version: '0.1.0' },
      harness: { name: 'node-harness', version: '0.1.0' }, language: `Node ${process.version}`, surfaces: ['client', 'host'] }
  },
  capabilities: (cmd) => conn(cmd.connection).sdk.getKnowledgeCapabilities(),
  async turn (cmd) {
    const c = conn(cmd.connection)
    let delivery = cmd.delivery === 'on_demand' ? 'on_demand' : undefined // model_input never decides
    if (cmd.delivery === 'negotiate') delivery = (await c.sdk.getKnowledgeCapabilities()).supported ? 'on_demand' : undefined
    const turn = await c.sdk.startTurn(cmd.input, cmd.ids, delivery ? { knowledgeDelivery: delivery } : {})
    c.runId = turn.run_id
    return turn
  },
  search: (cmd) => conn(cmd.connection).sdk.searchKnowledge(cmd.input),
  read: (cmd) => conn(cmd.connection).sdk.readKnowledge(cmd.input),
  read_all: (cmd) => conn(cmd.connection).sdk.readChain(cmd.input),
  cancel (cmd) { (cmd.when === 'during_next_request' ? arming : aborted).add(cmd.signal); return {} },
  rebind (cmd) {
    const c = conn(cmd.connection)
    if (cmd.when === 'now') { c.binding = cmd.binding; c.pending = null } else c.pending = cmd.binding
    return {}
  },
  host_call: hostCall,
  stop: () => ({})
}

const lines = createInterface({ input: process.stdin })
for await (const line of lines) {
  if (!line.trim()) continue
  const cmd = JSON.parse(line)
  let answer
  try {
    const handler = commands[cmd.cmd]
    if (!handler) throw new Failure('unsupported_command', `no command ${cmd.cmd}`)
    answer = { id: cmd.id, ok: true, value: await handler(cmd) }
  } catch (err) {
    const kind = err instanceof Failure ? err.kind : 'internal'
    answer = { id: cmd.id, ok: false, error: { kind, message: String(err.message || err), ...(err.extra || {}) } }
  }
  process.stdout.write(JSON.stringify(answer) + '\n')
  if (cmd.cmd === 'stop') break
}
