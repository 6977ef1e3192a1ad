// Client-compatibility tests for switchyard with the Vercel AI SDK (`ai` + `@ai-sdk/openai`,
// `openai.responses(model)` with stock settings: `store` left at its default, so the SDK replays
// earlier turns with `item_reference`s and never sends `previous_response_id`).
//
// Every scenario runs with `generateText` and with `streamText`. Each test also pins what the
// pinned SDK version sends (the request bodies are recorded by a `fetch` wrapper), so a change of
// the SDK's wire behaviour shows up here as well as a change of switchyard's.
//
//   cd tests/compat/vercel && npm ci && node --test --test-reporter=spec test.mjs
//
// Binaries: target/release/{switchyard,fake-llm}, or SWITCHYARD_BIN / FAKE_LLM_BIN (../node/harness.mjs).
// The SDK declares Node >= 22 (engines); it installs with a warning and passes on Node 20.
import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, isStepCount, jsonSchema, streamText, tool } from 'ai';

import { MODEL, Services, textTurn, toolCallTurn } from '../node/harness.mjs';

const MODES = ['generateText', 'streamText'];
/** What the SDK's MCP tool needs (it refuses a tool without serverUrl, connectorId or tunnelId). */
const MCP_SERVER_URL = 'https://mcp.example.com/builtin';

const services = new Services();
let failed = false;

before(async () => {
  try {
    await services.start();
  } catch (error) {
    failed = true;
    throw error;
  }
});

beforeEach(async () => {
  await services.resetFake();
});

after(async () => {
  await services.stop();
  if (failed) console.error(services.logs());
});

/** The failed leaves of a zod error, skipping union branches whose `type` literal did not match. */
function zodIssues(issues, path = []) {
  const leaves = [];
  for (const issue of issues) {
    const at = [...path, ...issue.path];
    if (issue.code === 'invalid_union') {
      for (const branch of issue.errors) {
        const otherType = branch.some((e) => e.code === 'invalid_value' && e.path.length === 1 && e.path[0] === 'type');
        if (!otherType) leaves.push(...zodIssues(branch, at));
      }
    } else {
      leaves.push(`${at.join('.') || '(root)'}: ${issue.message}`);
    }
  }
  return leaves;
}

/** An SDK error's message with its causes (a zod failure hides under "Invalid JSON response"). */
function explain(error) {
  const parts = [];
  for (let e = error; e; e = e.cause) {
    if (e.name === 'AI_TypeValidationError' && Array.isArray(e.cause?.issues)) {
      const what = [e.value?.type, e.value?.item?.type].filter(Boolean).join(' ') || 'response';
      parts.push(`${e.name}: the SDK rejected a ${what}:\n    ${zodIssues(e.cause.issues).join('\n    ')}`);
      break;
    }
    let part = `${e.name ?? 'Error'}: ${String(e.message ?? e)}`;
    if (e.statusCode >= 400) part += ` (HTTP ${e.statusCode}, param ${e.data?.error?.param ?? null})`;
    parts.push(part);
  }
  return parts.join('\n  caused by ');
}

/** A test that remembers it failed (to print the service logs) and explains SDK errors. */
function check(name, fn) {
  test(name, async (t) => {
    try {
      await fn(t);
    } catch (error) {
      failed = true;
      if (error instanceof assert.AssertionError) throw error;
      throw new Error(explain(error));
    }
  });
}

/** A provider whose requests to switchyard are recorded: `{method, url, body, status}`. */
function client() {
  const requests = [];
  const provider = createOpenAI({
    baseURL: `${services.baseURL}/v1`,
    apiKey: services.apiKey,
    fetch: async (url, init) => {
      const request = {
        method: init?.method ?? 'GET',
        url: String(url),
        body: typeof init?.body === 'string' ? JSON.parse(init.body) : undefined,
      };
      requests.push(request);
      const response = await fetch(url, init);
      request.status = response.status;
      return response;
    },
  });
  const responsesPosts = () => requests.filter((r) => r.method === 'POST' && r.url.endsWith('/v1/responses'));
  return { model: provider.responses(MODEL), provider, requests, responsesPosts };
}

