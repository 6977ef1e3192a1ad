// Client-compatibility tests for switchyard with the Codex CLI (`@openai/codex`, pinned in
// package.json) run as `codex exec` against switchyard as a custom model provider with
// `wire_api = "responses"`, default features, in front of the scripted fake upstream.
//
// What Codex 0.169.0 does (recorded through a logging proxy; request bodies in
// requests-0.169.0.json here):
// * one `POST /v1/responses` per model turn, nothing else (no GET /v1/models); `stream: true`,
//   `store: false`, no `instructions` (its system prompt is a `developer` message in `input`),
//   `include: ["reasoning.encrypted_content"]`, `reasoning: {summary: "auto"}` (or
//   `{effort}` and `text: {verbosity}` for a model of its catalog), `prompt_cache_key`,
//   `tool_choice: "auto"`, `parallel_tool_calls: true` and `client_metadata` (ids of the session
//   and turn); input messages carry Codex's own ids (`msg_<uuid>`);
// * tools: functions `exec_command` (its shell: `{"cmd": …}`), `write_stdin`,
//   `request_user_input`, `view_image`, `get_goal`, `create_goal`, `update_goal`; a `namespace`
//   tool `multi_agent_v1` (functions `spawn_agent`, `send_input`, `wait_agent`, `close_agent`,
//   `resume_agent`) and hosted `{"type": "web_search", "external_web_access": false}`. With
//   gpt-5.5 of its catalog it adds the custom tool `apply_patch` (a lark grammar `format`) and
//   `{"type": "tool_search", "execution": "client"}`, and leaves the namespace out. Its other
//   catalog models (gpt-5.6-*, gpt-6-*: `use_responses_lite`, `tool_mode: code_mode_only`) use
//   "Responses lite": no `tools` key but a first input item `{"type": "additional_tools",
//   "id": "at_…", "role": "developer", "tools": [namespaces]}` (namespace `functions`: the
//   custom tool `exec`, `wait`, `request_user_input`, `request_user_input_async`; `clock`;
//   `collaboration`), header `x-openai-internal-codex-responses-lite: true`,
//   `reasoning: {effort, context: "all_turns"}`, `parallel_tool_calls: false`. Its shell there
//   is `exec`: JavaScript source (a lark grammar: an optional `// @exec: {…}` pragma line, then
//   the source) run in a V8 isolate with its other tools on `tools` (`tools.exec_command({cmd})`)
//   and `text(…)` for the output (a nested `exec_command` shows in `--json` as a
//   `command_execution`). Switchyard returns the call as a `custom_tool_call` with
//   `namespace: "functions"` (Codex 0.169.0 runs it without the namespace too: tried against a
//   stub server), and Codex replays it with a `custom_tool_call_output` whose output is
//   input_text parts ("Script completed\nWall time …\nOutput:\n", then the text);
// * a tool call: Codex runs it and continues by REPLAYING the whole history, never with
//   `previous_response_id`: the `function_call` item as switchyard sent it (`fc_` id, `status`)
//   then `{"type": "function_call_output", "id": "fco_<uuid>", "call_id", "output"}` (for
//   `apply_patch`: `custom_tool_call` and `custom_tool_call_output` with a `ctco_<uuid>` id);
// * from the stream it needs `response.output_item.done` (the items it shows and replays) and
//   `response.completed` (without it: "stream disconnected before completion"); its usage is
//   what `codex exec` reports as tokens used. A call to a function of a namespace must carry
//   `namespace` on the `function_call` item, else Codex answers "unsupported call: <name>".
//
// Run: npm ci && node --test test.mjs (binaries: target/release/{switchyard,fake-llm}, or
// SWITCHYARD_BIN / FAKE_LLM_BIN; CODEX_COMPAT_SANDBOX overrides `--sandbox workspace-write`).
// Starts its own fake-llm and switchyard (../node/harness.mjs); nothing leaves the machine.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, beforeEach, test } from 'node:test';

import { MODEL, Services, textTurn, toolCallTurn } from '../node/harness.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const CODEX_PACKAGE = path.join(HERE, 'node_modules', '@openai', 'codex');
const CODEX_JS = path.join(CODEX_PACKAGE, 'bin', 'codex.js');
const CODEX_VERSION = (() => {
  try {
    return JSON.parse(readFileSync(path.join(CODEX_PACKAGE, 'package.json'), 'utf8')).version;
  } catch {
    throw new Error(`@openai/codex is not installed: run 'npm ci' in ${HERE}`);
  }
})();
const SANDBOX = process.env.CODEX_COMPAT_SANDBOX || 'workspace-write';
/**
 * Codex's homes and workspaces (ignored by git; removed after a run that passed), one folder
 * per process so that runs side by side do not remove each other's.
 */
