// Client-compatibility tests for switchyard with the OpenAI Agents SDK for JavaScript
// (`@openai/agents`, Responses model, default settings) against the scripted fake upstream.
//
// What the SDK does by default (recorded with @openai/agents 0.20.0):
// * function tool: it runs the tool and continues by replaying the WHOLE history (no
//   previous_response_id): user message, the `function_call` item (with its `fc_` id and
//   status) and a `function_call_output` item (with `status: "completed"`);
// * hosted MCP tool, second turn via `result.history`: it replays `mcp_list_tools` and the
//   `mcp_call` item WITHOUT `output` (on purpose, agents-openai openaiResponsesConverter), so
//   the service must fill the output in from the stored item (SPEC §5);
// * hosted MCP approvals (`requireApproval: 'always'`), with `onApproval` or after
//   `state.approve()` + `run(agent, state)`: it replays the history including the
//   `mcp_approval_request` and appends `{"type":"mcp_approval_response","approve":true,
//   "approval_request_id":"mcpr_…"}` (no `id`, no `reason` unless rejected), again without
//   previous_response_id unless the caller passes the `previousResponseId` option (SPEC §9:
//   continuation by replay).
//
// Run: npm ci && node --test test.mjs  (binaries: target/release/{switchyard,fake-llm}, or
// SWITCHYARD_BIN / FAKE_LLM_BIN). Starts its own fake-llm and switchyard (../node/harness.mjs).
import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';

import {
  Agent,
  OpenAIConversationsSession,
  RunState,
  hostedMcpTool,
  run,
  setDefaultOpenAIClient,
  setTracingDisabled,
  tool,
} from '@openai/agents';
import OpenAI from 'openai';
import { z } from 'zod';

import { MODEL, Services, textTurn, toolCallTurn } from '../node/harness.mjs';

// The network is closed: never export traces.
setTracingDisabled(true);

const INSTRUCTIONS = 'Answer with the help of your tools.';
const services = new Services();
let failed = false;
/** The OpenAI client the SDK uses (recording what it sends). */
let sdkClient;

/** Every request the SDK sent to switchyard, with switchyard's answer. */
const wire = [];

/** A fetch for the OpenAI client that records request bodies and (a copy of) each answer. */
async function recordingFetch(url, init = {}) {
  const entry = {
    method: init.method ?? 'GET',
    path: new URL(String(url)).pathname,
    body: typeof init.body === 'string' ? JSON.parse(init.body) : undefined,
  };
  wire.push(entry);
  const response = await fetch(url, init);
  entry.status = response.status;
  const streamed = (response.headers.get('content-type') || '').includes('text/event-stream');
  entry.done = response
    .clone()
    .text()
    .then((text) => {
      if (streamed) {
        entry.events = text
          .split('\n')
          .filter((line) => line.startsWith('data: ') && line !== 'data: [DONE]')
          .map((line) => JSON.parse(line.slice('data: '.length)));
        entry.answer = entry.events.findLast((event) => event.response)?.response;
      } else {
        entry.answer = text ? JSON.parse(text) : null;
      }
    });
  return response;
}

/** The `POST /v1/responses` calls the SDK made since the test started, answers read in full. */
async function sdkCalls() {
  await Promise.all(wire.map((entry) => entry.done));
  return wire.filter((entry) => entry.method === 'POST' && entry.path === '/v1/responses');
}

/** A test that remembers it failed, so that the service logs get printed at the end. */
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

before(async () => {
  try {
    await services.start();
  } catch (error) {
    failed = true;
    throw error;
  }
  const client = new OpenAI({
    baseURL: `${services.baseURL}/v1`,
    apiKey: services.apiKey,
    maxRetries: 0,
    timeout: 30_000,
    fetch: recordingFetch,
  });
  setDefaultOpenAIClient(client);
  sdkClient = client;
});

beforeEach(async () => {
  await services.resetFake();
  wire.length = 0;
});

