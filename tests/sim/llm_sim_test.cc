#include "sim/llm_sim.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include "fakes/test_server.h"
#include "http/client.h"

namespace purser::sim {
namespace {

using nlohmann::json;
using purser::testing::runCoroutine;

class LlmSimTest : public ::testing::Test {
 protected:
  void start(LlmSimOptions o) {
    o.ttft = std::chrono::milliseconds(0);
    o.tokens_per_s = 0;
    startTimed(o);
  }

  // With the engine's steps taking time (the options as given).
  void startTimed(LlmSimOptions o) {
    sim = std::make_unique<LlmSim>(o, server.metrics);
    ASSERT_TRUE(sim->addRoutes(server.router).has_value());
    server.start();
  }

  http::ClientResponse post(const std::string& path, const json& body,
                            const std::string& key = "") {
    http::ClientRequest req;
    req.method = http::Method::kPost;
    req.url = server.url(path);
    req.body = body.dump();
    if (!key.empty()) req.headers.add("Authorization", "Bearer " + key);
    auto r = runCoroutine(ctx, client.request(std::move(req)));
    EXPECT_TRUE(r.has_value()) << r.error().toString();
    return r ? *r : http::ClientResponse{};
  }

  // The whole streamed body, and whether it ended cleanly.
  std::pair<std::string, bool> stream(const std::string& path, const json& body) {
    return runCoroutine(ctx, [&]() -> boost::asio::awaitable<std::pair<std::string, bool>> {
      http::ClientRequest req;
      req.method = http::Method::kPost;
      req.url = server.url(path);
      req.body = body.dump();
      auto s = co_await client.stream(std::move(req));
      if (!s) co_return std::pair{std::string(), false};
      std::string all;
      for (;;) {
        auto piece = co_await (*s)->next();
        if (!piece) co_return std::pair{all, false};
        if (!*piece) co_return std::pair{all, true};
        all += **piece;
      }
    }());
  }

  // The value of a sample on /metrics ("name{labels}"), or -1 when absent.
  double metric(const std::string& series) {
    const std::string text = server.metrics.render();
    const size_t at = text.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + series.size() + 2));
  }

  // Runs `n` streamed chats at once; each one's body and whether it ended cleanly.
  std::vector<std::pair<std::string, bool>> streamAll(const std::vector<json>& bodies) {
    std::vector<std::pair<std::string, bool>> out(bodies.size());
    for (size_t i = 0; i < bodies.size(); ++i) {
      boost::asio::co_spawn(
          ctx,
          [&, i]() -> boost::asio::awaitable<void> {
            http::ClientRequest req;
            req.method = http::Method::kPost;
            req.url = server.url("/v1/chat/completions");
            req.body = bodies[i].dump();
            auto s = co_await client.stream(std::move(req));
            if (!s) co_return;
            for (;;) {
              auto piece = co_await (*s)->next();
              if (!piece) co_return;
              if (!*piece) {
                out[i].second = true;
                co_return;
              }
              out[i].first += **piece;
            }
          },
          boost::asio::detached);
    }
    ctx.restart();
    ctx.run();
    return out;
  }

  testing::TestServer server;
  std::unique_ptr<LlmSim> sim;
  boost::asio::io_context ctx;
  http::HttpClient client{ctx, {}};
};

const json kChat = {{"model", "m"},
                    {"messages", {{{"role", "user"}, {"content", "tell me about budgets"}}}},
                    {"max_tokens", 7}};

