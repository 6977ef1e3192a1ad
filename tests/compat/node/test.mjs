// Client-compatibility tests for switchyard with the `openai` npm package.
import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import OpenAI, { APIError, BadRequestError } from 'openai';

import { BUILTIN_SERVER, MODEL, Services, textTurn, toolCallTurn } from './harness.mjs';

const warnings = [];
process.on('warning', (warning) => warnings.push(`${warning.name}: ${warning.message}`));

const services = new Services();
let client;
let failed = false;

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
  client = new OpenAI({ baseURL: `${services.baseURL}/v1`, apiKey: services.apiKey, maxRetries: 0, timeout: 30_000 });
});

beforeEach(async () => {
  await services.resetFake();
});

after(async () => {
  await services.stop();
  if (failed) console.error(services.logs());
});

const TEXT_ANSWER_EVENTS = (deltas) => [
  'response.created',
  'response.in_progress',
  'response.output_item.added',
  'response.content_part.added',
  ...Array(deltas).fill('response.output_text.delta'),
  'response.output_text.done',
  'response.content_part.done',
  'response.output_item.done',
  'response.completed',
];

check('a non-streaming create returns the completed scripted answer', async () => {
  await services.script(textTurn(['Hi', ' there', '!'], { promptTokens: 5, completionTokens: 3 }));

  const response = await client.responses.create({ model: MODEL, input: 'Hello' });

  assert.match(response.id, /^resp_/);
  assert.equal(response.object, 'response');
  assert.equal(response.status, 'completed');
  assert.equal(response.model, MODEL);
  assert.equal(response.output_text, 'Hi there!');
  assert.equal(response.error, null);
  assert.equal(response.required_action, null);
  assert.deepEqual(response.usage, {
    input_tokens: 5,
    input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
    output_tokens: 3,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 8,
  });
  assert.equal(response.output.length, 1);
  const [message] = response.output;
  assert.equal(message.type, 'message');
  assert.equal(message.role, 'assistant');
  assert.equal(message.status, 'completed');
  assert.match(message.id, /^msg_/);
  assert.deepEqual(message.content, [{ type: 'output_text', text: 'Hi there!', annotations: [], logprobs: [] }]);

  const retrieved = await client.responses.retrieve(response.id);
  assert.equal(retrieved.output_text, 'Hi there!');
});

check('the stream helper emits text deltas and resolves finalResponse with their concatenation', async () => {
  await services.script(textTurn(['The ', 'quick ', 'fox.'], { promptTokens: 7, completionTokens: 4 }));

  const stream = client.responses.stream({ model: MODEL, input: 'Tell me about the fox' });
  const events = [];
  const deltas = [];
  const snapshots = [];
  stream.on('event', (event) => events.push(event));
  stream.on('response.output_text.delta', (event) => {
    deltas.push(event.delta);
    snapshots.push(event.snapshot);
  });
  const final = await stream.finalResponse();

  assert.deepEqual(events.map((e) => e.type), TEXT_ANSWER_EVENTS(3));
  assert.deepEqual(events.map((e) => e.sequence_number), [...events.keys()]);
  const itemId = events[2].item.id;
  for (const event of events.slice(3, -2)) {
    assert.deepEqual([event.item_id, event.output_index, event.content_index], [itemId, 0, 0], event.type);
  }
  assert.equal(events.at(-2).item.id, itemId);
  assert.deepEqual(deltas, ['The ', 'quick ', 'fox.']);
  assert.deepEqual(snapshots, ['The ', 'The quick ', 'The quick fox.']);
  assert.equal(final.output_text, deltas.join(''));
  assert.equal(final.output_text, 'The quick fox.');
  assert.equal(final.status, 'completed');
  assert.equal(final.id, events[0].response.id);
  assert.deepEqual([final.usage.input_tokens, final.usage.output_tokens, final.usage.total_tokens], [7, 4, 11]);
});

