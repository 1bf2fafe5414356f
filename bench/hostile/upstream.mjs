// Upstreams for bench/hostile/run.sh. With EVENTS > 0, a hostile one: every chat completion is
// answered with a stream of EVENTS server-sent events of EVENT_BYTES each (the largest a provider
// allows), then [DONE]. With EVENTS = 0, a sink: the body is read and dropped, and a tiny answer
// comes back (so the cost of a huge request body is Purser's alone).
//   node upstream.mjs PORT EVENT_BYTES EVENTS
import http from "node:http";

const [port, eventBytes, events] = process.argv.slice(2).map(Number);
const filler = "x".repeat(Math.max(0, eventBytes - 120));
const event = `data: {"choices":[{"index":0,"delta":{"content":"${filler}"}}]}\n\n`;
http
  .createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      if (events === 0) {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(
          '{"id":"s","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}',
        );
        return;
      }
      res.writeHead(200, { "content-type": "text/event-stream" });
      for (let i = 0; i < events; i++) res.write(event);
      res.end('data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":3}}\n\ndata: [DONE]\n\n');
    });
  })
  .listen(port, "127.0.0.1", () => console.log(`listening on ${port}`));
