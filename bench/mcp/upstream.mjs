// A minimal MCP server for the benchmark: Streamable HTTP, no sessions, one tool `echo` answered
// as a JSON object at once — so what the benchmark measures is the path, not the server.
// Prints "listening on URL".
import { createServer } from "node:http";

const server = createServer((req, res) => {
  let body = "";
  req.on("data", (d) => (body += d));
  req.on("end", () => {
    const m = JSON.parse(body);
    if (m.id === undefined) return res.writeHead(202).end();
    let result;
    if (m.method === "initialize") {
      result = { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} },
        serverInfo: { name: "bench", version: "1" } };
    } else if (m.method === "tools/list") {
      result = { tools: [{ name: "echo", inputSchema: { type: "object" } }] };
    } else {
      result = { content: [{ type: "text", text: m.params?.arguments?.text ?? "" }] };
    }
    const out = JSON.stringify({ jsonrpc: "2.0", id: m.id, result });
    res.writeHead(200, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(out) })
      .end(out);
  });
});
server.listen(Number(process.argv[2] ?? 0), "127.0.0.1", () =>
  console.log(`listening on http://127.0.0.1:${server.address().port}/mcp`));