check('the stream helper accumulates a reasoning item before the answer, and a summary when asked for', async () => {
  const thought = ['Foxes are quick. ', 'Say so.'];
  for (const summary of [undefined, 'auto']) {
    const turn = textTurn(['Quick.']);
    turn.steps.unshift(...thought.map((text) => ({ type: 'reasoning', text })));
    await services.script(turn);
    const reasoning = summary ? { summary } : undefined;
    const stream = client.responses.stream({ model: MODEL, input: 'Is the fox quick?', reasoning });
    const deltas = [];
    stream.on('response.reasoning_text.delta', (event) => deltas.push(event.delta));
    stream.on('response.reasoning_summary_text.delta', (event) => deltas.push(event.delta));
    const final = await stream.finalResponse();

    assert.deepEqual(deltas, thought);
    const [item, message] = final.output;
    assert.equal(item.type, 'reasoning');
    assert.match(item.id, /^rs_/);
    const text = summary ? item.summary[0].text : item.content[0].text;
    assert.equal(text, thought.join(''));
    assert.equal(message.type, 'message');
    assert.equal(final.output_text, 'Quick.');
  }
});

check('async iteration of a streamed create yields contiguous sequence numbers', async () => {
  await services.script(textTurn(['a', 'b']));

  const stream = await client.responses.create({ model: MODEL, input: 'Hello', stream: true });
  const events = [];
  for await (const event of stream) events.push(event);

  assert.deepEqual(events.map((e) => e.type), TEXT_ANSWER_EVENTS(2));
  assert.deepEqual(events.map((e) => e.sequence_number), [...events.keys()]);
  assert.deepEqual(events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta), ['a', 'b']);
  assert.equal(events.find((e) => e.type === 'response.output_text.done').text, 'ab');
  assert.equal(events.at(-1).response.status, 'completed');
});

check('an upstream error while streaming rejects finalResponse with an APIError', async () => {
  await services.script({ steps: [{ type: 'status', status: 500, body: { error: { message: 'boom' } } }] });

  const stream = client.responses.stream({ model: MODEL, input: 'Hello' });
  const seen = [];
  stream.on('event', (event) => seen.push(event.type));
  const error = await stream.finalResponse().then(
    () => assert.fail('finalResponse() resolved after an upstream failure'),
    (e) => e,
  );

  // openai/core/streaming: an SSE payload with an `error` member becomes an APIError without status.
  assert.ok(error instanceof APIError, `expected an APIError, got ${error}`);
  assert.equal(error.status, undefined);
  assert.equal(typeof error.error.message, 'string');
  assert.equal(error.message, error.error.message);
  assert.deepEqual(seen, ['response.created', 'response.in_progress']);
});

check('an unknown model is rejected with a BadRequestError naming the model', async () => {
  const error = await client.responses.create({ model: 'no-such-model-3000', input: 'Hello' }).then(
    () => assert.fail('create() resolved for an unknown model'),
    (e) => e,
  );

  assert.ok(error instanceof BadRequestError, `expected a BadRequestError, got ${error}`);
  assert.equal(error.status, 400);
  assert.equal(error.type, 'invalid_request_error');
  assert.equal(error.param, 'model');
  assert.match(error.message, /no-such-model-3000/);
  assert.deepEqual(await services.upstreamRequests(), []);
});

/** SPEC §7: items never interleave, and output indexes are append-only. Returns each item's events. */
function eventsByItem(events) {
  const items = [];
  let open = null;
  for (const event of events.slice(2, -1)) {
    assert.equal(typeof event.output_index, 'number', `${event.type} carries no output_index`);
    if (event.type === 'response.output_item.added') {
      assert.equal(open, null, `item ${event.output_index} opened inside item ${open?.id}`);
      assert.equal(event.output_index, items.length, 'output indexes are not append-only');
      open = event.item;
      items.push([event]);
      continue;
    }
    assert.notEqual(open, null, `${event.type} outside any item`);
    assert.equal(event.output_index, items.length - 1, `${event.type} outside its item`);
    if (event.type === 'response.output_item.done') {
      assert.equal(event.item.id, open.id);
      open = null;
    } else {
      assert.equal(event.item_id, open.id, event.type);
    }
    items.at(-1).push(event);
  }
  assert.equal(open, null, 'an item was never done');
  return items;
}