const WORK = path.join(HERE, '.work', `pid-${process.pid}`);
const RUN_TIMEOUT_MS = 90_000;
/** The shell command the scripted model runs, and what it prints (so it must really run). */
const COMMAND = 'echo codex-compat-$((6*7))';
const COMMAND_OUTPUT = 'codex-compat-42';

const services = new Services();
let proxy;
let failed = false;
/** Codex's requests to switchyard (through the recording proxy) with switchyard's answers. */
const wire = [];
/** What the last `codex exec` printed, shown when a test fails. */
let lastRun = null;

function check(name, fn) {
  test(name, async (t) => {
    try {
      await fn(t);
    } catch (error) {
      failed = true;
      throw error;
    }
  });
}

/**
 * A pass-through HTTP proxy in front of switchyard that records each request body and the
 * answer (status and body text, SSE included). It changes nothing.
 */
function startRecordingProxy(target) {
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const entry = { method: req.method, path: req.url, headers: req.headers, body: body.toString('utf8') };
      wire.push(entry);
      const headers = { ...req.headers };
      delete headers.host;
      const upstream = http.request(new URL(req.url, target), { method: req.method, headers }, (answer) => {
        entry.status = answer.statusCode;
        res.writeHead(answer.statusCode, answer.headers);
        const parts = [];
        answer.on('data', (chunk) => {
          parts.push(chunk);
          res.write(chunk);
        });
        answer.on('end', () => {
          entry.answer = Buffer.concat(parts).toString('utf8');
          res.end();
        });
        answer.on('error', () => res.destroy());
      });
      upstream.on('error', (error) => {
        entry.status = 502;
        entry.answer = String(error);
        res.writeHead(502).end(String(error));
      });
      upstream.end(body);
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

/**
 * A private CODEX_HOME (and HOME) whose config.toml points Codex at the recording proxy. Not
 * under /tmp: there Codex refuses to create its helper binaries ("could not create PATH
 * aliases"), which a user's ~/.codex has.
 */
function codexHome(baseURL) {
  mkdirSync(WORK, { recursive: true });
  const root = mkdtempSync(path.join(WORK, 'run-'));
  const home = path.join(root, 'home');
  const codexHomeDir = path.join(root, 'codex-home');
  const workspace = path.join(root, 'workspace');
  for (const dir of [home, codexHomeDir, workspace]) mkdirSync(dir);
  // Retries off so that a refused request fails at once; analytics and the plugin marketplace
  // sync (git ls-remote of a GitHub repository) are the only things that reach out to the
  // network in `codex exec` (seen with strace). Everything else is Codex's default.
  writeFileSync(
    path.join(codexHomeDir, 'config.toml'),
    `model = ${JSON.stringify(MODEL)}
model_provider = "switchyard"
check_for_update_on_startup = false

[model_providers.switchyard]
name = "switchyard"
base_url = ${JSON.stringify(`${baseURL}/v1`)}
wire_api = "responses"
env_key = "SWITCHYARD_API_KEY"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[features]
plugins = false
`,
  );
  return { home, codexHome: codexHomeDir, workspace };
}

/** Runs the Codex CLI (`codex <args>`) with the private homes; resolves with what it printed. */
function codex(dirs, args) {
  const env = Object.fromEntries(
    Object.entries(process.env).filter(
      ([k]) => !k.startsWith('CODEX_') && !k.startsWith('OPENAI_') && !k.startsWith('SWITCHYARD'),
    ),
  );
  Object.assign(env, { HOME: dirs.home, CODEX_HOME: dirs.codexHome, SWITCHYARD_API_KEY: services.apiKey, NO_COLOR: '1' });
  return new Promise((resolve, reject) => {
    // Its own process group: on a timeout the native binary and its shells go too.
    const child = spawn(process.execPath, [CODEX_JS, ...args], {
      cwd: dirs.workspace,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }, RUN_TIMEOUT_MS);
    child.once('error', reject);
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      lastRun = { args, code, signal, timedOut, stdout, stderr };
      resolve(lastRun);
    });
  });
}