/**
 * Runs one `generateText` or `streamText` call and returns `{text, steps, response, finishReason}`.
 * A stream error (which `streamText` reports to `onError` and otherwise only as a step with
 * `finishReason: "error"`) is thrown, so a rejected event fails the test with its zod message.
 */
async function run(mode, options) {
  if (mode === 'generateText') {
    const result = await generateText({ maxRetries: 0, ...options });
    return { text: result.text, steps: result.steps, response: result.response, finishReason: result.finishReason };
  }
  const errors = [];
  const result = streamText({ maxRetries: 0, ...options, onError: ({ error }) => errors.push(error) });
  let output;
  try {
    output = {
      text: await result.text,
      steps: await result.steps,
      response: await result.response,
      finishReason: await result.finishReason,
    };
  } catch (error) {
    throw errors[0] ?? error;
  }
  if (errors.length > 0) throw errors[0];
  return output;
}

/** `run`, but an error is returned instead of thrown (to assert on what was sent first). */
const attempt = (mode, options) => run(mode, options).catch((error) => error);

function rethrow(result) {
  if (result instanceof Error) throw result;
  return result;
}

/** The upstream chat messages of each request switchyard made, as `{role, content, ...}`. */
async function upstreamMessages() {
  return (await services.upstreamRequests()).map((request) => request.messages);
}

const userItem = (text) => ({ role: 'user', content: [{ type: 'input_text', text }] });

function mcpTool(provider, requireApproval) {
  return {
    builtin: provider.tools.mcp({ serverLabel: 'builtin', serverUrl: MCP_SERVER_URL, requireApproval }),
  };
}

const CALCULATOR_TURN = () => toolCallTurn([['call_c1', 'calculator', '{"expression":"6*7"}']]);

// ------------------------------------------------------------------------------------------------
// 1. A two-turn chat: the second turn replays the first answer as an item_reference.

for (const mode of MODES) {
  check(`[${mode}] a two-turn chat replays the first answer by item_reference`, async () => {
    await services.script(textTurn(['Hello', ' Ann']), textTurn(['Your name', ' is Ann']));
    const { model, responsesPosts } = client();
    const messages = [{ role: 'user', content: 'My name is Ann' }];

    const first = await run(mode, { model, messages });
    assert.equal(first.text, 'Hello Ann');
    const answerId = first.response.messages[0].content[0].providerOptions.openai.itemId;
    assert.match(answerId, /^msg_/);

    messages.push(...first.response.messages, { role: 'user', content: 'What is my name?' });
    const second = await attempt(mode, { model, messages });

    // What the SDK sends: the earlier answer by reference only.
    const posts = responsesPosts();
    assert.equal(posts.length, 2);
    assert.deepEqual(posts[1].body.input, [
      userItem('My name is Ann'),
      { type: 'item_reference', id: answerId },
      userItem('What is my name?'),
    ]);
    assert.equal(posts[1].body.previous_response_id, undefined);

    assert.equal(rethrow(second).text, 'Your name is Ann');
    assert.equal(second.finishReason, 'stop');
    const upstream = await upstreamMessages();
    assert.equal(upstream.length, 2);
    assert.deepEqual(
      upstream[1].map(({ role, content }) => ({ role, content })),
      [
        { role: 'user', content: 'My name is Ann' },
        { role: 'assistant', content: 'Hello Ann' },
        { role: 'user', content: 'What is my name?' },
      ],
    );
  });
}

// ------------------------------------------------------------------------------------------------
// 2. A client tool with `execute` over several steps: each step replays the whole history, with
//    the calls as full function_call items (not item_references) and their outputs.

function weatherTool(executed) {
  return {
    get_weather: tool({
      description: 'The weather in a city',
      inputSchema: jsonSchema({
        type: 'object',
        properties: { city: { type: 'string' } },
        required: ['city'],
        additionalProperties: false,
      }),
      execute: async ({ city }) => {
        executed.push(city);
        return { city, forecast: 'sunny' };
      },
    }),
  };
}

