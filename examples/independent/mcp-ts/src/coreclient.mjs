// How the MCP adapters reach a Core: in-process (the same handler the HTTP server uses) or over HTTP.
// Both answer {status, body, json}; `json` is false when the answer was not JSON.

export class InProcessCoreClient {
  constructor(core) { this.core = core; }
  async call(method, path, token, body) {
    const res = this.core.handle({
      method, path, query: new URLSearchParams(),
      headers: { authorization: 'Bearer ' + token, 'content-type': 'application/json' },
      body: body === undefined ? Buffer.alloc(0) : Buffer.from(JSON.stringify(body)),
    });
    if (typeof res.body === 'string') return { status: res.status, body: res.body, json: false };
    // a deep copy, as a wire would give
    return { status: res.status, body: res.body === undefined ? null : JSON.parse(JSON.stringify(res.body)), json: true };
  }
}

export class HttpCoreClient {
  constructor(baseUrl, { timeoutMs = 30000 } = {}) { this.base = baseUrl.replace(/\/+$/, ''); this.timeoutMs = timeoutMs; }
  async call(method, path, token, body) {
    const res = await fetch(this.base + path, {
      method,
      headers: { authorization: 'Bearer ' + token, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
      redirect: 'manual',
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    const text = await res.text();
    try { return { status: res.status, body: JSON.parse(text), json: true }; } catch { return { status: res.status, body: text, json: false }; }
  }
}
