-- wrk script: POST a small chat completion. From the environment: BENCH_KEY (a bearer key),
-- BENCH_MODEL, and BENCH_HEADERS ("name: value" pairs separated by "|") for contenders that
-- route by header.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local key = os.getenv("BENCH_KEY")
if key and key ~= "" then wrk.headers["Authorization"] = "Bearer " .. key end
local extra = os.getenv("BENCH_HEADERS") or ""
for pair in string.gmatch(extra, "[^|]+") do
  local name, value = string.match(pair, "^%s*([^:]+):%s*(.-)%s*$")
  if name then wrk.headers[name] = value end
end
wrk.body = '{"model":"' .. (os.getenv("BENCH_MODEL") or "bench") ..
  '","messages":[{"role":"user","content":"Say something short."}],"max_tokens":16,"ignore_eos":true}'