after(async () => {
  await services.stop();
  if (failed) console.error(services.logs());
});

/** `run()`, streamed or not; a streamed run is drained and its run-item events returned. */
async function drive(agent, input, { stream = false, ...options } = {}) {
  if (!stream) return { result: await run(agent, input, options), events: [] };
  const result = await run(agent, input, { ...options, stream: true });
  const events = [];
  for await (const event of result) {
    if (event.type === 'run_item_stream_event') events.push(`${event.name}:${event.item.rawItem?.name ?? event.item.type}`);
  }
  await result.completed;
  return { result, events };
}

const modes = [
  ['run()', false],
  ['run(…, {stream: true})', true],
];

const upstreamRoles = (request) => request.messages.map((message) => message.role);
const toolMessages = (request) => request.messages.filter((message) => message.role === 'tool');
const outputTypes = (response) => response.output.map((item) => item.type);

// ------------------------------------------------------------------ 1. function tool

function weatherAgent() {
  const executed = [];
  const getWeather = tool({
    name: 'get_weather',
    description: 'The weather in a city.',
    parameters: z.object({ city: z.string() }),
    execute: async ({ city }) => {
      executed.push(city);
      return `Sunny in ${city}`;
    },
  });
  return { agent: new Agent({ name: 'weather', instructions: INSTRUCTIONS, model: MODEL, tools: [getWeather] }), executed };
}

const scriptWeather = () =>
  services.script(toolCallTurn([['call_w1', 'get_weather', '{"city":"Paris"}']]), textTurn(['It is ', 'sunny.']));

for (const [label, stream] of modes) {
  check(`1 function tool, ${label}: the SDK runs the tool and continues by replaying the history`, async () => {
    const { agent, executed } = weatherAgent();
    await scriptWeather();

    const { result, events } = await drive(agent, 'Weather in Paris?', { stream });

    assert.equal(result.finalOutput, 'It is sunny.');
    assert.deepEqual(executed, ['Paris']);
    if (stream) {
      assert.deepEqual(events, ['tool_called:get_weather', 'tool_output:get_weather', 'message_output_created:message_output_item']);
    }
    const [first, second, ...rest] = await sdkCalls();
    assert.deepEqual(rest, []);
    assert.equal(first.status, 200);
    assert.equal(first.body.stream, stream);
    assert.deepEqual(first.body.tools.map((t) => [t.type, t.name, t.strict]), [['function', 'get_weather', true]]);
    const [call] = first.answer.output;
    assert.equal(call.type, 'function_call');
    assert.equal(first.answer.required_action.submit_tool_outputs.tool_calls[0].id, 'call_w1');
    // The continuation: a full replay, no previous_response_id.
    assert.equal(second.body.previous_response_id, undefined);
    assert.deepEqual(second.body.input, [
      { role: 'user', content: 'Weather in Paris?' },
      { id: call.id, type: 'function_call', name: 'get_weather', call_id: 'call_w1', arguments: '{"city":"Paris"}', status: 'completed' },
      { type: 'function_call_output', call_id: 'call_w1', output: 'Sunny in Paris', status: 'completed' },
    ]);
    assert.equal(second.status, 200);
    assert.equal(second.answer.required_action, null);
    assert.equal(result.lastResponseId, second.answer.id);

    const upstream = await services.upstreamRequests();
    assert.equal(upstream.length, 2);
    assert.deepEqual(upstreamRoles(upstream[1]), ['system', 'user', 'assistant', 'tool']);
    assert.deepEqual(toolMessages(upstream[1]).map((m) => [m.tool_call_id, m.content]), [['call_w1', 'Sunny in Paris']]);
  });
}

check('1 function tool: the replayed function_call_output completes the paused response (SPEC §9)', async () => {
  const { agent } = weatherAgent();
  await scriptWeather();

  await run(agent, 'Weather in Paris?');

  const [first] = await sdkCalls();
  const paused = await fetch(`${services.baseURL}/v1/responses/${first.answer.id}`, {
    headers: { authorization: `Bearer ${services.apiKey}` },
  }).then((r) => r.json());
  assert.equal(paused.status, 'completed');
  assert.equal(paused.required_action, null, 'the paused response still waits for tool outputs');
});

