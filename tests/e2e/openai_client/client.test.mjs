// drift serve through the official OpenAI Node client (pinned in package-lock.json), as an application
// uses it: models, chat and completions in full and streamed, the errors it raises, an aborted stream,
// structured output and tool calls (forced by tool_choice, since the fixture's weights are random).
// run.sh starts the server and passes DRIFT_URL, DRIFT_API_KEY and DRIFT_MODEL.
import assert from "node:assert/strict";
import { test } from "node:test";
import OpenAI from "openai";
import { answerCall, client, forcedWeatherCall, model, weather } from "./common.mjs";

const hello = [{ role: "user", content: "Say something about packages." }];

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

test("models: list and retrieve, unknown ids are NotFoundError", async () => {
  const page = await client.models.list();
  assert.deepEqual(page.data.map((m) => m.id), [model]);
  const one = await client.models.retrieve(model);
  assert.equal(one.id, model);
  assert.equal(one.object, "model");
  await assert.rejects(client.models.retrieve("no-such-model"), (e) => {
    assert.ok(e instanceof OpenAI.NotFoundError, String(e));
    assert.equal(e.code, "model_not_found");
    return true;
  });
});

test("chat: full and streamed answers agree, the stream opens with the role", async () => {
  const request = { model, messages: hello, temperature: 0, max_tokens: 12, ignore_eos: true };
  const full = await client.chat.completions.create(request);
  assert.equal(full.object, "chat.completion");
  assert.equal(full.choices[0].message.role, "assistant");
  assert.equal(typeof full.choices[0].message.content, "string");
  assert.equal(full.choices[0].finish_reason, "length");
  assert.equal(full.usage.completion_tokens, 12);

  const chunks = await collect(
    await client.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } }),
  );
  assert.deepEqual(chunks[0].choices[0].delta, { role: "assistant", content: "" });
  const text = chunks.flatMap((c) => c.choices.map((ch) => ch.delta.content ?? "")).join("");
  assert.equal(text, full.choices[0].message.content);
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.completion_tokens, 12);
  assert.equal(chunks.at(-2).choices[0].finish_reason, "length");
});

test("completions: full and streamed, n choices", async () => {
  const request = { model, prompt: "A dictionary is", temperature: 0, max_tokens: 6, ignore_eos: true };
  const full = await client.completions.create(request);
  assert.equal(full.choices[0].finish_reason, "length");
  const chunks = await collect(await client.completions.create({ ...request, stream: true }));
  assert.equal(chunks.map((c) => c.choices[0]?.text ?? "").join(""), full.choices[0].text);
  const many = await client.completions.create({ ...request, n: 3, temperature: 1, seed: 7 });
  assert.deepEqual(many.choices.map((c) => c.index), [0, 1, 2]);
});

test("errors: the client raises the right class with OpenAI's fields", async () => {
  await assert.rejects(client.chat.completions.create({ model, messages: hello, max_tokens: 100000 }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    assert.equal(e.status, 400);
    assert.match(e.message, /maximum context length is \d+ tokens/);
    assert.ok(e.code === null || typeof e.code === "string");
    return true;
  });
  await assert.rejects(client.chat.completions.create({ model, messages: [{ role: "wizard", content: "hi" }] }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    assert.equal(e.param, "messages");
    return true;
  });
  const stranger = new OpenAI({ baseURL: process.env.DRIFT_URL, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(stranger.models.list(), (e) => {
    assert.ok(e instanceof OpenAI.AuthenticationError, String(e));
    assert.equal(e.code, "invalid_api_key");
    return true;
  });
});

test("an aborted stream leaves the server serving", async () => {
  const controller = new AbortController();
  const stream = await client.chat.completions.create(
    { model, messages: hello, max_tokens: 200, ignore_eos: true, stream: true },
    { signal: controller.signal },
  );
  // The client ends the iteration quietly when its signal aborts.
  let seen = 0;
  for await (const chunk of stream) {
    if (++seen === 3) controller.abort();
  }
  assert.ok(seen < 200, `the stream went on after the abort: ${seen} chunks`);
  const after = await client.chat.completions.create({ model, messages: hello, max_tokens: 2 });
  assert.equal(after.choices.length, 1);
});

test("structured output: json_schema replies parse and follow the schema", async () => {
  const schema = {
    type: "object",
    properties: { name: { type: "string", maxLength: 8 }, n: { type: "integer" }, ok: { type: "boolean" } },
    required: ["name", "n", "ok"],
    additionalProperties: false,
  };
  const request = {
    model,
    messages: hello,
    temperature: 1,
    seed: 3,
    max_tokens: 100,
    response_format: { type: "json_schema", json_schema: { name: "record", schema, strict: true } },
  };
  const full = await client.chat.completions.create(request);
  const value = JSON.parse(full.choices[0].message.content);
  assert.deepEqual(Object.keys(value).sort(), ["n", "name", "ok"]);
  assert.equal(typeof value.name, "string");
  assert.ok(Number.isInteger(value.n));
  assert.equal(typeof value.ok, "boolean");
  const chunks = await collect(await client.chat.completions.create({ ...request, stream: true }));
  const text = chunks.flatMap((c) => c.choices.map((ch) => ch.delta.content ?? "")).join("");
  assert.equal(text, full.choices[0].message.content);
});

test("tools: a named tool_choice gives a call the client reads, full and streamed", async () => {
  const request = {
    model,
    messages: [{ role: "user", content: "Weather?" }],
    tools: [weather],
    tool_choice: { type: "function", function: { name: "get_weather" } },
    temperature: 1,
    seed: 2,
  };
  const call = await forcedWeatherCall(request);

  const chunks = await collect(await client.chat.completions.create({ ...request, stream: true }));
  const deltas = chunks.flatMap((c) => c.choices.flatMap((ch) => ch.delta.tool_calls ?? []));
  assert.equal(deltas.length, 1);
  assert.equal(deltas[0].function.name, "get_weather");
  assert.equal(deltas[0].function.arguments, call.function.arguments);
  assert.equal(chunks.at(-1).choices[0].finish_reason, "tool_calls");
  // The call and its result go back as history.
  await answerCall(request, call);
});
