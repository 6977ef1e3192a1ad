// Client-compatibility tests for switchyard with the `openai` npm package.
import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import OpenAI, { APIError, BadRequestError } from 'openai';

import { MODEL, Services, textTurn } from './harness.mjs';

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
  client = new OpenAI({ baseURL: `${services.baseURL}/v1`, apiKey: 'test', maxRetries: 0, timeout: 30_000 });
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

check('no process warning was emitted', () => {
  assert.deepEqual(warnings, []);
});
