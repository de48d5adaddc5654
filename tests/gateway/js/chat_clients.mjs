// Chat Completions clients of the npm registry against Cordon's gateway: the official `openai`
// package and the Vercel AI SDK's OpenAI provider in its Chat Completions mode, each with the
// settings their users set. Prints one JSON object of what each client got back; the pytest
// that runs this checks what reached the model.
import OpenAI from "openai";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText } from "ai";

const baseURL = process.env.GATEWAY_URL;
const apiKey = process.env.GATEWAY_TOKEN;
const model = "gpt-cordon";
const ask = [{ role: "user", content: "What do the orders add up to?" }];
const out = {};

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const whole = await client.chat.completions.create({
  model,
  messages: ask,
  temperature: 0.2,
  max_tokens: 256,
  top_p: 0.9,
  stop: ["\n\n\n"],
  seed: 11,
});
out.openai_whole = whole.choices[0].message.content;
const stream = await client.chat.completions.create({
  model,
  messages: ask,
  stream: true,
  stream_options: { include_usage: true },
  max_completion_tokens: 128,
  response_format: { type: "json_object" },
});
let said = "";
let usage = null;
for await (const chunk of stream) {
  said += chunk.choices[0]?.delta?.content ?? "";
  usage = chunk.usage ?? usage;
}
out.openai_stream = said;
out.openai_stream_usage = usage;

const provider = createOpenAI({ baseURL, apiKey });
const generated = await generateText({
  model: provider.chat(model),
  prompt: "What do the orders add up to?",
  temperature: 0.3,
  maxOutputTokens: 64,
  maxRetries: 0,
});
out.vercel_generate = generated.text;
const streamed = streamText({
  model: provider.chat(model),
  prompt: "What do the orders add up to?",
  maxOutputTokens: 32,
  seed: 5,
  maxRetries: 0,
});
let text = "";
for await (const part of streamed.textStream) {
  text += part;
}
out.vercel_stream = text;
console.log(JSON.stringify(out));
