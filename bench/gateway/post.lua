-- wrk script: POST a small chat completion; BENCH_KEY and BENCH_MODEL come from the environment.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local key = os.getenv("BENCH_KEY")
if key and key ~= "" then wrk.headers["Authorization"] = "Bearer " .. key end
wrk.body = '{"model":"' .. (os.getenv("BENCH_MODEL") or "bench") ..
  '","messages":[{"role":"user","content":"Say something short."}],"max_tokens":16}'