check('the stream helper resolves finalResponse of a run with two concurrent server calls', async () => {
  await services.script(
    toolCallTurn([
      ['call_1', 'calculator', '{"expression": "6 * 7"}'],
      ['call_2', 'current_time', '{"timezone": "Europe/Paris"}'],
    ]),
    textTurn(['It is ', '42.'], { promptTokens: 30, completionTokens: 4 }),
  );

  const stream = client.responses.stream({ model: MODEL, input: '6 * 7? And the time?', tools: [BUILTIN_SERVER] });
  const events = [];
  const completedCalls = [];
  stream.on('event', (event) => events.push(event));
  stream.on('response.mcp_call.completed', (event) => completedCalls.push(event.item_id));
  const final = await stream.finalResponse();

  assert.deepEqual(events.map((e) => e.sequence_number), [...events.keys()]);
  assert.deepEqual(events.slice(0, 2).map((e) => e.type), ['response.created', 'response.in_progress']);
  assert.equal(events.at(-1).type, 'response.completed');
  const [listTools, firstCall, secondCall, message] = eventsByItem(events);
  assert.deepEqual(listTools.map((e) => e.type), [
    'response.output_item.added',
    'response.mcp_list_tools.in_progress',
    'response.mcp_list_tools.completed',
    'response.output_item.done',
  ]);
  for (const call of [firstCall, secondCall]) {
    const types = call.map((e) => e.type);
    const deltas = types.filter((t) => t === 'response.mcp_call_arguments.delta').length;
    assert.ok(deltas >= 1, 'no response.mcp_call_arguments.delta');
    assert.deepEqual(types, [
      'response.output_item.added',
      ...Array(deltas).fill('response.mcp_call_arguments.delta'),
      'response.mcp_call_arguments.done',
      'response.mcp_call.in_progress',
      'response.mcp_call.completed',
      'response.output_item.done',
    ]);
  }
  assert.equal(message.filter((e) => e.type === 'response.output_text.delta').length, 2);

  assert.equal(final.id, events[0].response.id);
  assert.equal(final.status, 'completed');
  assert.deepEqual(final.output.map((item) => item.type), ['mcp_list_tools', 'mcp_call', 'mcp_call', 'message']);
  assert.deepEqual(final.output[0].tools.map((tool) => tool.name), ['current_time', 'calculator', 'fetch_url']);
  const calls = Object.fromEntries(final.output.filter((item) => item.type === 'mcp_call').map((c) => [c.name, c]));
  assert.deepEqual(Object.keys(calls).sort(), ['calculator', 'current_time']);
  assert.deepEqual(completedCalls, [firstCall[0].item.id, secondCall[0].item.id]);
  for (const call of Object.values(calls)) {
    assert.match(call.id, /^mcp_/);
    assert.deepEqual([call.server_label, call.status, call.error], ['builtin', 'completed', null]);
  }
  assert.equal(calls.calculator.arguments, '{"expression": "6 * 7"}');
  assert.equal(calls.calculator.output, '42');
  // SPEC §12: RFC 3339 in the zone asked for (Paris is at +01:00 or +02:00).
  assert.match(calls.current_time.output, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+0[12]:00$/);
  assert.ok(Math.abs(Date.parse(calls.current_time.output) - Date.now()) < 60_000, calls.current_time.output);
  assert.equal(final.output_text, 'It is 42.');
  assert.deepEqual([final.usage.input_tokens, final.usage.output_tokens], [10 + 30, 5 + 4]);

  const retrieved = await client.responses.retrieve(final.id);
  // The helper's parsed message parts carry an extra `parsed`; the tool items are as stored.
  assert.deepEqual(retrieved.output.slice(0, 3), final.output.slice(0, 3));
  assert.equal(retrieved.output_text, final.output_text);
  const [, second] = await services.upstreamRequests();
  assert.deepEqual(second.messages.filter((m) => m.role === 'tool').map((m) => m.content).sort(), [
    '42',
    calls.current_time.output,
  ].sort());
});