check('1 function tool with the previousResponseId option: only the output is sent, chained', async () => {
  const { agent, executed } = weatherAgent();
  await services.script(textTurn(['Hello.']), toolCallTurn([['call_w2', 'get_weather', '{"city":"Rome"}']]), textTurn(['Sunny in Rome.']));
  const greeting = await run(agent, 'Hi');

  const result = await run(agent, 'Weather in Rome?', { previousResponseId: greeting.lastResponseId });

  assert.equal(result.finalOutput, 'Sunny in Rome.');
  assert.deepEqual(executed, ['Rome']);
  const [, ask, answer] = await sdkCalls();
  assert.equal(ask.body.previous_response_id, greeting.lastResponseId);
  assert.equal(answer.body.previous_response_id, ask.answer.id);
  assert.deepEqual(answer.body.input, [
    { type: 'function_call_output', call_id: 'call_w2', output: 'Sunny in Rome', status: 'completed' },
  ]);
  assert.equal(answer.status, 200);
  const upstream = await services.upstreamRequests();
  assert.equal(upstream.length, 3);
  assert.deepEqual(upstreamRoles(upstream[2]), ['system', 'user', 'assistant', 'user', 'assistant', 'tool']);
  assert.equal(toolMessages(upstream[2])[0].content, 'Sunny in Rome');
});

// ------------------------------------------------------------------ 2. hosted MCP, no approval

function calculatorAgent(toolOptions = { requireApproval: 'never' }) {
  return new Agent({
    name: 'calculator',
    instructions: INSTRUCTIONS,
    model: MODEL,
    tools: [hostedMcpTool({ serverLabel: 'builtin', ...toolOptions })],
  });
}

const calculation = () => toolCallTurn([['call_c1', 'calculator', '{"expression":"6*7"}']]);

function assertOneCalculatorCall(result) {
  const kinds = result.newItems.map((item) => `${item.type}:${item.rawItem.name ?? ''}`);
  assert.deepEqual(kinds, ['tool_call_item:mcp_list_tools', 'tool_call_item:mcp_call', 'message_output_item:']);
  const call = result.newItems[1].rawItem;
  assert.equal(call.type, 'hosted_tool_call');
  assert.equal(call.output, '42');
  assert.equal(call.providerData.name, 'calculator');
  assert.equal(call.providerData.server_label, 'builtin');
  return call;
}

