// One loopback HTTP server: the Core's Agent API, the test-control extension and the Agent Session
// MCP path over streamable HTTP at /agent-api/v1/workspaces/{route}/mcp (stateful, SSE answers).
import http from 'node:http';
import crypto from 'node:crypto';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { InProcessCoreClient } from './coreclient.mjs';
import { createAgentServer, newSessionState } from './mcp-agent.mjs';
import { broken } from './broken.mjs';

const MCP_PATH = /^\/agent-api\/v1\/workspaces\/([^/]+)\/mcp\/?$/;
const LOOPBACK = ['127.0.0.1', 'localhost', '[::1]'];

function readBody(req, limit) {
  return new Promise((resolve, reject) => {
    const chunks = []; let n = 0, over = false;
    req.on('data', (c) => { n += c.length; if (n > limit) over = true; else chunks.push(c); });
    req.on('end', () => resolve(over ? null : Buffer.concat(chunks)));
    req.on('error', reject);
  });
}
function sendJson(res, status, body, headers = {}) {
  const text = body === undefined ? '' : JSON.stringify(body);
  res.writeHead(status, { 'cache-control': 'no-store', ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers });
  res.end(text);
}

export function hostAllowed(hostHeader, extraHosts = []) {
  if (!hostHeader) return false;
  if (extraHosts.includes(hostHeader)) return true;
  const m = /^(\[[0-9a-fA-F:.]+\]|[^:[\]]+)(?::(\d{1,5}))?$/.exec(hostHeader);
  if (!m) return false;
  const name = m[1].toLowerCase();
  if (extraHosts.includes(name + ':*')) return true;
  return LOOPBACK.includes(name);
}
export function originAllowed(origin, extraOrigins = []) {
  if (origin === undefined) return true; // non-browser clients send none
  if (broken('mcp_origin_null') && origin === 'null') return true; // local files and sandboxed tools send "null"
  if (extraOrigins.includes(origin)) return true;
  if (broken('mcp_origin_prefix')) return LOOPBACK.some((n) => origin.startsWith('http://' + n) || origin.startsWith('https://' + n));
  return /^https?:\/\/(127\.0\.0\.1|localhost|\[::1\])(:\d{1,5})?$/i.test(origin);
}

export function createHttpServer(core, { allowHosts = [], allowOrigins = [], log = () => {} } = {}) {
  const sessions = new Map(); // Mcp-Session-Id -> {transport, server, route, token, state}
  const sharedStates = new Map();
  const client = new InProcessCoreClient(core);

  async function mcp(req, res, route) {
    // DNS-rebinding protection before anything else: a foreign Host is 421, a foreign Origin 403.
    if (!hostAllowed(req.headers.host, allowHosts)) return sendJson(res, 421, { error: 'misdirected_request', message: 'Host not served.' });
    if (!originAllowed(req.headers.origin, allowOrigins)) return sendJson(res, 403, { error: 'forbidden_origin', message: 'Origin not allowed.' });
    const mm = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization || '');
    const id = mm ? core.identities.get(mm[1]) : undefined;
    if (!id) return sendJson(res, 401, { error: 'unauthorized', message: 'A valid Agent Session bearer token is required.' }, { 'www-authenticate': 'Bearer' });
    if (!core.workspaces.has(route)) return sendJson(res, 404, { error: 'route_unavailable', message: 'The workspace is not available.' });
    if (id.route !== route) return sendJson(res, 403, { error: 'route_not_allowed', message: 'This Agent Session may not use this workspace.' });
    let body;
    if (req.method === 'POST') {
      const raw = await readBody(req, 4 * 1024 * 1024);
      if (raw === null) return sendJson(res, 413, { jsonrpc: '2.0', error: { code: -32600, message: 'Request too large' }, id: null });
      try { body = JSON.parse(raw.toString('utf8')); } catch { return sendJson(res, 400, { jsonrpc: '2.0', error: { code: -32700, message: 'Parse error' }, id: null }); }
    }
    const sid = req.headers['mcp-session-id'];
    if (sid) {
      const entry = sessions.get(sid);
      const same = entry && (broken('mcp_session_across_routes') || (entry.route === route && entry.token === id.token));
      if (!same) return sendJson(res, 404, { jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null });
      return entry.transport.handleRequest(req, res, body);
    }
    if (req.method !== 'POST' || !isInitializeRequest(body)) {
      return sendJson(res, 400, { jsonrpc: '2.0', error: { code: -32000, message: 'Bad Request: no valid session' }, id: null });
    }
    const port = req.socket.localPort;
    let state = newSessionState();
    if (broken('mcp_run_per_route')) { // one conversation per workspace: reconnecting clients keep their run
      if (!sharedStates.has(route)) sharedStates.set(route, state);
      state = sharedStates.get(route);
    }
    const entry = { route, token: id.token, state };
    const sdkProtection = !broken('mcp_origin_prefix');
    entry.transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => crypto.randomUUID(),
      onsessioninitialized: (s) => { sessions.set(s, entry); },
      onsessionclosed: (s) => { sessions.delete(s); },
      enableDnsRebindingProtection: sdkProtection,
      allowedHosts: sdkProtection ? [...LOOPBACK.map((n) => `${n}:${port}`), ...LOOPBACK, ...allowHosts] : undefined,
      allowedOrigins: sdkProtection && req.headers.origin ? [req.headers.origin] : undefined,
    });
    entry.transport.onclose = () => { if (entry.transport.sessionId) sessions.delete(entry.transport.sessionId); };
    entry.server = createAgentServer({ client, route, token: id.token, state: entry.state });
    await entry.server.connect(entry.transport);
    return entry.transport.handleRequest(req, res, body);
  }

  const server = http.createServer(async (req, res) => {
    try {
      const url = new URL(req.url, 'http://127.0.0.1');
      const m = MCP_PATH.exec(url.pathname);
      if (m) return await mcp(req, res, decodeURIComponent(m[1]));
      const body = await readBody(req, 1024 * 1024);
      const r = body === null
        ? { status: 413, body: { error: 'payload_too_large', message: 'The request body is larger than 1 MiB.' }, headers: { 'cache-control': 'no-store' } }
        : core.handle({ method: req.method, path: url.pathname, query: url.searchParams, headers: req.headers, body });
      log(`${req.method} ${url.pathname} ${r.status}`);
      if (typeof r.body === 'string') {
        res.writeHead(r.status, { ...r.headers, 'content-type': r.contentType || 'text/plain' });
        return res.end(r.body);
      }
      return sendJson(res, r.status, r.status === 204 ? undefined : r.body, r.headers);
    } catch (e) {
      if (process.env.MCPTS_DEBUG) console.error(e);
      if (!res.headersSent) sendJson(res, 500, { error: 'internal_error', message: 'Unexpected failure.' });
      else res.end();
    }
  });
  server.mcpSessions = sessions;
  return server;
}