/** `codex exec` with the flags a CI job would use; `--strict-config` catches renamed keys. */
function codexExec(dirs, prompt, { json = false, config = [] } = {}) {
  const args = ['exec', '--skip-git-repo-check', '--strict-config', '--sandbox', SANDBOX, '--color', 'never'];
  if (json) args.push('--json');
  for (const value of config) args.push('-c', value);
  return codex(dirs, [...args, prompt]);
}

/** What a failed assertion shows: the run's exit, stderr and stdout, and switchyard's answers. */
function explain(run) {
  const answers = wire
    .map((e) => `${e.method} ${e.path} -> ${e.status}${e.status === 200 ? '' : `: ${e.answer}`}`)
    .join('\n');
  return (
    `codex ${run.args.join(' ')}\nexit ${run.code}${run.signal ? ` (${run.signal})` : ''}` +
    `${run.timedOut ? ' after the timeout' : ''}\n--- stderr ---\n${run.stderr.slice(-4000)}\n` +
    `--- stdout ---\n${run.stdout.slice(-4000)}\n--- requests to switchyard ---\n${answers}`
  );
}

function assertSucceeded(run) {
  assert.equal(run.code, 0, `codex exec failed\n${explain(run)}`);
  for (const entry of wire) {
    assert.equal(entry.status, 200, `switchyard refused a request of Codex\n${explain(run)}`);
  }
}

/** The JSONL events of `codex exec --json`. */
function events(run) {
  return run.stdout
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line));
}

/** The text of a chat message (a string, or text parts). */
function text(message) {
  const { content } = message;
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((part) => part.text ?? '').join('');
  return '';
}

/** The functions Codex declared, namespaces flattened, and the names of its hosted tools. */
function declaredTools(body) {
  const functions = [];
  const hosted = [];
  for (const tool of body.tools ?? []) {
    if (tool.type === 'namespace') functions.push(...tool.tools.map((t) => t.name));
    else if (['function', 'custom'].includes(tool.type)) functions.push(tool.name);
    else hosted.push(tool.type);
  }
  return { functions: functions.sort(), hosted };
}

function codexRequests() {
  return wire.filter((e) => e.method === 'POST' && e.path === '/v1/responses').map((e) => JSON.parse(e.body));
}

before(async () => {
  try {
    await services.start();
    proxy = await startRecordingProxy(services.baseURL);
  } catch (error) {
    failed = true;
    throw error;
  }
});

beforeEach(async () => {
  await services.resetFake();
  wire.length = 0;
  lastRun = null;
});

after(async () => {
  proxy?.close();
  await services.stop();
  if (failed) console.error(`${services.logs()}\n(Codex's homes and workspaces are kept in ${WORK})`);
  else {
    rmSync(WORK, { recursive: true, force: true });
    try {
      rmdirSync(path.dirname(WORK)); // unless another run still uses it
    } catch {
      // not empty
    }
  }
});

check(`codex ${CODEX_VERSION} exec prints the model's text answer`, async () => {
  await services.script(textTurn(['Hello', ' from', ' switchyard.']));
  const dirs = codexHome(`http://127.0.0.1:${proxy.address().port}`);

  const run = await codexExec(dirs, 'say hello');

  assertSucceeded(run);
  assert.equal(run.stdout.trim(), 'Hello from switchyard.', explain(run));
  assert.equal(wire.length, 1, `Codex made one request\n${explain(run)}`);
  const [request] = codexRequests();
  assert.equal(request.stream, true);

  const upstream = await services.upstreamRequests();
  assert.equal(upstream.length, 1);
  const { messages, tools } = upstream[0];
  assert.equal(messages.at(-1).role, 'user');
  assert.equal(text(messages.at(-1)), 'say hello');
  assert.ok(
    messages.some((m) => ['system', 'developer'].includes(m.role) && text(m).includes('Codex CLI')),
    "Codex's developer message (its system prompt) reached the model",
  );
  // SPEC §6: namespace tools flattened into their functions; hosted tools (web_search) left out.
  const declared = declaredTools(request);
  assert.deepEqual((tools ?? []).map((t) => t.function.name).sort(), declared.functions);
  assert.ok(declared.functions.includes('exec_command'));
});