for (const [label, stream] of modes) {
  check(`2 hosted MCP tool, ${label}: switchyard runs the call inside one response`, async () => {
    await services.script(calculation(), textTurn(['42.']));

    const { result, events } = await drive(calculatorAgent(), 'What is 6*7?', { stream });

    assert.equal(result.finalOutput, '42.');
    assertOneCalculatorCall(result);
    if (stream) {
      assert.deepEqual(events, ['tool_called:mcp_list_tools', 'tool_called:mcp_call', 'message_output_created:message_output_item']);
    }
    const calls = await sdkCalls();
    assert.equal(calls.length, 1, 'the SDK made one request: it executed nothing itself');
    assert.deepEqual(calls[0].body.tools, [{ type: 'mcp', server_label: 'builtin', require_approval: 'never' }]);
    assert.deepEqual(outputTypes(calls[0].answer), ['mcp_list_tools', 'mcp_call', 'message']);
    const upstream = await services.upstreamRequests();
    assert.equal(upstream.length, 2);
    assert.deepEqual(toolMessages(upstream[1]).map((m) => m.content), ['42']);
  });

  check(`2 hosted MCP tool, ${label}: a second turn replaying result.history (mcp_call without output)`, async () => {
    await services.script(calculation(), textTurn(['42.']), textTurn(['You asked for 6*7.']));
    const { result: firstTurn } = await drive(calculatorAgent(), 'What is 6*7?', { stream });
    wire.length = 0;

    const { result } = await drive(
      calculatorAgent(),
      [...firstTurn.history, { role: 'user', content: 'What did I ask?' }],
      { stream },
    );

    assert.equal(result.finalOutput, 'You asked for 6*7.');
    const [replay, ...rest] = await sdkCalls();
    assert.deepEqual(rest, []);
    assert.equal(replay.body.previous_response_id, undefined);
    assert.deepEqual(replay.body.input.map((item) => item.type ?? item.role), ['user', 'mcp_list_tools', 'mcp_call', 'message', 'user']);
    const replayedCall = replay.body.input[2];
    // The SDK leaves the output out on purpose; everything else is sent back as received.
    assert.equal('output' in replayedCall, false);
    assert.deepEqual(
      { ...replayedCall, id: undefined },
      {
        type: 'mcp_call',
        id: undefined,
        server_label: 'builtin',
        name: 'calculator',
        arguments: '{"expression":"6*7"}',
        error: null,
        status: 'completed',
        approval_request_id: null,
        data: { decimal: '42', exact: '42' },
      },
    );
    assert.equal(replay.status, 200);
    assert.deepEqual(outputTypes(replay.answer), ['message'], 'the replayed call is not run again');

    const upstream = await services.upstreamRequests();
    assert.equal(upstream.length, 3);
    assert.deepEqual(upstreamRoles(upstream[2]), ['system', 'user', 'assistant', 'tool', 'assistant', 'user']);
    // SPEC §5: a replayed mcp_call whose output the client left out is filled from the store.
    assert.deepEqual(toolMessages(upstream[2]).map((m) => m.content), ['42'], 'the model must see the stored tool output');
  });
}

check('2 hosted MCP tool: a second turn with the previousResponseId option', async () => {
  await services.script(calculation(), textTurn(['42.']), textTurn(['You asked for 6*7.']));
  const firstTurn = await run(calculatorAgent(), 'What is 6*7?');

  const result = await run(calculatorAgent(), 'What did I ask?', { previousResponseId: firstTurn.lastResponseId });

  assert.equal(result.finalOutput, 'You asked for 6*7.');
  const [, second] = await sdkCalls();
  assert.equal(second.body.previous_response_id, firstTurn.lastResponseId);
  assert.deepEqual(second.body.input, [{ role: 'user', content: 'What did I ask?' }]);
  const upstream = await services.upstreamRequests();
  assert.equal(upstream.length, 3);
  assert.deepEqual(toolMessages(upstream[2]).map((m) => m.content), ['42']);
});

// ------------------------------------------------------------------ 3. hosted MCP with approvals

/** The approval request the first response paused on, and the SDK's answer to it. */
function assertApprovalExchange(first, second, { previousResponseId = false, listed = true } = {}) {
  assert.equal(first.status, 200);
  // mcp_list_tools comes first only in the first response of a chain (SPEC §5).
  assert.deepEqual(outputTypes(first.answer), [...(listed ? ['mcp_list_tools'] : []), 'mcp_approval_request']);
  const request = first.answer.output.at(-1);
  assert.match(request.id, /^mcpr_/);
  assert.equal(request.name, 'calculator');
  assert.notEqual(first.answer.required_action, null);
  if (previousResponseId) {
    assert.equal(second.body.previous_response_id, first.answer.id);
    assert.deepEqual(second.body.input, [{ type: 'mcp_approval_response', approve: true, approval_request_id: request.id }]);
  } else {
    // The SDK's default: replay, the approval request included, then the answer.
    assert.equal(second.body.previous_response_id, undefined);
    assert.deepEqual(second.body.input.map((item) => item.type ?? item.role), [
      'user',
      'mcp_list_tools',
      'mcp_approval_request',
      'mcp_approval_response',
    ]);
    assert.deepEqual(second.body.input[2], {
      type: 'mcp_approval_request',
      id: request.id,
      server_label: 'builtin',
      name: 'calculator',
      arguments: '{"expression":"6*7"}',
      status: 'completed',
    });
    assert.deepEqual(second.body.input[3], { type: 'mcp_approval_response', approve: true, approval_request_id: request.id });
  }
  return request;
}