for (const mode of MODES) {
  check(`[${mode}] a tool with execute runs over several steps by replaying the history`, async () => {
    await services.script(
      toolCallTurn([['call_w1', 'get_weather', '{"city":"Paris"}']]),
      toolCallTurn([['call_w2', 'get_weather', '{"city":"Rome"}']]),
      textTurn(['Paris and Rome', ' are sunny']),
    );
    const { model, responsesPosts } = client();
    const executed = [];

    const result = await run(mode, {
      model,
      prompt: 'Weather in Paris and Rome?',
      tools: weatherTool(executed),
      stopWhen: isStepCount(5),
    });

    assert.equal(result.text, 'Paris and Rome are sunny');
    assert.deepEqual(executed, ['Paris', 'Rome']);
    assert.deepEqual(result.steps.map((step) => step.finishReason), ['tool-calls', 'tool-calls', 'stop']);
    const toolResults = result.steps.flatMap((step) => step.content.filter((part) => part.type === 'tool-result'));
    assert.deepEqual(
      toolResults.map((part) => [part.toolCallId, part.output]),
      [['call_w1', { city: 'Paris', forecast: 'sunny' }], ['call_w2', { city: 'Rome', forecast: 'sunny' }]],
    );

    // What the SDK sends for the next steps: no previous_response_id, no item_reference.
    const posts = responsesPosts();
    assert.equal(posts.length, 3);
    for (const post of posts) assert.equal(post.body.previous_response_id, undefined);
    const call = (id, city) => ({ type: 'function_call', call_id: id, name: 'get_weather', arguments: JSON.stringify({ city }) });
    const output = (id, city) => ({ type: 'function_call_output', call_id: id, output: JSON.stringify({ city, forecast: 'sunny' }) });
    assert.deepEqual(posts[1].body.input, [userItem('Weather in Paris and Rome?'), call('call_w1', 'Paris'), output('call_w1', 'Paris')]);
    assert.deepEqual(posts[2].body.input, [...posts[1].body.input, call('call_w2', 'Rome'), output('call_w2', 'Rome')]);

    const upstream = await upstreamMessages();
    assert.equal(upstream.length, 3);
    assert.deepEqual(
      upstream[2].filter((message) => message.role === 'tool').map((message) => [message.tool_call_id, message.content]),
      [['call_w1', '{"city":"Paris","forecast":"sunny"}'], ['call_w2', '{"city":"Rome","forecast":"sunny"}']],
    );
  });
}

check('the responses a replayed tool loop answered are no longer waiting for tool outputs (SPEC §9)', async () => {
  await services.script(toolCallTurn([['call_w1', 'get_weather', '{"city":"Paris"}']]), textTurn(['Sunny']));
  const { model } = client();

  const result = await run('generateText', { model, prompt: 'Weather?', tools: weatherTool([]), stopWhen: isStepCount(5) });

  assert.equal(result.text, 'Sunny');
  const paused = result.steps[0].response.id;
  const response = await fetch(`${services.baseURL}/v1/responses/${paused}`, { headers: { authorization: `Bearer ${services.apiKey}` } });
  assert.equal(response.status, 200);
  const body = await response.json();
  assert.equal(body.status, 'completed');
  assert.equal(body.required_action, null, `${paused} still waits for the outputs the next request replayed`);
});

// ------------------------------------------------------------------------------------------------
// 3. Hosted MCP (`openai.tools.mcp`) naming switchyard's `builtin` tool server: the service runs
//    the call and the SDK shows it as a provider-executed tool call with its result.

function assertCalculatorCall(content) {
  const call = content.find((part) => part.type === 'tool-call');
  assert.ok(call, `no tool-call in ${JSON.stringify(content)}`);
  assert.equal(call.toolName, 'mcp.calculator');
  assert.equal(call.providerExecuted, true);
  assert.deepEqual(call.input, { expression: '6*7' });
  const result = content.find((part) => part.type === 'tool-result');
  assert.ok(result, `no tool-result in ${JSON.stringify(content)}`);
  assert.equal(result.toolCallId, call.toolCallId);
  assert.equal(result.providerExecuted, true);
  assert.equal(result.output.type, 'call');
  assert.equal(result.output.serverLabel, 'builtin');
  assert.equal(result.output.name, 'calculator');
  assert.equal(result.output.output, '42');
  return result;
}