check('codex exec runs the shell command the model calls and gives the model its output', async () => {
  await services.script(
    toolCallTurn([['call_codex_shell', 'exec_command', JSON.stringify({ cmd: COMMAND })]]),
    textTurn(['The', ' command', ' printed', ` ${COMMAND_OUTPUT}.`], { promptTokens: 20, completionTokens: 6 }),
  );
  const dirs = codexHome(`http://127.0.0.1:${proxy.address().port}`);

  const run = await codexExec(dirs, 'run the command', { json: true });

  assertSucceeded(run);
  const [first] = codexRequests();
  assert.ok(declaredTools(first).functions.includes('exec_command'), 'Codex offers its shell as exec_command');
  const items = events(run)
    .filter((e) => e.type === 'item.completed')
    .map((e) => e.item);
  const command = items.find((item) => item.type === 'command_execution');
  assert.ok(command, `Codex ran a command\n${explain(run)}`);
  assert.match(command.command, /echo codex-compat-/);
  assert.equal(command.exit_code, 0);
  assert.match(command.aggregated_output, new RegExp(COMMAND_OUTPUT));
  const answer = items.filter((item) => item.type === 'agent_message').at(-1);
  assert.equal(answer?.text, `The command printed ${COMMAND_OUTPUT}.`, explain(run));
  const completed = events(run).find((e) => e.type === 'turn.completed');
  assert.equal(completed?.usage?.input_tokens, 10 + 20, 'the usage of both model turns');
  assert.equal(completed?.usage?.output_tokens, 5 + 6);
  assert.equal(wire.length, 2, `one request per model turn\n${explain(run)}`);

  const upstream = await services.upstreamRequests();
  assert.equal(upstream.length, 2);
  const messages = upstream[1].messages;
  const call = messages.find((m) => m.role === 'assistant' && m.tool_calls?.length);
  assert.deepEqual(
    call.tool_calls.map((c) => [c.id, c.function.name, JSON.parse(c.function.arguments)]),
    [['call_codex_shell', 'exec_command', { cmd: COMMAND }]],
  );
  const output = messages.find((m) => m.role === 'tool');
  assert.equal(output?.tool_call_id, 'call_codex_shell');
  assert.match(text(output), new RegExp(COMMAND_OUTPUT), "the command's output reached the model");
});

check('codex exec shows the reasoning the model streams, and gives it back sealed on its next request', async () => {
  const thought = 'I should run the command first.';
  const call = toolCallTurn([['call_codex_think', 'exec_command', JSON.stringify({ cmd: COMMAND })]]);
  call.steps.unshift({ type: 'reasoning', text: thought });
  await services.script(call, textTurn(['Done.']));
  const dirs = codexHome(`http://127.0.0.1:${proxy.address().port}`);

  const run = await codexExec(dirs, 'run the command', { json: true });

  assertSucceeded(run);
  const items = events(run)
    .filter((e) => e.type === 'item.completed')
    .map((e) => e.item);
  const reasoning = items.find((item) => item.type === 'reasoning');
  assert.ok(reasoning, `Codex shows a reasoning item\n${explain(run)}`);
  assert.match(reasoning.text, /I should run the command first\./);
  assert.ok(
    items.indexOf(reasoning) < items.findIndex((item) => item.type === 'command_execution'),
    'the reasoning comes before the call it led to',
  );
  // Codex asks for `reasoning.summary` and `reasoning.encrypted_content` with `store: false`:
  // the item it received streamed as a summary, and it replays it with the sealed blob.
  const [first, second] = codexRequests();
  assert.equal(first.reasoning?.summary, 'auto');
  assert.deepEqual(first.include, ['reasoning.encrypted_content']);
  const replayed = second.input.find((item) => item.type === 'reasoning');
  assert.ok(replayed, `Codex replays the reasoning item\n${explain(run)}`);
  assert.match(replayed.encrypted_content ?? '', /^sy1\./);
  assert.equal(replayed.summary?.[0]?.text, thought);
});