/** The approved call ran once, in the response that answered the approval, and the model saw it. */
async function assertApprovedCallRanOnce(request, second, expectedUpstream = 2) {
  assert.equal(second.status, 200, `switchyard refused the approval: ${JSON.stringify(second.answer)}`);
  assert.deepEqual(outputTypes(second.answer), ['mcp_call', 'message']);
  const [call] = second.answer.output;
  assert.equal(call.approval_request_id, request.id);
  assert.equal(call.output, '42');
  const upstream = await services.upstreamRequests();
  assert.equal(upstream.length, expectedUpstream);
  assert.deepEqual(toolMessages(upstream.at(-1)).map((m) => m.content), ['42']);
}

for (const [label, stream] of modes) {
  check(`3 approval with onApproval, ${label}: the SDK approves by replay and the call runs once`, async () => {
    const asked = [];
    const agent = calculatorAgent({
      requireApproval: 'always',
      onApproval: async (_context, item) => {
        asked.push(item.rawItem.providerData.name);
        return { approve: true };
      },
    });
    await services.script(calculation(), textTurn(['42.']));

    const { result } = await drive(agent, 'What is 6*7?', { stream });

    assert.deepEqual(asked, ['calculator']);
    const [first, second, ...rest] = await sdkCalls();
    assert.deepEqual(rest, []);
    const request = assertApprovalExchange(first, second);
    await assertApprovedCallRanOnce(request, second);
    assert.equal(result.finalOutput, '42.');
    assert.deepEqual(result.interruptions ?? [], []);
  });

  check(`3 approval by interruption, ${label}: state.approve() then run(agent, state)`, async () => {
    const agent = calculatorAgent({ requireApproval: 'always' });
    await services.script(calculation(), textTurn(['42.']));

    const { result: paused } = await drive(agent, 'What is 6*7?', { stream });
    assert.equal(paused.finalOutput, undefined);
    assert.equal(paused.interruptions.length, 1);
    const [interruption] = paused.interruptions;
    assert.equal(interruption.type, 'tool_approval_item');
    assert.equal(interruption.rawItem.providerData.type, 'mcp_approval_request');
    assert.equal(interruption.rawItem.providerData.arguments, '{"expression":"6*7"}');
    // As a human-in-the-loop app would: the state survives serialization.
    const state = await RunState.fromString(agent, paused.state.toString());
    state.approve(state.getInterruptions()[0]);

    const { result } = await drive(agent, state, { stream });

    const [first, second, ...rest] = await sdkCalls();
    assert.deepEqual(rest, []);
    const request = assertApprovalExchange(first, second);
    await assertApprovedCallRanOnce(request, second);
    assert.equal(result.finalOutput, '42.');
  });

  check(`3 approval by interruption, ${label}: resumed with the previousResponseId option`, async () => {
    const agent = calculatorAgent({ requireApproval: 'always' });
    await services.script(calculation(), textTurn(['42.']));
    const { result: paused } = await drive(agent, 'What is 6*7?', { stream });
    paused.state.approve(paused.interruptions[0]);

    const { result } = await drive(agent, paused.state, { stream, previousResponseId: paused.lastResponseId });

    const [first, second, ...rest] = await sdkCalls();
    assert.deepEqual(rest, []);
    const request = assertApprovalExchange(first, second, { previousResponseId: true });
    await assertApprovedCallRanOnce(request, second);
    assert.equal(result.finalOutput, '42.');
  });
}

