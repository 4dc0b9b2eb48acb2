// The Fixed Client Token stdio path: exactly submit_governed_job, get_governed_job, wait_for_governed_job.
import crypto from 'node:crypto';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { ListToolsRequestSchema, CallToolRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { paginate, TOOLS as AGENT_TOOLS } from './mcp-agent.mjs';
import { broken } from './broken.mjs';

const ID_RE = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;
const jobResult = {
  type: 'object', required: ['job_id', 'request_id', 'status'],
  properties: { job_id: { type: 'string', minLength: 1 }, request_id: { type: 'string' }, status: { enum: ['pending', 'done'] }, output: { type: 'string' }, timed_out: { type: 'boolean' } },
};
const TOOLS = {
  submit_governed_job: {
    name: 'submit_governed_job', description: 'Submit a governed job; the same request_id returns the same job.',
    inputSchema: { type: 'object', required: ['request_id', 'input'], additionalProperties: false, properties: { request_id: { type: 'string', pattern: ID_RE.source }, input: { type: 'string', maxLength: 64000 } } },
    outputSchema: jobResult,
  },
  get_governed_job: {
    name: 'get_governed_job', description: 'The current state of a governed job.',
    inputSchema: { type: 'object', required: ['job_id'], additionalProperties: false, properties: { job_id: { type: 'string', minLength: 1, maxLength: 128 } } },
    outputSchema: jobResult,
  },
  wait_for_governed_job: {
    name: 'wait_for_governed_job', description: 'Wait up to max_wait_seconds (1..60, default 20) for a governed job to finish.',
    inputSchema: { type: 'object', required: ['job_id'], additionalProperties: false, properties: { job_id: { type: 'string', minLength: 1, maxLength: 128 }, max_wait_seconds: { type: 'integer', minimum: 1, maximum: 60, default: 20 } } },
    outputSchema: jobResult,
  },
};

export function createJobsServer({ jobSeconds = 1 } = {}) {
  const jobs = new Map(), byRequest = new Map();
  const view = (j) => ({ job_id: j.job_id, request_id: j.request_id, status: Date.now() >= j.doneAt ? 'done' : 'pending', ...(Date.now() >= j.doneAt ? { output: j.output } : {}) });
  const okr = (sc) => ({ content: [{ type: 'text', text: JSON.stringify(sc) }], structuredContent: sc });
  const bad = (code, message) => { const sc = { error: code, message }; return { content: [{ type: 'text', text: JSON.stringify(sc) }], structuredContent: sc, isError: true }; };
  const names = Object.keys(TOOLS);
  const defs = { ...TOOLS };
  if (broken('jobs_extra_tool')) { names.push('search_business_knowledge'); defs.search_business_knowledge = AGENT_TOOLS.search_business_knowledge; }
  const server = new Server({ name: 'knowledge-mcp-ts-jobs', version: '0.1.0' }, { capabilities: { tools: { listChanged: false } } });
  server.setRequestHandler(ListToolsRequestSchema, async (req) => paginate(names, req.params?.cursor, defs));
  server.setRequestHandler(CallToolRequestSchema, async (req) => {
    const a = req.params.arguments || {};
    const name = req.params.name;
    if (name === 'submit_governed_job') {
      if (typeof a.request_id !== 'string' || !ID_RE.test(a.request_id)) return bad('invalid_arguments', 'request_id is malformed.');
      if (typeof a.input !== 'string' || a.input.length > 64000) return bad('invalid_arguments', 'input must be a string of at most 64000 characters.');
      let j = byRequest.get(a.request_id);
      if (!j) {
        j = { job_id: 'job_' + crypto.randomUUID(), request_id: a.request_id, output: `processed ${a.input.length} characters`, doneAt: Date.now() + jobSeconds * 1000 };
        jobs.set(j.job_id, j); byRequest.set(a.request_id, j);
      }
      return okr(view(j));
    }
    if (name === 'get_governed_job' || name === 'wait_for_governed_job') {
      if (typeof a.job_id !== 'string' || a.job_id.length < 1 || a.job_id.length > 128) return bad('invalid_arguments', 'job_id is malformed.');
      const j = jobs.get(a.job_id);
      if (!j) return bad('job_not_found', 'No such job.');
      if (name === 'get_governed_job') return okr(view(j));
      const wait = a.max_wait_seconds ?? 20;
      if (!Number.isInteger(wait) || wait < 1 || wait > 60) return bad('invalid_arguments', 'max_wait_seconds must be an integer from 1 to 60.');
      const until = Date.now() + wait * 1000;
      while (Date.now() < j.doneAt && Date.now() < until) await new Promise((r) => setTimeout(r, Math.min(100, until - Date.now())));
      const v = view(j);
      return okr(v.status === 'pending' ? { ...v, timed_out: true } : v);
    }
    return bad('unknown_tool', `No tool named ${name}.`);
  });
  return server;
}