for (const mode of MODES) {
  check(`[${mode}] hosted MCP (requireApproval never): the builtin calculator runs in the service`, async () => {
    await services.script(CALCULATOR_TURN(), textTurn(['The answer', ' is 42']));
    const { model, provider, responsesPosts } = client();

    const result = await attempt(mode, {
      model,
      prompt: 'What is 6*7?',
      tools: mcpTool(provider, 'never'),
      stopWhen: isStepCount(5),
    });

    // What the SDK sends: always a server_url (or connector_id) beside the label.
    assert.deepEqual(responsesPosts()[0].body.tools, [
      { type: 'mcp', server_label: 'builtin', require_approval: 'never', server_url: MCP_SERVER_URL },
    ]);

    rethrow(result);
    assert.equal(result.text, 'The answer is 42');
    assert.equal(result.finishReason, 'stop');
    assert.equal(result.steps.length, 1, 'the SDK must not run a hosted call itself');
    assertCalculatorCall(result.steps[0].content);

    const upstream = await upstreamMessages();
    assert.equal(upstream.length, 2);
    assert.deepEqual(upstream[1].filter((message) => message.role === 'tool').map((message) => message.content), ['42']);
  });
}

for (const mode of MODES) {
  check(`[${mode}] a second chat turn after a hosted MCP call replays it by item_reference`, async () => {
    await services.script(CALCULATOR_TURN(), textTurn(['The answer', ' is 42']), textTurn(['You asked', ' 6*7']));
    const { model, provider, responsesPosts } = client();
    const tools = mcpTool(provider, 'never');
    const messages = [{ role: 'user', content: 'What is 6*7?' }];

    const first = await run(mode, { model, messages, tools, stopWhen: isStepCount(5) });
    const result = assertCalculatorCall(first.steps[0].content);
    const callId = result.providerMetadata.openai.itemId;
    assert.match(callId, /^mcp_/);
    const answerId = first.response.messages[0].content.find((part) => part.type === 'text').providerOptions.openai.itemId;

    messages.push(...first.response.messages, { role: 'user', content: 'What did I ask?' });
    const second = await attempt(mode, { model, messages, tools, stopWhen: isStepCount(5) });

    // What the SDK sends: the mcp_call and the answer by reference (the listing not at all).
    assert.deepEqual(responsesPosts()[1].body.input, [
      userItem('What is 6*7?'),
      { type: 'item_reference', id: callId },
      { type: 'item_reference', id: answerId },
      userItem('What did I ask?'),
    ]);

    assert.equal(rethrow(second).text, 'You asked 6*7');
    const upstream = await upstreamMessages();
    assert.equal(upstream.length, 3, 'the replayed call must not run again');
    const last = upstream[2];
    assert.deepEqual(last[0], { role: 'user', content: 'What is 6*7?' });
    assert.equal(last[1].role, 'assistant');
    assert.equal(last[1].tool_calls[0].function.name, 'calculator');
    assert.deepEqual(last[2], { role: 'tool', content: '42', tool_call_id: last[1].tool_calls[0].id });
    assert.deepEqual(last.slice(3).map(({ role, content }) => ({ role, content })), [
      { role: 'assistant', content: 'The answer is 42' },
      { role: 'user', content: 'What did I ask?' },
    ]);
  });
}

// ------------------------------------------------------------------------------------------------
// 3b. Hosted MCP with approvals: the SDK shows a tool-approval-request; the answer is a
//     tool-approval-response (with providerExecuted, as convertToModelMessages makes it) that the
//     SDK sends as an item_reference to the request plus an mcp_approval_response, replaying the
//     history (never previous_response_id).