check('3 approval with onApproval inside a previousResponseId conversation: answered by chaining', async () => {
  const agent = calculatorAgent({ requireApproval: 'always', onApproval: async () => ({ approve: true }) });
  await services.script(textTurn(['Hello.']), calculation(), textTurn(['42.']));
  const greeting = await run(agent, 'Hi');
  wire.length = 0;

  const result = await run(agent, 'What is 6*7?', { previousResponseId: greeting.lastResponseId });

  const [first, second, ...rest] = await sdkCalls();
  assert.deepEqual(rest, []);
  assert.equal(first.body.previous_response_id, greeting.lastResponseId);
  const request = assertApprovalExchange(first, second, { previousResponseId: true, listed: false });
  await assertApprovedCallRanOnce(request, second, 3);
  assert.equal(result.finalOutput, '42.');
});

check('3 approval by replay: replaying the same history again does not run the call again', async () => {
  const agent = calculatorAgent({ requireApproval: 'always', onApproval: async () => ({ approve: true }) });
  await services.script(calculation(), textTurn(['42.']), textTurn(['It was 6*7.']));
  const firstTurn = await run(agent, 'What is 6*7?');
  assert.equal(firstTurn.finalOutput, '42.');
  wire.length = 0;

  // The next turn replays mcp_approval_request, mcp_approval_response and mcp_call again.
  const result = await run(agent, [...firstTurn.history, { role: 'user', content: 'What was it?' }]);

  assert.equal(result.finalOutput, 'It was 6*7.');
  const [replay, ...rest] = await sdkCalls();
  assert.deepEqual(rest, []);
  assert.deepEqual(replay.body.input.map((item) => item.type ?? item.role), [
    'user',
    'mcp_list_tools',
    'mcp_approval_request',
    'mcp_approval_response',
    'mcp_call',
    'message',
    'user',
  ]);
  assert.equal(replay.status, 200);
  assert.deepEqual(outputTypes(replay.answer), ['message'], 'the approved call ran a second time');
  const upstream = await services.upstreamRequests();
  assert.equal(upstream.length, 3);
  // What the model sees is what a previous_response_id chain shows it: one call, one result.
  assert.deepEqual(upstreamRoles(upstream[2]), ['system', 'user', 'assistant', 'tool', 'assistant', 'user']);
  assert.deepEqual(toolMessages(upstream[2]).map((m) => m.content), ['42']);
});

check('3 rejection by interruption: the SDK replays a denial and the model is told', async () => {
  const agent = calculatorAgent({ requireApproval: 'always' });
  await services.script(calculation(), textTurn(['Not allowed.']));
  const paused = await run(agent, 'What is 6*7?');
  paused.state.reject(paused.interruptions[0], { message: 'not today' });

  const result = await run(agent, paused.state);

  const [first, second, ...rest] = await sdkCalls();
  assert.deepEqual(rest, []);
  const request = first.answer.output[1];
  assert.equal(second.body.previous_response_id, undefined);
  assert.deepEqual(second.body.input.at(-1), {
    type: 'mcp_approval_response',
    approve: false,
    approval_request_id: request.id,
    reason: 'not today',
  });
  assert.equal(second.status, 200, `switchyard refused the denial: ${JSON.stringify(second.answer)}`);
  assert.deepEqual(outputTypes(second.answer), ['mcp_call', 'message']);
  assert.equal(second.answer.output[0].status, 'failed');
  assert.equal(second.answer.output[0].output, null);
  assert.equal(result.finalOutput, 'Not allowed.');
  const upstream = await services.upstreamRequests();
  assert.equal(upstream.length, 2);
  assert.match(toolMessages(upstream[1])[0].content, /denied/);
});

