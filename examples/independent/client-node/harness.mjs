#!/usr/bin/env node
// Harness for `knowledge-conformance client --harness "node harness.mjs"`: protocol knowledge-harness.v1,
// one JSON command per stdin line, exactly one JSON answer per command on stdout, in order. Logs go to stderr.
import { createInterface } from 'node:readline';
import { KnowledgeClient, KnowledgeError, createHostTransport, SDK_NAME, SDK_VERSION } from './sdk.mjs';

const PROTOCOL = 'knowledge-harness.v1';
const HOST_CALLS = new Set(['getKnowledgeCapabilities', 'searchKnowledge', 'readKnowledge']);

const connections = new Map(); // key -> {client, state}
const signals = new Map(); // name -> AbortController
const arming = new Set(); // `cancel ... during_next_request`: aborted once the next request got its response
let host = null;
let started = false;

const log = (...a) => process.stderr.write(`[harness] ${a.join(' ')}\n`);

class HarnessError extends Error {
  constructor(kind, message) { super(message); this.kind = kind; }
}

function signalNamed(name) {
  if (!signals.has(name)) signals.set(name, new AbortController());
  return signals.get(name);
}

function connection(key) {
  if (!started) throw new HarnessError('invalid_input', 'no start command yet');
  const c = connections.get(key);
  if (!c) throw new HarnessError('invalid_input', `unknown connection ${JSON.stringify(key)}`);
  return c;
}

function start(cmd) {
  if (cmd.protocol !== PROTOCOL) throw new HarnessError('invalid_input', `protocol ${JSON.stringify(cmd.protocol)} is not ${PROTOCOL}`);
  if (typeof cmd.core_url !== 'string' || !Array.isArray(cmd.connections) || cmd.connections.length === 0) {
    throw new HarnessError('invalid_input', 'start needs core_url and connections');
  }
  const seconds = typeof cmd.timeout_seconds === 'number' && cmd.timeout_seconds > 0 ? cmd.timeout_seconds : 30;
  connections.clear();
  for (const c of cmd.connections) {
    const state = { binding: { ...c.binding }, pendingRebind: null };
    // A fetch wrapper stands in for the auth layer: `rebind during_next_request` switches the session once the
    // response of the connection's next request arrives, before the SDK returns it.
    const wrappedFetch = async (url, init) => {
      const res = await fetch(url, init);
      if (state.pendingRebind) { state.binding = state.pendingRebind; state.pendingRebind = null; }
      for (const name of arming) signalNamed(name).abort();
      arming.clear();
      return res;
    };
    const client = new KnowledgeClient({
      baseUrl: cmd.core_url, route: c.route, token: c.token, expectedBinding: c.binding,
      getBinding: () => state.binding, fetch: wrappedFetch, timeoutMs: Math.max(1000, Math.floor(seconds * 800)),
    });
    connections.set(c.key, { client, state });
  }
  host = createHostTransport({ connections: (key) => connections.get(key)?.client });
  started = true;
  return {
    protocol: PROTOCOL,
    client: { name: SDK_NAME, version: SDK_VERSION },
    harness: { name: 'blind-knowledge-harness', version: '0.1.0' },
    language: 'JavaScript',
    surfaces: ['client', 'host'],
  };
}

async function execute(cmd) {
  switch (cmd.cmd) {
    case 'start': return start(cmd);
    case 'capabilities': return connection(cmd.connection).client.getKnowledgeCapabilities();
    case 'turn': {
      const { client } = connection(cmd.connection);
      // model_input travels in the turn input, where a model could put it; the delivery is the host's option only.
      const input = cmd.model_input !== undefined ? { ...cmd.model_input, userInput: cmd.input } : cmd.input;
      const ids = cmd.ids ?? {};
      return client.startTurn(input, {
        knowledgeDelivery: cmd.delivery,
        clientConversationId: ids.client_conversation_id, clientTurnId: ids.client_turn_id, userMessageId: ids.user_message_id,
      });
    }
    case 'search': return connection(cmd.connection).client.searchKnowledge(cmd.input);
    case 'read': return connection(cmd.connection).client.readKnowledge(cmd.input);
    case 'read_all': return connection(cmd.connection).client.readKnowledgeChain(cmd.input);
    case 'cancel':
      if (typeof cmd.signal !== 'string') throw new HarnessError('invalid_input', 'cancel needs a signal name');
      if (cmd.when === 'during_next_request') arming.add(cmd.signal);
      else signalNamed(cmd.signal).abort();
      return {};
    case 'rebind': {
      const { state } = connection(cmd.connection);
      if (cmd.when === 'now') state.binding = { ...cmd.binding };
      else if (cmd.when === 'during_next_request') state.pendingRebind = { ...cmd.binding };
      else throw new HarnessError('invalid_input', 'when must be now or during_next_request');
      return {};
    }
    case 'host_call': {
      if (!started) throw new HarnessError('invalid_input', 'no start command yet');
      if (!HOST_CALLS.has(cmd.call)) throw new HarnessError('unsupported_command', `unknown host call ${JSON.stringify(cmd.call)}`);
      const o = cmd.options ?? {};
      const options = { workspace: o.workspace, connectionKey: o.connectionKey, expectedBinding: o.expectedBinding };
      if (typeof o.signal === 'string') options.signal = signalNamed(o.signal).signal;
      if (cmd.call === 'getKnowledgeCapabilities') return host.getKnowledgeCapabilities(options);
      return host[cmd.call](cmd.input, options);
    }
    case 'stop': return {};
    default: throw new HarnessError('unsupported_command', `command ${JSON.stringify(cmd.cmd)} is not implemented`);
  }
}

function errorOf(err) {
  if (err instanceof KnowledgeError) {
    const e = { kind: err.kind, message: err.message || err.kind, status: err.status, code: err.code, next_action: err.next_action, retryable: err.retryable, feedback: err.feedback };
    return e;
  }
  if (err instanceof HarnessError) return { kind: err.kind, message: err.message };
  log('internal error:', err?.stack ?? String(err));
  return { kind: 'internal', message: String(err?.message ?? err) };
}

async function answer(cmd) {
  try {
    const value = await execute(cmd);
    return { id: cmd.id, ok: true, value: value ?? {} };
  } catch (err) {
    return { id: cmd.id, ok: false, error: errorOf(err) };
  }
}

// Commands run one after another; `cancel` acts at once (it may abort a request still in flight).
// Answers are written in command order.
let work = Promise.resolve();
let out = Promise.resolve();
const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });

rl.on('line', (line) => {
  if (!line.trim()) return;
  let cmd;
  try { cmd = JSON.parse(line); } catch { log('not JSON, ignored:', line.slice(0, 200)); return; }
  if (cmd === null || typeof cmd !== 'object' || !Number.isInteger(cmd.id)) { log('command without an id, ignored'); return; }
  let pending;
  if (cmd.cmd === 'cancel') pending = answer(cmd);
  else pending = work = work.then(() => answer(cmd));
  out = out.then(() => pending).then((ans) => new Promise((resolve) => {
    process.stdout.write(`${JSON.stringify(ans)}\n`, () => {
      if (cmd.cmd === 'stop') process.exit(0);
      resolve();
    });
  }));
});
rl.on('close', () => { out.then(() => process.exit(0)); });
