// Streams one chat completion through the router's proxy mode with the
// official OpenAI SDK, as an OpenAI-speaking RL framework would, and
// prints one line per chunk ("chunk <content>"), then "done <policy
// index> <chunks>". Usage: node stream_chat.mjs ROUTER_URL [TOKEN]
import OpenAI from "openai";

const [base, token] = process.argv.slice(2);
const client = new OpenAI({
  baseURL: base + "/v1",
  apiKey: token || "unused",
  maxRetries: 0,
  defaultHeaders: { "X-Session-ID": "node-sdk-episode" },
});

const { data: stream, response } = await client.chat.completions
  .create({
    model: "fake-policy",
    stream: true,
    max_tokens: 8,
    messages: [{ role: "user", content: "hello" }],
  })
  .withResponse();

let chunks = 0;
for await (const chunk of stream) {
  chunks++;
  console.log("chunk " + (chunk.choices[0]?.delta?.content ?? ""));
}
console.log("done " + response.headers.get("x-policy-index") + " " + chunks);
