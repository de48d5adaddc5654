// The Vercel AI SDK's OpenAI provider, as an app uses it, against `cordon serve`'s gateway:
// `createOpenAI({baseURL, apiKey})` and its default language model, which speaks the Responses
// API. Run by tests/gateway/test_responses_clients.py, which checks what reached the model
// server; this prints what the app got, as one JSON line.
//
// Environment: CORDON_URL (the gateway, e.g. http://127.0.0.1:PORT/v1), CORDON_TOKEN, and
// CORDON_NPM_CLIENTS (the folder `make gateway-test` installed `ai` and `@ai-sdk/openai` in).

import { createRequire } from "node:module";
import { join } from "node:path";

const require = createRequire(join(process.env.CORDON_NPM_CLIENTS, "package.json"));
const { generateText, streamText, jsonSchema, stepCountIs, tool } = require("ai");
const { createOpenAI } = require("@ai-sdk/openai");

// What the SDK sends, seen on its way out (the SDK's own `fetch` option), unchanged.
const sent = [];
const openai = createOpenAI({
  baseURL: process.env.CORDON_URL,
  apiKey: process.env.CORDON_TOKEN,
  fetch: async (url, init) => {
    sent.push({ url: String(url), body: JSON.parse(init.body) });
    return fetch(url, init);
  },
});
const model = openai("gpt-cordon");

const asked = [];
const tools = {
  get_weather: tool({
    description: "The weather in a city.",
    inputSchema: jsonSchema({
      type: "object",
      properties: { city: { type: "string" } },
      required: ["city"],
      additionalProperties: false,
    }),
    execute: async ({ city }) => {
      asked.push(city);
      return `sunny in ${city}`;
    },
  }),
};

const session = (step) => step.response.headers?.["x-cordon-session"];

// A turn whose model calls a Cordon tool and the app's own tool: the SDK runs its tool and
// sends the result back, in a second request.
const prompt = "How many orders, and the weather in Oslo?";
const first = await generateText({
  model,
  system: "Be brief.",
  prompt,
  tools,
  stopWhen: stepCountIs(3),
  temperature: 0.2,
  maxOutputTokens: 300,
});

// The next user message, after the whole conversation so far (the SDK refers to the earlier
// answer by its item id).
const second = await generateText({
  model,
  system: "Be brief.",
  messages: [
    { role: "user", content: prompt },
    ...first.response.messages,
    { role: "user", content: "And tomorrow?" },
  ],
  tools,
});

// Streamed, with a Cordon tool run in between.
const streamed = streamText({ model, prompt: "6 times 7?" });
const deltas = [];
for await (const delta of streamed.textStream) {
  deltas.push(delta);
}
const streamedResponse = await streamed.response;
const streamedUsage = await streamed.usage;

console.log(
  JSON.stringify({
    first: {
      text: first.text,
      steps: first.steps.length,
      sessions: first.steps.map(session),
      responseIds: first.steps.map((s) => s.response.id),
      toolCalls: first.steps.flatMap((s) => s.toolCalls.map((c) => [c.toolName, c.input])),
      usage: first.totalUsage,
    },
    asked,
    second: { text: second.text, session: session(second.steps[0]) },
    streamed: {
      deltas,
      text: await streamed.text,
      session: streamedResponse.headers?.["x-cordon-session"],
      id: streamedResponse.id,
      outputTokens: streamedUsage.outputTokens,
    },
    sent,
  }),
);