check('a failing server call ends its item with an error object and the model answers', async () => {
  await services.script(
    toolCallTurn([['call_1', 'calculator', '{"expression": "1/0"}']]),
    textTurn(['Division by zero.']),
  );

  const stream = client.responses.stream({ model: MODEL, input: '1/0?', tools: [BUILTIN_SERVER] });
  const failed = [];
  stream.on('response.mcp_call.failed', (event) => failed.push(event));
  const final = await stream.finalResponse();

  assert.deepEqual(final.output.map((item) => item.type), ['mcp_list_tools', 'mcp_call', 'message']);
  const call = final.output[1];
  assert.deepEqual(failed.map((e) => [e.item_id, e.output_index]), [[call.id, 1]]);
  assert.deepEqual([call.name, call.status, call.output], ['calculator', 'failed', null]);
  assert.equal(call.error.type, 'mcp_tool_execution_error');
  assert.match(call.error.content, /zero/i);
  assert.equal(final.status, 'completed');
  assert.equal(final.output_text, 'Division by zero.');
});

const WEATHER_TOOL = Object.freeze({
  type: 'function',
  name: 'get_weather',
  description: 'The current weather in a city.',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
    additionalProperties: false,
  },
  strict: true,
});
const PARIS = '{"city": "Paris"}';

check('a paused run resumes through client.post and the stream helper reads the resumed part by id', async () => {
  await services.script(
    toolCallTurn([['call_w', 'get_weather', PARIS]]),
    textTurn(['Sunny, ', '24 °C.'], { promptTokens: 5, completionTokens: 2, delayMs: 50 }),
  );

  const first = client.responses.stream({ model: MODEL, input: 'Weather in Paris?', tools: [WEATHER_TOOL] });
  const pausedEvents = [];
  first.on('event', (event) => pausedEvents.push(event));
  const paused = await first.finalResponse();

  // SPEC §3, §7 B: the model's turn is complete and the response waits for the client.
  assert.deepEqual(pausedEvents.map((e) => e.sequence_number), [...pausedEvents.keys()]);
  assert.equal(pausedEvents.at(-1).type, 'response.completed');
  assert.equal(paused.status, 'completed');
  assert.deepEqual(paused.output.map((item) => [item.type, item.call_id]), [['function_call', 'call_w']]);
  assert.equal(typeof paused.required_action.expires_at, 'number');
  assert.deepEqual(paused.required_action, {
    type: 'submit_tool_outputs',
    expires_at: paused.required_action.expires_at,
    submit_tool_outputs: {
      tool_calls: [{ id: 'call_w', type: 'function', function: { name: 'get_weather', arguments: PARIS } }],
    },
  });
  const last = pausedEvents.at(-1).sequence_number;

  // SPEC §8 through the SDK's generic POST (README, "Undocumented endpoints"): a Stream of events.
  const submission = await client.post(`/responses/${paused.id}/submit_tool_outputs`, {
    body: { tool_outputs: [{ tool_call_id: 'call_w', output: 'sunny' }], stream: true },
    stream: true,
  });
  const iterator = submission[Symbol.asyncIterator]();
  const { value: inProgress } = await iterator.next();
  assert.deepEqual([inProgress.type, inProgress.sequence_number], ['response.in_progress', last + 1]);

  // The helper cannot read the resumed stream itself (its accumulator wants `response.created`
  // first): it replays the run's log by id, follows it while it runs, and shows what follows `last`.
  const resumed = client.responses.stream({ response_id: paused.id, starting_after: last });
  const followed = [];
  resumed.on('event', (event) => followed.push(event));
  const submitted = [inProgress];
  for (let next = await iterator.next(); !next.done; next = await iterator.next()) submitted.push(next.value);
  const final = await resumed.finalResponse();

  assert.deepEqual(submitted.map((e) => e.type), [
    'response.in_progress',
    'response.output_item.added',
    'response.content_part.added',
    'response.output_text.delta',
    'response.output_text.delta',
    'response.output_text.done',
    'response.content_part.done',
    'response.output_item.done',
    'response.completed',
  ]);
  assert.deepEqual(submitted.map((e) => e.sequence_number), submitted.map((_, i) => last + 1 + i));
  // The call stays where it was (as sent; the helper's parsed copy carries `parsed_arguments`).
  assert.deepEqual(inProgress.response.output, pausedEvents.at(-1).response.output);
  assert.deepEqual(submitted.slice(1, -1).map((e) => e.output_index), Array(submitted.length - 2).fill(1));
  assert.deepEqual(followed.map((e) => [e.type, e.sequence_number]), submitted.map((e) => [e.type, e.sequence_number]));
  assert.equal(final.id, paused.id);
  assert.equal(final.status, 'completed');
  assert.equal(final.required_action, null);
  assert.deepEqual(final.output.map((item) => item.type), ['function_call', 'message']);
  assert.equal(final.output_text, 'Sunny, 24 °C.');
  assert.deepEqual([final.usage.input_tokens, final.usage.output_tokens], [10 + 5, 5 + 2]);
  assert.deepEqual(submitted.at(-1).response.output, (await client.responses.retrieve(paused.id)).output);
  const [, second] = await services.upstreamRequests();
  assert.deepEqual(second.messages.at(-1), { role: 'tool', tool_call_id: 'call_w', content: 'sunny' });

  const again = { tool_outputs: [{ tool_call_id: 'call_w', output: 'x' }] };
  const error = await client.post(`/responses/${paused.id}/submit_tool_outputs`, { body: again }).then(
    () => assert.fail('a second submission was accepted'),
    (e) => e,
  );
  assert.ok(error instanceof BadRequestError, `expected a BadRequestError, got ${error}`);
  assert.equal(error.type, 'invalid_request_error');
  assert.equal(error.error.message, 'Runs in status "completed" do not accept tool outputs.');
});