TEST_F(LlmSimTest, ChatIsDeterministicWithRealUsage) {
  start({});
  auto a = post("/v1/chat/completions", kChat);
  auto b = post("/v1/chat/completions", kChat);
  ASSERT_EQ(a.status, 200);
  const json ja = json::parse(a.body), jb = json::parse(b.body);
  EXPECT_EQ(ja["choices"][0]["message"]["content"], jb["choices"][0]["message"]["content"]);
  EXPECT_EQ(ja["usage"]["completion_tokens"], 7);
  EXPECT_EQ(ja["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(ja["usage"]["prompt_tokens"], countTokens("tell me about budgets\n"));
  EXPECT_EQ(ja["object"], "chat.completion");
}

TEST_F(LlmSimTest, IgnoreEosRunsTheAnswerToMaxTokens) {
  start({});
  json body = kChat;
  body["max_tokens"] = 100;  // more than any natural answer (20 to 59 tokens)
  EXPECT_LT(json::parse(post("/v1/chat/completions", body).body)["usage"]["completion_tokens"],
            100);
  body["ignore_eos"] = true;
  const json full = json::parse(post("/v1/chat/completions", body).body);
  EXPECT_EQ(full["usage"]["completion_tokens"], 100);
  EXPECT_EQ(full["choices"][0]["finish_reason"], "length");
  body["ignore_eos"] = "yes";  // not a boolean: ignored
  EXPECT_LT(json::parse(post("/v1/chat/completions", body).body)["usage"]["completion_tokens"],
            100);
}

TEST_F(LlmSimTest, StreamsChunksWithUsageThenDone) {
  start({});
  json body = kChat;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto [text, clean] = stream("/v1/chat/completions", body);
  ASSERT_TRUE(clean);
  EXPECT_EQ(text.rfind("data: [DONE]\n\n"), text.size() - 14);
  std::string content;
  json usage;
  size_t pos = 0;
  while ((pos = text.find("data: {", pos)) != std::string::npos) {
    const size_t end = text.find("\n\n", pos);
    const json chunk = json::parse(text.substr(pos + 6, end - pos - 6));
    if (chunk.contains("usage")) usage = chunk["usage"];
    if (!chunk["choices"].empty()) content += chunk["choices"][0]["delta"].value("content", "");
    pos = end;
  }
  const json whole = json::parse(post("/v1/chat/completions", kChat).body);
  EXPECT_EQ(content, whole["choices"][0]["message"]["content"]);
  EXPECT_EQ(usage, whole["usage"]) << "streamed usage equals the non-streamed usage";
}

TEST_F(LlmSimTest, AnthropicMessagesStreamTheirEventsInOrder) {
  start({});
  const json body = {{"model", "claude"},
                     {"max_tokens", 3},
                     {"system", "be brief"},
                     {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                     {"stream", true}};
  auto [text, clean] = stream("/v1/messages", body);
  ASSERT_TRUE(clean);
  std::vector<std::string> events;
  size_t pos = 0;
  while ((pos = text.find("event: ", pos)) != std::string::npos) {
    const size_t end = text.find('\n', pos);
    events.push_back(text.substr(pos + 7, end - pos - 7));
    pos = end;
  }
  EXPECT_EQ(events, (std::vector<std::string>{"message_start", "content_block_start", "ping",
                                              "content_block_delta", "content_block_delta",
                                              "content_block_delta", "content_block_stop",
                                              "message_delta", "message_stop"}));
  EXPECT_NE(text.find("\"output_tokens\":3"), std::string::npos);
  json whole_body = body;
  whole_body.erase("stream");
  const json whole = json::parse(post("/v1/messages", whole_body).body);
  EXPECT_EQ(whole["type"], "message");
  EXPECT_EQ(whole["stop_reason"], "max_tokens");
  EXPECT_EQ(whole["usage"]["output_tokens"], 3);
  auto missing = post("/v1/messages", {{"model", "claude"}, {"messages", json::array()}});
  EXPECT_EQ(missing.status, 400);
  EXPECT_EQ(json::parse(missing.body)["error"]["type"], "invalid_request_error");
}

TEST_F(LlmSimTest, FaultsAreInjected) {
  start({.fail_rate = 1.0});
  auto failed = post("/v1/chat/completions", kChat);
  EXPECT_EQ(failed.status, 500);
  EXPECT_EQ(json::parse(failed.body)["error"]["type"], "server_error");
}

TEST_F(LlmSimTest, ARateLimitFaultAnswers429WithRetryAfter) {
  start({});
  EXPECT_EQ(post("/sim/faults", {{"rate_limit_rate", 1.5}}).status, 400);
  ASSERT_EQ(post("/sim/faults", {{"rate_limit_rate", 1}}).status, 200);
  auto limited = post("/v1/chat/completions", kChat);
  EXPECT_EQ(limited.status, 429);
  EXPECT_EQ(json::parse(limited.body)["error"]["type"], "rate_limit_error");
  EXPECT_EQ(limited.headers.get("retry-after").value_or(""), "1");
  ASSERT_EQ(post("/sim/faults", {{"rate_limit_rate", 0}}).status, 200);
  EXPECT_EQ(post("/v1/chat/completions", kChat).status, 200);
}

TEST_F(LlmSimTest, CutStreamsEndWithoutTheirEnding) {
  start({.cut_rate = 1.0});
  json body = kChat;
  body["stream"] = true;
  auto [text, clean] = stream("/v1/chat/completions", body);
  EXPECT_FALSE(clean);
  EXPECT_EQ(text.find("[DONE]"), std::string::npos);
  EXPECT_NE(text.find("data: {"), std::string::npos) << "some bytes came before the cut";
  http::ClientRequest req;
  req.method = http::Method::kPost;
  req.url = server.url("/v1/chat/completions");
  req.body = kChat.dump();
  auto whole = runCoroutine(ctx, client.request(std::move(req)));
  EXPECT_FALSE(whole.has_value()) << "a cut non-streamed request gets no answer at all";
}

TEST_F(LlmSimTest, ModelsKeysAndEmbeddings) {
  start({.models = {"a", "b"}, .api_keys = {"sk-1"}});
  EXPECT_EQ(post("/v1/chat/completions", kChat).status, 401);
  json body = kChat;
  body["model"] = "a";
  EXPECT_EQ(post("/v1/chat/completions", body, "sk-1").status, 200);
  body["model"] = "zzz";
  auto unknown = post("/v1/chat/completions", body, "sk-1");
  EXPECT_EQ(unknown.status, 404);
  auto emb = post("/v1/embeddings", {{"model", "a"}, {"input", {"x", "y"}}}, "sk-1");
  ASSERT_EQ(emb.status, 200);
  EXPECT_EQ(json::parse(emb.body)["data"].size(), 2u);
  EXPECT_EQ(json::parse(emb.body)["usage"]["prompt_tokens"], 2);
  const std::string metrics = server.metrics.render();
  for (const char* name :
       {"vllm:num_requests_running{model_name=\"a\"} 0",
        "vllm:kv_cache_usage_perc{model_name=\"a\"} 0",
        "vllm:prompt_tokens_total{model_name=\"a\"}",
        "vllm:generation_tokens_total{model_name=\"a\"} 7",
        "vllm:request_success_total{model_name=\"a\"} 2", "vllm:time_to_first_token_seconds_bucket",
        "vllm:e2e_request_latency_seconds_count{model_name=\"a\"} 1"}) {
    EXPECT_NE(metrics.find(name), std::string::npos) << name << "\n" << metrics;
  }
}

TEST_F(LlmSimTest, ARequestThatCanNeverFitTheKvCacheIsRefused) {
  start({.kv_cache_tokens = 16});
  json body = kChat;
  body["messages"][0]["content"] = std::string(400, 'x');  // 100 prompt tokens: 7 blocks
  EXPECT_EQ(post("/v1/chat/completions", body).status, 400);
  EXPECT_NE(server.metrics.render().find("vllm:num_requests_running"), std::string::npos);
}

json chat(const std::string& content, int max_tokens) {
  return {{"model", "m"},
          {"messages", {{{"role", "user"}, {"content", content}}}},
          {"max_tokens", max_tokens},
          {"ignore_eos", true},
          {"stream", true},
          {"stream_options", {{"include_usage", true}}}};
}

// The engine under load: a small KV cache and two sequences at a time make requests wait (and,
// when two overlap, push one another out); every stream still ends whole, with its own words.
TEST_F(LlmSimTest, LoadShowsAsQueueingAndPreemptionAndEveryStreamStillEndsWhole) {
  startTimed({.models = {"m"},
              .ttft = std::chrono::milliseconds(0),
              .tokens_per_s = 5000,
              .kv_cache_tokens = 144,  // 9 blocks
              .max_num_seqs = 2});
  std::vector<json> bodies;
  for (int i = 0; i < 6; ++i) {
    // 40 prompt tokens growing by 30 to 70 (5 blocks): two cannot both reach their end.
    bodies.push_back(chat(fmt::format("request {} {}", i, std::string(150, 'a' + i)), 30));
  }
  const auto results = streamAll(bodies);
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_TRUE(results[i].second) << "stream " << i << " did not end cleanly";
    EXPECT_NE(results[i].first.find("[DONE]"), std::string::npos);
    EXPECT_NE(results[i].first.find("\"completion_tokens\":30"), std::string::npos);
  }
  // Whether two of them overlap enough to preempt depends on when they arrive; the engine's
  // own tests (engine_model_test.cc) show preemption deterministically. Here: the counter is
  // exported, and whatever happened, every stream above ended whole.
  EXPECT_NE(metric("vllm:num_preemptions_total{model_name=\"m\"}"), -1) << "not exported";
  EXPECT_EQ(metric("vllm:request_success_total{model_name=\"m\"}"), 6);
  EXPECT_EQ(metric("vllm:generation_tokens_total{model_name=\"m\"}"), 180);
  EXPECT_EQ(metric("vllm:num_requests_running{model_name=\"m\"}"), 0);
  EXPECT_EQ(metric("vllm:num_requests_waiting{model_name=\"m\"}"), 0);
  EXPECT_EQ(metric("vllm:kv_cache_usage_perc{model_name=\"m\"}"), 0);
  // Every request's wait in the queue is observed, and its first token.
  EXPECT_EQ(metric("vllm:request_queue_time_seconds_count{model_name=\"m\"}"), 6);
  EXPECT_EQ(metric("vllm:time_to_first_token_seconds_count{model_name=\"m\"}"), 6);
}

TEST_F(LlmSimTest, ARepeatedPromptIsServedFromThePrefixCache) {
  startTimed({.models = {"m"}, .ttft = std::chrono::milliseconds(0), .tokens_per_s = 5000});
  const std::string prompt(640, 'p');  // 160 tokens: 10 blocks
  for (int i = 0; i < 2; ++i) {
    json body = chat(prompt, 3);
    body["stream"] = false;
    body.erase("stream_options");
    EXPECT_EQ(post("/v1/chat/completions", body).status, 200);
  }
  const double queries = metric("vllm:prefix_cache_queries_total{model_name=\"m\"}");
  const double hits = metric("vllm:prefix_cache_hits_total{model_name=\"m\"}");
  EXPECT_GE(queries, 2 * 160);
  EXPECT_GE(hits, 128);  // the second prompt's full blocks, but for the last
  EXPECT_LT(hits, queries / 2);
}

TEST_F(LlmSimTest, FaultsAreSetAtRunTimeAndTheEngineCanGoDownAndComeBack) {
  startTimed({.models = {"m"}, .ttft = std::chrono::milliseconds(0), .tokens_per_s = 2000});
  auto get = [&](const std::string& path) {
    http::ClientRequest req;
    req.url = server.url(path);
    auto r = runCoroutine(ctx, client.request(std::move(req)));
    return r ? *r : http::ClientResponse{};
  };
  EXPECT_EQ(get("/health").status, 200);
  EXPECT_EQ(json::parse(get("/sim/faults").body)["down"], false);

  auto refused = post("/sim/faults", {{"fail_rate", 2}});
  EXPECT_EQ(refused.status, 400);
  EXPECT_NE(refused.body.find("from 0 to 1"), std::string::npos);
  EXPECT_EQ(post("/sim/faults", {{"gpu_on_fire", true}}).status, 400);
  EXPECT_EQ(post("/sim/faults", json::array()).status, 400);
  EXPECT_EQ(json::parse(get("/sim/faults").body)["fail_rate"], 0)
      << "a refused change changes nothing";

  // Down while a stream runs: the stream is cut; new requests get 500; health says 503.
  bool cut = false;
  runCoroutine(ctx, [&]() -> boost::asio::awaitable<void> {
    http::ClientRequest req;
    req.method = http::Method::kPost;
    req.url = server.url("/v1/chat/completions");
    req.body = chat("a long answer please", 1000).dump();
    auto s = co_await client.stream(std::move(req));
    if (!s) co_return;
    auto first = co_await (*s)->next();
    EXPECT_TRUE(first && *first);
    http::ClientRequest down;
    down.method = http::Method::kPost;
    down.url = server.url("/sim/faults");
    down.body = R"({"down": true, "slow_factor": 2})";
    auto set = co_await client.request(std::move(down));
    EXPECT_TRUE(set && set->status == 200);
    for (;;) {
      auto piece = co_await (*s)->next();
      if (!piece) {
        cut = true;
        co_return;
      }
      if (!*piece) co_return;
    }
  }());
  EXPECT_TRUE(cut) << "a stream in flight is cut when the engine goes down";
  EXPECT_EQ(get("/health").status, 503);
  json whole = chat("hello", 3);
  whole["stream"] = false;
  auto dead = post("/v1/chat/completions", whole);
  EXPECT_EQ(dead.status, 500);
  EXPECT_NE(dead.body.find("engine is dead"), std::string::npos);
  EXPECT_EQ(json::parse(get("/sim/faults").body)["slow_factor"], 2);

  EXPECT_EQ(post("/sim/faults", {{"down", false}, {"slow_factor", 1}}).status, 200);
  EXPECT_EQ(get("/health").status, 200);
  EXPECT_EQ(post("/v1/chat/completions", whole).status, 200);
}

}  // namespace
}  // namespace purser::sim