check('codex exec with a model of its catalog applies the patch the model sends to its custom apply_patch tool', async () => {
  const dirs = codexHome(`http://127.0.0.1:${proxy.address().port}`);
  // The metadata of a model Codex knows (gpt-5.5 in 0.169.0), under the name switchyard routes:
  // Codex then sends what it sends for its own models (apply_patch as a custom tool with a lark
  // grammar, tool_search, text.verbosity). The catalog's other models use "Responses lite"
  // (`use_responses_lite`: no `tools`, an `additional_tools` input item): tests below.
  const listed = await codex(dirs, ['debug', 'models']);
  assert.equal(listed.code, 0, explain(listed));
  const { models } = JSON.parse(listed.stdout);
  const known = models.find((m) => !m.use_responses_lite && m.apply_patch_tool_type === 'freeform');
  assert.ok(known, 'a catalog model with the freeform apply_patch tool and the full Responses API');
  const catalog = path.join(dirs.codexHome, 'catalog.json');
  writeFileSync(catalog, JSON.stringify({ models: [{ ...known, slug: MODEL, display_name: MODEL }] }));
  const patch = '*** Begin Patch\n*** Add File: hello.txt\n+hello from apply_patch\n*** End Patch\n';
  await services.script(
    toolCallTurn([['call_codex_patch', 'apply_patch', JSON.stringify({ input: patch })]]),
    textTurn(['Patched.']),
  );

  const run = await codexExec(dirs, 'create hello.txt', { config: [`model_catalog_json=${JSON.stringify(catalog)}`] });

  assertSucceeded(run);
  assert.equal(run.stdout.trim(), 'Patched.', explain(run));
  assert.equal(readFileSync(path.join(dirs.workspace, 'hello.txt'), 'utf8'), 'hello from apply_patch\n');
  const [first] = codexRequests();
  assert.equal(first.tools.find((t) => t.name === 'apply_patch')?.type, 'custom');

  const upstream = await services.upstreamRequests();
  assert.equal(upstream.length, 2);
  // SPEC §6: a custom tool is a function with one string argument `input` for the model.
  const offered = upstream[0].tools.find((t) => t.function.name === 'apply_patch');
  assert.deepEqual(Object.keys(offered.function.parameters.properties), ['input']);
  const output = upstream[1].messages.find((m) => m.role === 'tool');
  assert.equal(output?.tool_call_id, 'call_codex_patch');
  assert.match(text(output), /A hello\.txt/, "apply_patch's report reached the model");
  rmSync(path.join(dirs.workspace, 'hello.txt'));
});

/**
 * A catalog for `model_catalog_json`: the metadata of a "Responses lite" model of Codex's own
 * catalog (gpt-5.6-*, gpt-6-* in 0.169.0: `use_responses_lite`, `tool_mode: code_mode_only`)
 * under the name switchyard routes. Codex then sends no `tools` but an `additional_tools`
 * input item, whose namespace `functions` holds its shell as the custom tool `exec`.
 */
async function liteCatalog(dirs) {
  const listed = await codex(dirs, ['debug', 'models']);
  assert.equal(listed.code, 0, explain(listed));
  const { models } = JSON.parse(listed.stdout);
  const lite = models.find((m) => m.use_responses_lite && m.tool_mode === 'code_mode_only' && m.visibility === 'list');
  assert.ok(lite, 'a listed catalog model that uses Responses lite and code mode');
  const catalog = path.join(dirs.codexHome, 'catalog.json');
  writeFileSync(catalog, JSON.stringify({ models: [{ ...lite, slug: MODEL, display_name: MODEL }] }));
  return [`model_catalog_json=${JSON.stringify(catalog)}`];
}

/** The `additional_tools` input item of a Codex request (Responses lite), checked for shape. */
function additionalTools(body, run) {
  assert.equal(body.tools, undefined, `no tools key in Responses lite\n${explain(run)}`);
  const [first] = body.input;
  assert.equal(first?.type, 'additional_tools', `the first input item declares the tools\n${explain(run)}`);
  assert.match(first.id, /^at_/);
  return first;
}

check('codex exec with a Responses-lite model of its catalog prints the text answer, its additional_tools offered to the model', async () => {
  const dirs = codexHome(`http://127.0.0.1:${proxy.address().port}`);
  const config = await liteCatalog(dirs);
  await services.script(textTurn(['Hello', ' from', ' switchyard', ' (lite).']));

  const run = await codexExec(dirs, 'say hello', { config });

  assertSucceeded(run);
  assert.equal(run.stdout.trim(), 'Hello from switchyard (lite).', explain(run));
  assert.equal(wire.length, 1, `Codex made one request\n${explain(run)}`);
  assert.equal(wire[0].headers['x-openai-internal-codex-responses-lite'], 'true');
  const [request] = codexRequests();
  assert.equal(request.parallel_tool_calls, false);
  assert.equal(request.reasoning?.context, 'all_turns');
  const item = additionalTools(request, run);
  const declared = declaredTools(item);
  const exec = item.tools
    .find((t) => t.type === 'namespace' && t.name === 'functions')
    ?.tools.find((t) => t.name === 'exec');
  assert.equal(exec?.type, 'custom', 'the shell of Responses lite is the custom tool functions.exec');
  assert.ok(declared.functions.includes('wait') && declared.functions.includes('request_user_input'));

  const upstream = await services.upstreamRequests();
  assert.equal(upstream.length, 1);
  const { messages, tools } = upstream[0];
  assert.equal(text(messages.at(-1)), 'say hello');
  // The additional_tools item declares tools; it is no message of the conversation.
  assert.ok(!messages.some((m) => text(m).includes(exec.description.split('\n')[0])));
  // SPEC §6: its namespaces flattened into their functions; a custom tool is a function with
  // one string argument `input`.
  assert.deepEqual((tools ?? []).map((t) => t.function.name).sort(), declared.functions);
  const offered = tools.find((t) => t.function.name === 'exec');
  assert.deepEqual(Object.keys(offered.function.parameters.properties), ['input']);
  assert.equal(offered.function.parameters.properties.input.type, 'string');
});

