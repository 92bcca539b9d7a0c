// What the client tests share: the client run.sh points at the server, and a tool with its round trip.
import assert from "node:assert/strict";
import OpenAI from "openai";

export const model = process.env.DRIFT_MODEL;
export const client = new OpenAI({ baseURL: process.env.DRIFT_URL, apiKey: process.env.DRIFT_API_KEY, maxRetries: 0 });

export const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string", maxLength: 10 } },
      required: ["city"],
      additionalProperties: false,
    },
  },
};

// The one weather call a full response to a forced `request` made, checked.
export async function forcedWeatherCall(request) {
  const full = await client.chat.completions.create(request);
  assert.equal(full.choices[0].finish_reason, "tool_calls");
  const call = full.choices[0].message.tool_calls[0];
  assert.equal(call.type, "function");
  assert.equal(call.function.name, "get_weather");
  assert.equal(typeof JSON.parse(call.function.arguments).city, "string");
  return call;
}

// Sends `call` (made for `request`) and its result back as history; the server must answer.
export async function answerCall(request, call) {
  const after = await client.chat.completions.create({
    model,
    messages: [
      ...request.messages,
      { role: "assistant", content: null, tool_calls: [call] },
      { role: "tool", tool_call_id: call.id, content: "sunny" },
    ],
    tools: request.tools,
    max_tokens: 4,
  });
  assert.equal(after.choices.length, 1);
}
