// Time to first token of streamed chat completions, measured by the client: from sending the
// request to the first SSE chunk that carries answer text (not the response headers).
//   node bench/gateway/ttft.mjs URL KEY MODEL COUNT [EXTRA_HEADERS_JSON]
// Prints {"ttft_ms": [...sorted], "tokens": [...]} — `tokens` counts the text chunks of each
// stream, so a contender that shortens the stream shows it.
const [url, key, model, countText, extra] = process.argv.slice(2);
const count = Number(countText || 20);
const headers = { "content-type": "application/json", ...(extra ? JSON.parse(extra) : {}) };
if (key) headers.authorization = `Bearer ${key}`;
const body = JSON.stringify({
  model,
  messages: [{ role: "user", content: "Stream a long answer." }],
  max_tokens: 100,
  ignore_eos: true,
  stream: true,
});
const ttft = [];
const tokens = [];
for (let i = 0; i < count; i++) {
  const start = process.hrtime.bigint();
  const res = await fetch(url, { method: "POST", headers, body });
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status}: ${await res.text()}`);
  const decoder = new TextDecoder();
  let buffer = "";
  let first = null;
  let n = 0;
  for await (const piece of res.body) {
    buffer += decoder.decode(piece, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split("\n").find((l) => l.startsWith("data: "));
      if (!data || data === "data: [DONE]") continue;
      const chunk = JSON.parse(data.slice(6));
      const text = chunk.choices?.[0]?.delta?.content;
      if (typeof text === "string" && text.length > 0) {
        if (first === null) first = process.hrtime.bigint();
        n++;
      }
    }
  }
  if (first === null) throw new Error(`${url}: a stream without text`);
  ttft.push(Number(first - start) / 1e6);
  tokens.push(n);
}
ttft.sort((a, b) => a - b);
console.log(JSON.stringify({ ttft_ms: ttft, tokens }));
