// A refund-review A2A agent served over a2ad's NATS binding,
// urn:a2ad:binding:nats:v1, written from docs/nats-binding.md alone (section
// numbers below are that document's). Plain modern JavaScript (ESM) with JSDoc
// types: Node runs it as it is, no build step.
//
//   node agent.mjs --nats-url nats://127.0.0.1:4222 --credential-file ts-review.jwt [--card card.json]
//
// Environment instead of flags: A2AD_NATS_URL, A2AD_CREDENTIAL_FILE, A2AD_CARD.
// The agent id is the credential's `sub` (§3.1). It logs one line per thing
// that happened to stdout.
import { readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { connect, headers } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';

const { values: flags } = parseArgs({
  options: {
    'nats-url': { type: 'string', default: process.env.A2AD_NATS_URL ?? 'nats://127.0.0.1:4222' },
    'credential-file': { type: 'string', default: process.env.A2AD_CREDENTIAL_FILE },
    card: { type: 'string', default: process.env.A2AD_CARD ?? new URL('card.json', import.meta.url).pathname },
  },
});

const log = (/** @type {string} */ line) => console.log(`${new Date().toISOString()} ${line}`);
const die = (/** @type {string} */ why) => { console.error(`ts-agent: ${why}`); process.exit(2); };

if (!flags['credential-file']) die('--credential-file (or A2AD_CREDENTIAL_FILE) is required: mint one with `a2ad agents credential ID --out FILE`');
const credential = readFileSync(flags['credential-file'], 'utf8').trim();
// §10: a JWT whose `sub` is the agent id. Only read here, a2ad verifies it.
const agentId = (() => {
  try {
    const sub = JSON.parse(Buffer.from(credential.split('.')[1], 'base64url').toString('utf8')).sub;
    if (typeof sub === 'string' && /^[A-Za-z0-9_-]{1,128}$/.test(sub)) return sub;
  } catch { /* below */ }
  return die('the credential is not a JWT with an agent id as its sub');
})();
// §9: the card is sent byte for byte (a2ad fingerprints what it receives).
const cardText = readFileSync(flags.card, 'utf8').trim();
JSON.parse(cardText); // a clear error now rather than a refused registration later

const rpcSubject = `a2a.agent.${agentId}.rpc`;
const VERSION = '1.0';
const LIVENESS_ID = 'a2ad-liveness-probe';
const POLICY = 'fraud-policy-2026.11';

/**
 * @typedef {'TASK_STATE_SUBMITTED'|'TASK_STATE_WORKING'|'TASK_STATE_INPUT_REQUIRED'|'TASK_STATE_COMPLETED'|'TASK_STATE_FAILED'|'TASK_STATE_CANCELED'|'TASK_STATE_REJECTED'} TaskState
 * @typedef {{ id: string, a2adTaskId: string, eventsSubject: string, contextId: string, state: TaskState,
 *   timestamp: string, artifacts: object[], seq: number, traceparent?: string,
 *   answer?: (text: string) => void }} AgentTask
 */
/** @type {Map<string, AgentTask>} agent task id → task */
const tasks = new Map();
/** @type {Map<string, string>} processed messageId → agent task id (§5.4), bounded */
const seen = new Map();
const SEEN_MAX = 100_000;
const TERMINAL = new Set(['TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED']);
let stopping = false;

class RPCError extends Error {
  /** @param {number} code @param {string} message */
  constructor(code, message) { super(message); this.code = code; }
}

const now = () => new Date().toISOString();
const hex = (/** @type {number} */ n) => randomBytes(n).toString('hex');
const sleep = (/** @type {number} */ ms) => new Promise((r) => setTimeout(r, ms));

/** The task as a reply or GetTask shows it (§5.2, §5.5). @param {AgentTask} t */
function taskView(t) {
  const v = { id: t.id, contextId: t.contextId, status: { state: t.state, timestamp: t.timestamp } };
  return t.artifacts.length ? { ...v, artifacts: t.artifacts } : v;
}

const nc = await connect({
  servers: flags['nats-url'],
  token: credential, // §10: the credential is the CONNECT token
  inboxPrefix: `_INBOX_${agentId}`, // §10: the only inbox the agent may subscribe to
  name: `ts-agent ${agentId}`,
  maxReconnectAttempts: -1,
  reconnectTimeWait: 250,
});
const js = jetstream(nc);
log(`connected to ${nc.getServer()} as agent ${agentId}`);

// §6.3-6.5: one event, published to JetStream and retried with the same bytes
// and Nats-Msg-Id until the stream acknowledges it, while the task is live.
/** @param {AgentTask} t @param {object} item */
async function publish(t, item) {
  if (t.state === 'TASK_STATE_CANCELED' && !('statusUpdate' in item && item.statusUpdate.status.state === 'TASK_STATE_CANCELED')) return false;
  const seq = ++t.seq;
  const msgID = `${t.a2adTaskId}.${seq}`;
  const body = JSON.stringify(item);
  const h = headers();
  h.set('A2A-Version', VERSION);
  if (t.traceparent) h.set('traceparent', t.traceparent);
  for (let wait = 50; ; wait = Math.min(wait * 2, 2000)) {
    if (stopping) return false;
    try {
      const ack = await js.publish(t.eventsSubject, body, { msgID, headers: h, timeout: 2000 });
      log(`event ${msgID} acked: stream ${ack.stream} seq ${ack.seq}${ack.duplicate ? ' (duplicate)' : ''}`);
      return true;
    } catch (err) {
      log(`event ${msgID} not acked (${err?.message ?? err}); retrying in ${wait} ms`);
    }
    await sleep(wait);
    // A cancel while retrying ends the task: nothing more is sent (§6.4).
    if (t.state === 'TASK_STATE_CANCELED') { log(`event ${msgID} dropped: task ${t.id} was canceled`); return false; }
  }
}

/** A statusUpdate event. @param {AgentTask} t @param {TaskState} state @param {string} [text] */
async function setState(t, state, text) {
  if (t.state === 'TASK_STATE_CANCELED') return false;
  t.state = state;
  t.timestamp = now();
  /** @type {any} */
  const status = { state, timestamp: t.timestamp };
  if (text) status.message = { messageId: `msg-${hex(8)}`, contextId: t.contextId, taskId: t.id, role: 'ROLE_AGENT', parts: [{ text }] };
  return publish(t, { statusUpdate: { taskId: t.id, contextId: t.contextId, status } });
}

/** The skill: the reference agent's rules (§12), from the brief's evidence. @param {AgentTask} t @param {any} brief */
async function work(t, brief) {
  const ev = brief?.evidence ?? {};
  if (!(await setState(t, 'TASK_STATE_WORKING'))) return;
  if (typeof ev.case_id !== 'string' || typeof ev.amount_cents !== 'number') {
    await setState(t, 'TASK_STATE_REJECTED', 'the evidence needs case_id (string) and amount_cents (number)');
    return;
  }
  let verified;
  if (typeof ev.manual_review_above_cents === 'number' && ev.amount_cents > ev.manual_review_above_cents) {
    const answered = new Promise((resolve) => { t.answer = resolve; });
    if (!(await setState(t, 'TASK_STATE_INPUT_REQUIRED', `Case ${ev.case_id}: the refund of ${ev.amount_cents} cents is above the manual review threshold of ${ev.manual_review_above_cents} cents. Has a human reviewer verified the customer's identity? Answer yes or no.`))) return;
    log(`task ${t.id} asks a question, waiting for the answer`);
    const answer = String(await answered);
    if (t.state === 'TASK_STATE_CANCELED') return;
    verified = /^(yes|y|verified|confirmed|true)$/i.test(answer.trim());
    log(`task ${t.id} resumes on the answer ${JSON.stringify(answer)}`);
    if (!(await setState(t, 'TASK_STATE_WORKING'))) return;
  }
  let score = 0.1;
  const reasons = [];
  if (ev.amount_cents > 50000) { score += 0.3; reasons.push(`amount ${ev.amount_cents} cents above 50000`); }
  if (typeof ev.prior_refunds_90d === 'number' && ev.prior_refunds_90d >= 3) { score += 0.2; reasons.push(`${ev.prior_refunds_90d} refunds in 90 days`); }
  if (typeof ev.customer_tenure_days === 'number' && ev.customer_tenure_days < 30) { score += 0.2; reasons.push(`customer for ${ev.customer_tenure_days} days`); }
  if (verified === true) { score -= 0.2; reasons.push('identity verified by a human reviewer'); }
  if (verified === false) { score += 0.3; reasons.push('identity not verified'); }
  score = Math.round(Math.min(1, Math.max(0, score)) * 100) / 100;
  if (!reasons.length) reasons.push('no risk signals in the evidence');
  const artifact = {
    artifactId: 'risk-assessment', name: 'risk_assessment',
    parts: [{ data: { case_id: ev.case_id, risk_level: score < 0.34 ? 'low' : score < 0.67 ? 'medium' : 'high', score, reasons, policy_version: POLICY }, mediaType: 'application/json' }],
  };
  if (t.state === 'TASK_STATE_CANCELED') return;
  t.artifacts = [artifact];
  if (!(await publish(t, { artifactUpdate: { taskId: t.id, contextId: t.contextId, artifact, lastChunk: true } }))) return;
  if (await setState(t, 'TASK_STATE_COMPLETED')) log(`task ${t.id} completed: ${ev.case_id} ${artifact.parts[0].data.risk_level} ${score}`);
}

/** Reads a2ad's routing metadata and checks it (§5.2 1). @param {any} msg */
function routing(msg) {
  const md = msg?.metadata ?? {};
  const a2adTaskId = md['a2ad/taskId'];
  const eventsSubject = md['a2ad/eventsSubject'];
  if (typeof a2adTaskId !== 'string' || !/^[A-Za-z0-9_-]{1,128}$/.test(a2adTaskId) || eventsSubject !== `a2a.events.${agentId}.${a2adTaskId}`) {
    throw new RPCError(-32602, `a2ad/eventsSubject must be a2a.events.${agentId}.<a2ad/taskId>`);
  }
  return { a2adTaskId, eventsSubject };
}

/** SendMessage (§5.2-5.4). @param {any} params @param {string|undefined} traceparent */
function sendMessage(params, traceparent) {
  const msg = params?.message;
  if (typeof msg?.messageId !== 'string' || !msg.messageId) throw new RPCError(-32602, 'message.messageId is required');
  if (msg.role !== 'ROLE_USER') throw new RPCError(-32602, 'message.role must be ROLE_USER');
  if (!Array.isArray(msg.parts)) throw new RPCError(-32602, 'message.parts must be a list');
  const modes = params?.configuration?.acceptedOutputModes;
  if (Array.isArray(modes) && !modes.includes('application/json')) throw new RPCError(-32005, 'this agent produces application/json only');
  const again = seen.get(msg.messageId);
  if (again && tasks.has(again)) {
    log(`message ${msg.messageId} seen before: task ${again} again, nothing new`);
    return { task: taskView(/** @type {AgentTask} */ (tasks.get(again))) };
  }
  const { a2adTaskId, eventsSubject } = routing(msg);
  /** @type {AgentTask} */
  let t;
  if (msg.taskId !== undefined) { // §5.3: the answer to a question
    const known = tasks.get(msg.taskId);
    if (!known) throw new RPCError(-32001, `task ${msg.taskId} not found`);
    if (known.a2adTaskId !== a2adTaskId || (msg.contextId !== undefined && msg.contextId !== known.contextId)) throw new RPCError(-32602, 'a2ad/taskId or contextId do not match the task');
    if (known.state !== 'TASK_STATE_INPUT_REQUIRED' || !known.answer) throw new RPCError(-32004, `task ${known.id} is not waiting for input`);
    const data = msg.parts.find((p) => p && 'data' in p);
    const text = data ? JSON.stringify(data.data) : msg.parts.filter((p) => typeof p?.text === 'string').map((p) => p.text).join('\n');
    if (!text.trim()) throw new RPCError(-32602, 'the answer is empty');
    t = known;
    const resume = known.answer;
    known.answer = undefined;
    t.state = 'TASK_STATE_WORKING';
    t.timestamp = now();
    queueMicrotask(() => resume(text)); // after the reply is built; events follow the reply
  } else {
    const brief = msg.parts.find((p) => p && typeof p.data === 'object' && p.data !== null && (p.mediaType ?? 'application/json') === 'application/json')?.data;
    if (!brief || typeof brief.objective !== 'string') throw new RPCError(-32602, 'no data part carrying a brief');
    t = { id: `ts-${hex(8)}`, a2adTaskId, eventsSubject, contextId: typeof msg.contextId === 'string' && msg.contextId ? msg.contextId : `ctx-${hex(8)}`,
      state: 'TASK_STATE_SUBMITTED', timestamp: now(), artifacts: [], seq: 0, traceparent };
    tasks.set(t.id, t);
    log(`task ${t.id} for a2ad task ${a2adTaskId}: ${brief.objective}`);
    setImmediate(() => work(t, brief).catch((err) => log(`task ${t.id} failed: ${err?.stack ?? err}`)));
  }
  seen.set(msg.messageId, t.id);
  if (seen.size > SEEN_MAX) seen.delete(seen.keys().next().value);
  return { task: taskView(t) };
}

/** @param {any} params */
function taskOf(params) {
  const t = typeof params?.id === 'string' ? tasks.get(params.id) : undefined;
  if (!t) throw new RPCError(-32001, `task ${params?.id} not found`);
  return t;
}

/** CancelTask (§5.6). @param {any} params */
function cancelTask(params) {
  const t = taskOf(params);
  if (TERMINAL.has(t.state)) throw new RPCError(-32002, `task ${t.id} is ${t.state}`);
  t.state = 'TASK_STATE_CANCELED';
  t.timestamp = now();
  if (t.answer) { const wake = t.answer; t.answer = undefined; wake(''); }
  log(`task ${t.id} (a2ad task ${t.a2adTaskId}) canceled: no more events for it`);
  return taskView(t);
}

/** One request on the RPC subject (§5, §8). @param {import('@nats-io/transport-node').Msg} m */
function serve(m) {
  let id = '';
  /** @type {any} */
  let reply;
  try {
    let req;
    try { req = JSON.parse(m.string()); } catch { throw new RPCError(-32700, 'the body is not JSON'); }
    if (req === null || typeof req !== 'object' || req.jsonrpc !== '2.0' || typeof req.id !== 'string' || !req.id || typeof req.method !== 'string') {
      throw new RPCError(-32600, 'not a JSON-RPC 2.0 request with a string id and a method');
    }
    id = req.id;
    const version = m.headers?.get('A2A-Version') ?? ''; // case-insensitive lookup (§4)
    if (!/^1(\.\d+)?$/.test(version)) throw new RPCError(-32009, `A2A-Version ${version || '(none)'} not supported; this binding speaks 1.0`);
    const p = req.params;
    switch (req.method) {
      case 'SendMessage': reply = sendMessage(p, m.headers?.get('traceparent') || undefined); break;
      case 'GetTask':
        if (p?.id === LIVENESS_ID) throw new RPCError(-32001, 'task not found'); // §5.7, logged at no level
        reply = taskView(taskOf(p)); break;
      case 'CancelTask': reply = cancelTask(p); break;
      default: throw new RPCError(-32601, `method ${req.method} not found`);
    }
    reply = { jsonrpc: '2.0', id, result: reply };
  } catch (err) {
    if (!(err instanceof RPCError)) log(`internal error: ${err?.stack ?? err}`);
    const code = err instanceof RPCError ? err.code : -32603;
    reply = { jsonrpc: '2.0', id, error: { code, message: String(err?.message ?? err) } };
  }
  const h = headers();
  h.set('A2A-Version', VERSION);
  m.respond(JSON.stringify(reply), { headers: h });
}

// §3.2: replicas share the RPC subject in a queue group.
nc.subscribe(rpcSubject, { queue: 'ts-review-agent', callback: (err, m) => { if (!err) serve(m); } });
await nc.flush();
log(`serving ${rpcSubject}`);

// §9: register (card bytes spliced in), every second until answered; after
// rate_limited once retryAfterSeconds have passed. Again after a reconnect.
let registering = false;
async function register() {
  if (registering) return;
  registering = true;
  const body = `{"agentId":${JSON.stringify(agentId)},"card":${cardText}}`;
  const h = headers();
  h.set('Authorization', `Bearer ${credential}`);
  h.set('A2A-Version', VERSION);
  try {
    while (!stopping) {
      try {
        const r = (await nc.request('a2a.registry.register', body, { headers: h, timeout: 2000 })).json();
        if (r.code === 'rate_limited') {
          log(`registration rate limited: retrying in ${r.retryAfterSeconds} s`);
          await sleep(Math.max(1, Number(r.retryAfterSeconds) || 1) * 1000);
          continue;
        }
        if (r.status) log(`registered: status ${r.status} fingerprint ${r.fingerprint}`);
        else log(`registration refused: ${r.code}: ${r.error}`);
        return;
      } catch (err) {
        log(`registration not answered (${err?.message ?? err}); retrying in 1 s`);
        await sleep(1000);
      }
    }
  } finally { registering = false; }
}
register();
(async () => {
  for await (const s of nc.status()) {
    if (s.type === 'reconnect') { log('reconnected: registering again'); register(); }
    else if (s.type === 'disconnect') log('disconnected');
  }
})();

for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, async () => {
    stopping = true;
    log(`${sig}: draining`);
    await nc.drain().catch(() => {});
    process.exit(0);
  });
}
await nc.closed();
