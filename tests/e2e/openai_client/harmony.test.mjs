// drift serve on GPT-OSS (harmony) through the official OpenAI Node client: a forced tool call, full and
// streamed, where the client's own stream accumulator assembles the call from the pieces harmony streams;
// reasoning_effort accepted; the call and its result sent back as history; a forced call among several
// tools refused as BadRequestError. run.sh serves a copy of the gpt_oss fixture that speaks harmony.
import assert from "node:assert/strict";
import { test } from "node:test";
import OpenAI from "openai";
import { answerCall, client, forcedWeatherCall, model, weather } from "./common.mjs";

const request = {
  model,
  messages: [
    { role: "system", content: "Be brief." },
    { role: "user", content: "Weather?" },
  ],
  tools: [weather],
  tool_choice: { type: "function", function: { name: "get_weather" } },
  reasoning_effort: "low",
  temperature: 1,
  seed: 3,
};

test("harmony: a forced call, full and assembled by the client from streamed pieces", async () => {
  const call = await forcedWeatherCall(request);

  const stream = client.chat.completions.stream(request);
  let pieces = 0;
  stream.on("chunk", (chunk) => (pieces += chunk.choices[0]?.delta?.tool_calls?.length ?? 0));
  const assembled = await stream.finalChatCompletion();
  assert.ok(pieces > 1, `harmony streams a call's arguments in pieces, got ${pieces}`);
  assert.equal(assembled.choices[0].finish_reason, "tool_calls");
  assert.deepEqual(assembled.choices[0].message.tool_calls[0].function, call.function);

  // The call and its result go back as history (rendered as harmony messages).
  await answerCall(request, call);
});

test("harmony: a forced call among several tools is a BadRequestError on tool_choice", async () => {
  const time = { type: "function", function: { name: "get_time" } };
  await assert.rejects(client.chat.completions.create({ ...request, tools: [weather, time], tool_choice: "required" }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    assert.equal(e.param, "tool_choice");
    return true;
  });
});