check('a background create is queued and the stream helper reattaches by id while it runs', async () => {
  const chunks = ['One, ', 'two, ', 'three, ', 'four.'];
  await services.script(textTurn(chunks, { delayMs: 250 }));

  const queued = await client.responses.create({ model: MODEL, input: 'Count to four', background: true });

  assert.match(queued.id, /^resp_/);
  assert.deepEqual([queued.status, queued.background, queued.output, queued.usage], ['queued', true, [], null]);

  // A first reader follows the run from its start and goes away after the first text delta.
  const first = await client.responses.retrieve(queued.id, { stream: true });
  const head = [];
  for await (const event of first) {
    head.push(event);
    if (event.type === 'response.output_text.delta') break;
  }
  const last = head.at(-1).sequence_number;
  assert.equal((await client.responses.retrieve(queued.id)).status, 'in_progress');

  // The helper replays the log from 0 (its accumulator wants `response.created` first), shows what
  // follows `last`, and follows the run live until it stops.
  const stream = client.responses.stream({ response_id: queued.id, starting_after: last });
  const rest = [];
  const snapshots = [];
  stream.on('event', (event) => rest.push(event));
  stream.on('response.output_text.delta', (event) => snapshots.push(event.snapshot));
  const final = await stream.finalResponse();

  const expected = ['response.created', 'response.queued', ...TEXT_ANSWER_EVENTS(chunks.length).slice(1)];
  assert.deepEqual(head.map((e) => e.type), expected.slice(0, head.length));
  assert.deepEqual(rest.map((e) => e.type), expected.slice(head.length));
  assert.deepEqual(rest.map((e) => e.sequence_number), expected.map((_, i) => i).slice(last + 1));
  assert.deepEqual([head[0].response.status, head[1].response.status], ['queued', 'queued']);
  assert.deepEqual(snapshots, ['One, two, ', 'One, two, three, ', 'One, two, three, four.']);
  assert.equal(final.id, queued.id);
  assert.deepEqual([final.status, final.background], ['completed', true]);
  assert.equal(final.output_text, 'One, two, three, four.');
  assert.equal((await client.responses.retrieve(queued.id)).output_text, final.output_text);
  assert.equal((await services.upstreamRequests()).length, 1);
});

check('no process warning was emitted', () => {
  assert.deepEqual(warnings, []);
});
