// Starts fake-llm and switchyard as child processes (logs captured to files) and talks to the
// fake's control API. Same environment contract as tests/compat/python/harness.py.
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const MODEL = 'gpt-4o-mini';
const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const STARTUP_TIMEOUT_MS = 60_000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function binary(envName, name) {
  const file = process.env[envName] || path.join(REPO_ROOT, 'target', 'release', name);
  if (!existsSync(file)) throw new Error(`${name} binary not found at ${file} (build it, or set ${envName})`);
  return file;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

export function tail(file, lines = 200) {
  if (!existsSync(file)) return '(no log file)';
  const kept = readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n');
  return kept || '(empty)';
}

/** A scripted model turn that streams `chunks` as content deltas (each after `delayMs`) and stops. */
export function textTurn(chunks, { promptTokens = 5, completionTokens = 2, delayMs = 0 } = {}) {
  return {
    steps: [
      ...chunks.flatMap((text) => [...(delayMs ? [{ type: 'delay', ms: delayMs }] : []), { type: 'text', text }]),
      { type: 'finish', reason: 'stop' },
      { type: 'usage', prompt_tokens: promptTokens, completion_tokens: completionTokens },
    ],
  };
}

/** SPEC §6: the compiled-in tool server, executed by switchyard without asking the client. */
export const BUILTIN_SERVER = Object.freeze({ type: 'mcp', server_label: 'builtin', require_approval: 'never' });

/**
 * A scripted model turn that calls tools, given as [call id, name, JSON arguments]: the calls
 * are streamed one after the other, each argument string in two chunks, then `tool_calls`.
 * Same as `tool_call_turn` in tests/compat/python/harness.py.
 */
export function toolCallTurn(calls, { promptTokens = 10, completionTokens = 5 } = {}) {
  return {
    steps: [
      ...calls.flatMap(([id, name, args], index) => {
        const half = Math.floor(args.length / 2);
        return [
          { type: 'tool_call', index, id, name, arguments: args.slice(0, half) },
          { type: 'tool_args', index, arguments: args.slice(half) },
        ];
      }),
      { type: 'finish', reason: 'tool_calls' },
      { type: 'usage', prompt_tokens: promptTokens, completion_tokens: completionTokens },
    ],
  };
}

async function control(url, method, body) {
  const response = await fetch(url, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${url} -> ${response.status}: ${text}`);
  return text ? JSON.parse(text) : null;
}

export class Services {
  constructor() {
    this.workdir = mkdtempSync(path.join(tmpdir(), 'switchyard-compat-node-'));
    this.fakeLog = path.join(this.workdir, 'fake-llm.log');
    this.switchyardLog = path.join(this.workdir, 'switchyard.log');
    this.children = [];
    this.fakeUrl = '';
    this.baseURL = '';
    /** This instance's API key (every /v1 request needs one), made as an operator would. */
    this.apiKey = '';
  }

  #spawn(argv, log, env) {
    const fd = openSync(log, 'w');
    try {
      const child = spawn(argv[0], argv.slice(1), { cwd: REPO_ROOT, env, stdio: ['ignore', fd, fd] });
      const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
      this.children.push({ child, exited });
      return child;
    } finally {
      closeSync(fd);
    }
  }

  logs() {
    return `--- switchyard log (${this.switchyardLog}) ---\n${tail(this.switchyardLog)}\n` +
      `--- fake-llm log (${this.fakeLog}) ---\n${tail(this.fakeLog)}`;
  }

  async start() {
    const env = Object.fromEntries(
      Object.entries(process.env).filter(([k]) => !k.startsWith('SWITCHYARD__') && !k.startsWith('OPENAI_')),
    );
    env.RUST_LOG ??= 'info';
    env.RUST_BACKTRACE ??= '1';
    const deadline = Date.now() + STARTUP_TIMEOUT_MS;

    const fake = this.#spawn([binary('FAKE_LLM_BIN', 'fake-llm'), '--listen', '127.0.0.1:0'], this.fakeLog, env);
    while (!this.fakeUrl) {
      const match = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(tail(this.fakeLog));
      if (match) this.fakeUrl = match[1];
      else if (fake.exitCode !== null) throw new Error(`fake-llm exited (${fake.exitCode}) before listening\n${this.logs()}`);
      else if (Date.now() > deadline) throw new Error(`fake-llm did not print its address in time\n${this.logs()}`);
      else await sleep(50);
    }

    const port = await freePort();
    Object.assign(env, {
      SWITCHYARD__SERVER__HOST: '127.0.0.1',
      SWITCHYARD__SERVER__PORT: String(port),
      SWITCHYARD__DATABASE__URL: `sqlite://${this.workdir}/s.db`,
      SWITCHYARD__LLM__BASE_URL: `${this.fakeUrl}/v1`,
      SWITCHYARD__LLM__API_KEY: 'test',
      // Scripted upstream failures are what the tests look at: no retries.
      SWITCHYARD__LLM__RETRIES: '0',
    });
    // The database first, as an operator makes it (`keys` never makes one), then a key.
    const migrated = spawnSync(binary('SWITCHYARD_BIN', 'switchyard'), ['migrate'], {
      cwd: REPO_ROOT,
      env,
      encoding: 'utf8',
      timeout: STARTUP_TIMEOUT_MS,
    });
    if (migrated.status !== 0) throw new Error(`switchyard migrate failed: ${migrated.stderr}`);
    const made = spawnSync(binary('SWITCHYARD_BIN', 'switchyard'), ['keys', 'create', '--tenant', 'compat', '--name', 'suite'], {
      cwd: REPO_ROOT,
      env,
      encoding: 'utf8',
      timeout: STARTUP_TIMEOUT_MS,
    });
    if (made.status !== 0) throw new Error(`switchyard keys create failed: ${made.stderr}`);
    this.apiKey = made.stdout.trim();
    const switchyard = this.#spawn([binary('SWITCHYARD_BIN', 'switchyard')], this.switchyardLog, env);
    this.baseURL = `http://127.0.0.1:${port}`;
    for (;;) {
      try {
        const response = await fetch(`${this.baseURL}/readyz`);
        await response.arrayBuffer();
        if (response.status === 200) return;
      } catch {
        // not listening yet
      }
      if (switchyard.exitCode !== null) throw new Error(`switchyard exited (${switchyard.exitCode}) before ready\n${this.logs()}`);
      if (Date.now() > deadline) throw new Error(`switchyard did not answer GET /readyz with 200 in time\n${this.logs()}`);
      await sleep(50);
    }
  }

  async stop() {
    for (const { child } of this.children.toReversed()) {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    }
    for (const { child, exited } of this.children.toReversed()) {
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    }
    this.children = [];
  }

  script(...turns) {
    return control(`${this.fakeUrl}/control/turns`, 'POST', turns);
  }

  upstreamRequests() {
    return control(`${this.fakeUrl}/control/requests`, 'GET');
  }

  resetFake() {
    return control(`${this.fakeUrl}/control/reset`, 'POST');
  }
}