check('an OpenAIConversationsSession keeps a chat with a tool in a conversation on switchyard over two turns', async () => {
  const { agent, executed } = weatherAgent();
  await services.script(
    toolCallTurn([['call_s1', 'get_weather', '{"city":"Paris"}']]),
    textTurn(['It is sunny in Paris.']),
    textTurn(['Still sunny tomorrow.']),
  );
  const session = new OpenAIConversationsSession({ client: sdkClient });

  const first = await run(agent, 'Weather in Paris?', { session });
  const second = await run(agent, 'And tomorrow?', { session });

  assert.equal(first.finalOutput, 'It is sunny in Paris.');
  assert.equal(second.finalOutput, 'Still sunny tomorrow.');
  assert.deepEqual(executed, ['Paris']);
  const conversationId = session.sessionId;
  assert.match(conversationId, /^conv_[0-9a-f]{48}$/);
  // What the conversation holds, read back through the API.
  const stored = [];
  for await (const item of sdkClient.conversations.items.list(conversationId, { order: 'asc' })) stored.push(item);
  assert.deepEqual(
    stored.map((item) => [item.type, item.role ?? null]),
    [
      ['message', 'user'],
      ['function_call', null],
      ['function_call_output', null],
      ['message', 'assistant'],
      ['message', 'user'],
      ['message', 'assistant'],
    ],
  );
  assert.equal(stored[1].call_id, 'call_s1');
  assert.equal(stored[2].output, 'Sunny in Paris');
  // The second turn's model request carried the first, read from the conversation.
  const upstream = await services.upstreamRequests();
  assert.equal(upstream.length, 3);
  assert.deepEqual(upstreamRoles(upstream[2]), ['system', 'user', 'assistant', 'tool', 'assistant', 'user']);
  assert.deepEqual(toolMessages(upstream[2]).map((m) => [m.tool_call_id, m.content]), [['call_s1', 'Sunny in Paris']]);

  const items = await session.getItems();
  assert.equal(items.length, 6);
  const lastTwo = await session.getItems(2);
  assert.deepEqual(lastTwo, items.slice(-2));
  const popped = await session.popItem();
  assert.deepEqual(popped, items.at(-1));
  assert.deepEqual(await session.getItems(), items.slice(0, -1));
  await session.addItems([{ type: 'message', role: 'user', content: 'A note for later.' }]);
  const withNote = await session.getItems();
  assert.equal(withNote.length, 6);
  assert.equal(withNote.at(-1).role, 'user');
  await session.clearSession();
  await assert.rejects(sdkClient.conversations.retrieve(conversationId), (error) => error.status === 404);
});

check('a conversationId run keeps two user turns and a local tool in a conversation on switchyard', async () => {
  const { agent, executed } = weatherAgent();
  await services.script(
    toolCallTurn([['call_c1', 'get_weather', '{"city":"Rome"}']]),
    textTurn(['Sunny in Rome.']),
    textTurn(['Warm tomorrow too.']),
  );
  const conversation = await sdkClient.conversations.create({});

  const first = await run(agent, 'Weather in Rome?', { conversationId: conversation.id });
  const second = await run(agent, 'And tomorrow?', { conversationId: conversation.id });

  assert.equal(first.finalOutput, 'Sunny in Rome.');
  assert.equal(second.finalOutput, 'Warm tomorrow too.');
  assert.deepEqual(executed, ['Rome']);
  // The SDK sent each request with the conversation and only what was new.
  const calls = await sdkCalls();
  assert.equal(calls.length, 3);
  for (const call of calls) {
    assert.equal(call.status, 200);
    assert.equal(call.body.conversation, conversation.id);
    assert.deepEqual(call.answer.conversation, { id: conversation.id });
  }
  const stored = [];
  for await (const item of sdkClient.conversations.items.list(conversation.id, { order: 'asc' })) stored.push(item);
  assert.deepEqual(
    stored.map((item) => [item.type, item.role ?? null]),
    [
      ['message', 'user'],
      ['function_call', null],
      ['function_call_output', null],
      ['message', 'assistant'],
      ['message', 'user'],
      ['message', 'assistant'],
    ],
  );
  const upstream = await services.upstreamRequests();
  assert.deepEqual(upstreamRoles(upstream[2]), ['system', 'user', 'assistant', 'tool', 'assistant', 'user']);
});