/** The messages that answer every approval request of `result` (as a chat UI would send them). */
function approvalAnswer(result, approved) {
  const requests = result.steps.at(-1).content.filter((part) => part.type === 'tool-approval-request');
  const content = requests.map((request) => ({
    type: 'tool-approval-response',
    approvalId: request.approvalId,
    approved,
    providerExecuted: true,
  }));
  return { requests, messages: [...result.response.messages, { role: 'tool', content }] };
}

for (const mode of MODES) {
  check(`[${mode}] hosted MCP with requireApproval always: an approved call runs once`, async () => {
    await services.script(CALCULATOR_TURN(), textTurn(['The answer', ' is 42']), textTurn(['You are', ' welcome']));
    const { model, provider, responsesPosts } = client();
    const tools = mcpTool(provider, 'always');
    const messages = [{ role: 'user', content: 'What is 6*7?' }];

    const first = await run(mode, { model, messages, tools, stopWhen: isStepCount(5) });
    assert.equal(first.text, '');
    const { requests, messages: answer } = approvalAnswer(first, true);
    assert.equal(requests.length, 1);
    assert.match(requests[0].approvalId, /^mcpr_/);
    assert.equal(requests[0].toolCall.toolName, 'mcp.calculator');
    assert.deepEqual(requests[0].toolCall.input, { expression: '6*7' });
    assert.equal((await upstreamMessages()).length, 1, 'nothing runs before the approval');

    messages.push(...answer);
    const second = await attempt(mode, { model, messages, tools, stopWhen: isStepCount(5) });

    assert.deepEqual(responsesPosts()[1].body.input, [
      userItem('What is 6*7?'),
      { type: 'item_reference', id: requests[0].approvalId },
      { type: 'mcp_approval_response', approval_request_id: requests[0].approvalId, approve: true },
    ]);

    assert.equal(rethrow(second).text, 'The answer is 42');
    const result = second.steps.flatMap((step) => step.content).find((part) => part.type === 'tool-result');
    assert.ok(result, `no tool-result in ${JSON.stringify(second.steps.map((step) => step.content))}`);
    assert.equal(result.output.output, '42');
    let upstream = await upstreamMessages();
    assert.equal(upstream.length, 2);
    assert.deepEqual(upstream[1].filter((message) => message.role === 'tool').map((message) => message.content), ['42']);

    // The next chat turn replays the same approval once more: it must not run the call again.
    messages.push(...second.response.messages, { role: 'user', content: 'Thanks!' });
    const third = rethrow(await attempt(mode, { model, messages, tools, stopWhen: isStepCount(5) }));
    assert.equal(third.text, 'You are welcome');
    assert.equal(third.steps.flatMap((step) => step.content).filter((part) => part.type === 'tool-result').length, 0);
    upstream = await upstreamMessages();
    assert.equal(upstream.length, 3);
    assert.deepEqual(upstream[2].filter((message) => message.role === 'tool').map((message) => message.content), ['42']);
  });
}

check('[generateText] hosted MCP with requireApproval always: a denied call is reported to the model', async () => {
  await services.script(CALCULATOR_TURN(), textTurn(['Okay,', ' I will not']));
  const { model, provider, responsesPosts } = client();
  const tools = mcpTool(provider, 'always');
  const messages = [{ role: 'user', content: 'What is 6*7?' }];

  const first = await run('generateText', { model, messages, tools, stopWhen: isStepCount(5) });
  const { requests, messages: answer } = approvalAnswer(first, false);
  assert.equal(requests.length, 1);
  messages.push(...answer);
  const second = await attempt('generateText', { model, messages, tools, stopWhen: isStepCount(5) });

  assert.deepEqual(responsesPosts()[1].body.input.at(-1), {
    type: 'mcp_approval_response',
    approval_request_id: requests[0].approvalId,
    approve: false,
  });

  assert.equal(rethrow(second).text, 'Okay, I will not');
  const upstream = await upstreamMessages();
  assert.equal(upstream.length, 2);
  const toolMessages = upstream[1].filter((message) => message.role === 'tool');
  assert.equal(toolMessages.length, 1);
  assert.match(toolMessages[0].content, /denied/i);
});