check('codex exec with a Responses-lite model runs the shell command the model sends to its custom exec tool', async () => {
  const dirs = codexHome(`http://127.0.0.1:${proxy.address().port}`);
  const config = await liteCatalog(dirs);
  // `exec` takes JavaScript source (its lark grammar: an optional `// @exec: {…}` pragma line,
  // then any source) run in a V8 isolate, with Codex's other tools on `tools` (the shell is
  // `tools.exec_command({cmd})`) and `text(…)` appending to the call's output.
  const script =
    `const result = await tools.exec_command({ cmd: ${JSON.stringify(COMMAND)} });\n` +
    'text(result.output);\n';
  await services.script(
    toolCallTurn([['call_codex_exec', 'exec', JSON.stringify({ input: script })]]),
    textTurn(['The', ' script', ' printed', ` ${COMMAND_OUTPUT}.`], { promptTokens: 20, completionTokens: 6 }),
  );

  const run = await codexExec(dirs, 'run the command', { json: true, config });

  assertSucceeded(run);
  const items = events(run)
    .filter((e) => e.type === 'item.completed')
    .map((e) => e.item);
  // The nested exec_command shows as a command Codex ran.
  const command = items.find((item) => item.type === 'command_execution');
  assert.ok(command, `Codex ran a command\n${explain(run)}`);
  assert.match(command.command, /echo codex-compat-/);
  assert.equal(command.exit_code, 0);
  assert.match(command.aggregated_output, new RegExp(COMMAND_OUTPUT));
  const answer = items.filter((item) => item.type === 'agent_message').at(-1);
  assert.equal(answer?.text, `The script printed ${COMMAND_OUTPUT}.`, explain(run));
  const completed = events(run).find((e) => e.type === 'turn.completed');
  assert.equal(completed?.usage?.input_tokens, 10 + 20, 'the usage of both model turns');
  assert.equal(completed?.usage?.output_tokens, 5 + 6);
  assert.equal(wire.length, 2, `one request per model turn\n${explain(run)}`);

  // Codex replays the call as switchyard sent it (a custom_tool_call in namespace `functions`)
  // with the script's output.
  const [, second] = codexRequests();
  additionalTools(second, run);
  const call = second.input.find((i) => i.type === 'custom_tool_call');
  assert.deepEqual(
    call && { call_id: call.call_id, name: call.name, namespace: call.namespace, input: call.input },
    { call_id: 'call_codex_exec', name: 'exec', namespace: 'functions', input: script },
    explain(run),
  );
  const replayed = second.input.find((i) => i.type === 'custom_tool_call_output');
  assert.equal(replayed?.call_id, 'call_codex_exec');
  assert.match(text({ content: replayed.output }), new RegExp(COMMAND_OUTPUT), "the script's output, as Codex replays it");

  const upstream = await services.upstreamRequests();
  assert.equal(upstream.length, 2);
  const messages = upstream[1].messages;
  const assistant = messages.find((m) => m.role === 'assistant' && m.tool_calls?.length);
  assert.deepEqual(
    assistant.tool_calls.map((c) => [c.id, c.function.name, JSON.parse(c.function.arguments)]),
    [['call_codex_exec', 'exec', { input: script }]],
  );
  const output = messages.find((m) => m.role === 'tool');
  assert.equal(output?.tool_call_id, 'call_codex_exec');
  assert.match(text(output), new RegExp(COMMAND_OUTPUT), "the command's output reached the model");
});
