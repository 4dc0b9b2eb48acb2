#!/usr/bin/env node
// knowledge-mcp-ts serve | stdio | jobs   (see README.md)
import { parseArgs } from 'node:util';
import crypto from 'node:crypto';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { Core, seedDemo } from '../src/core.mjs';
import { createHttpServer } from '../src/http.mjs';
import { InProcessCoreClient, HttpCoreClient } from '../src/coreclient.mjs';
import { createAgentServer, newSessionState } from '../src/mcp-agent.mjs';
import { createJobsServer } from '../src/mcp-jobs.mjs';
import { brokenName } from '../src/broken.mjs';

const [cmd, ...argv] = process.argv.slice(2);
// --broken NAME anywhere sets MCPTS_BROKEN (a stdio child may not inherit the environment).
const rest = [];
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === '--broken') process.env.MCPTS_BROKEN = argv[++i] || '';
  else rest.push(argv[i]);
}
const usage = 'usage: knowledge-mcp-ts serve [--port N] [--host 127.0.0.1] [--control-token T] [--no-control] [--demo] [--allow-host H]... [--allow-origin O]...\n'
  + '       knowledge-mcp-ts stdio --route R [--core-url URL]   (token in KC_AGENT_TOKEN)\n'
  + '       knowledge-mcp-ts jobs [--job-seconds S]';

if (cmd === 'serve') {
  const { values } = parseArgs({ args: rest, options: {
    port: { type: 'string', default: '8790' }, host: { type: 'string', default: '127.0.0.1' },
    'control-token': { type: 'string' }, 'no-control': { type: 'boolean', default: false }, demo: { type: 'boolean', default: false },
    'allow-host': { type: 'string', multiple: true, default: [] }, 'allow-origin': { type: 'string', multiple: true, default: [] },
  } });
  if (!['127.0.0.1', 'localhost', '::1'].includes(values.host)) { console.error('loopback only'); process.exit(4); }
  const port = Number(values.port);
  const core = new Core({ controlToken: values['no-control'] ? require_random() : (values['control-token'] || process.env.MCPTS_CONTROL_TOKEN || 'mcpts-control-token'), hub: `http://127.0.0.1:${port}` });
  const server = createHttpServer(core, { allowHosts: values['allow-host'], allowOrigins: values['allow-origin'] });
  server.listen(port, values.host, () => {
    const actual = server.address().port;
    core.hub = `http://127.0.0.1:${actual}`;
    console.error(`knowledge-mcp-ts serving on http://127.0.0.1:${actual}${brokenName() ? ` (broken variant: ${brokenName()})` : ''}`);
    if (values.demo) {
      seedDemo(core, 'demo');
      const id = core.mintIdentity({ account: 'alice', route: 'demo' });
      console.error(`demo workspace "demo"; primary: ${id.token}`);
      console.error(`MCP: http://127.0.0.1:${actual}/agent-api/v1/workspaces/demo/mcp`);
    }
  });
  const stop = () => server.close(() => process.exit(0));
  process.on('SIGTERM', stop); process.on('SIGINT', stop);
} else if (cmd === 'stdio') {
  const { values } = parseArgs({ args: rest, options: { route: { type: 'string', default: 'demo' }, 'core-url': { type: 'string' } } });
  let client, token = process.env.KC_AGENT_TOKEN || '';
  if (values['core-url']) client = new HttpCoreClient(values['core-url']);
  else {
    // A standalone in-process Core with a demo workspace on the route.
    const core = new Core({});
    seedDemo(core, values.route);
    if (!core.identities.get(token)) token = core.mintIdentity({ account: 'alice', route: values.route }).token;
    client = new InProcessCoreClient(core);
  }
  const server = createAgentServer({ client, route: values.route, token, state: newSessionState() });
  await server.connect(new StdioServerTransport());
} else if (cmd === 'jobs') {
  const { values } = parseArgs({ args: rest, options: { 'job-seconds': { type: 'string', default: '1' } } });
  const server = createJobsServer({ jobSeconds: Number(values['job-seconds']) });
  await server.connect(new StdioServerTransport());
} else {
  console.error(usage);
  process.exit(cmd ? 4 : 0);
}

function require_random() { return 'disabled-' + crypto.randomUUID() + crypto.randomUUID(); }
