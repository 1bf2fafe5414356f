#include "gateway/translate.h"

#include <gtest/gtest.h>

namespace purser::gateway {
namespace {

using nlohmann::json;

// When translated answers say they were created: 2026-01-01T00:00:00Z.
const SystemTime kNow = SystemTime(std::chrono::seconds(1767225600));

TEST(TranslateTest, ChatRequestBecomesAMessagesRequest) {
  const json chat = json::parse(R"({
    "model": "chat", "max_tokens": 99, "temperature": 1.5, "stop": "END", "stream": true,
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "developer", "content": "Use metric units."},
      {"role": "user", "content": "Weather in Oslo?"},
      {"role": "user", "content": [{"type": "text", "text": "And Bergen?"},
                                   {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
      {"role": "assistant", "content": null,
       "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "4 C"}
    ],
    "tools": [{"type": "function", "function": {"name": "weather", "description": "d",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "tool_choice": "required"
  })");
  auto m = chatToMessagesRequest(chat, "claude-x", 4096);
  ASSERT_TRUE(m.has_value()) << m.error().message;
  EXPECT_EQ((*m)["model"], "claude-x");
  EXPECT_EQ((*m)["max_tokens"], 99);
  EXPECT_EQ((*m)["system"], "Be brief.\nUse metric units.");
  EXPECT_EQ((*m)["temperature"], 1.0) << "clamped to Anthropic's range";
  EXPECT_EQ((*m)["stop_sequences"], json::array({"END"}));
  EXPECT_EQ((*m)["stream"], true);
  const json& msgs = (*m)["messages"];
  ASSERT_EQ(msgs.size(), 3u) << "the two user turns merge; the tool result is a user turn";
  EXPECT_EQ(msgs[0]["role"], "user");
  ASSERT_EQ(msgs[0]["content"].size(), 3u);
  EXPECT_EQ(msgs[0]["content"][2]["source"]["media_type"], "image/png");
  EXPECT_EQ(msgs[1]["content"][0]["type"], "tool_use");
  EXPECT_EQ(msgs[1]["content"][0]["input"]["city"], "Oslo");
  EXPECT_EQ(msgs[2]["content"][0]["type"], "tool_result");
  EXPECT_EQ(msgs[2]["content"][0]["tool_use_id"], "call_1");
  EXPECT_EQ((*m)["tools"][0]["input_schema"]["properties"]["city"]["type"], "string");
  EXPECT_EQ((*m)["tool_choice"]["type"], "any");
  auto no_max = chatToMessagesRequest(
      json::parse(R"({"messages":[{"role":"user","content":"x"}]})"), "c", 777);
  EXPECT_EQ((*no_max)["max_tokens"], 777) << "Anthropic requires max_tokens: the route's cap";
  EXPECT_FALSE(chatToMessagesRequest(
                   json::parse(R"({"messages":[{"role":"wizard","content":"x"}]})"), "c", 1)
                   .has_value());
}

TEST(TranslateTest, MessagesAnswerBecomesAChatCompletion) {
  const json answer = json::parse(R"({
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
    "content": [{"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}],
    "stop_reason": "tool_use",
    "usage": {"input_tokens": 10, "cache_read_input_tokens": 5, "output_tokens": 7}
  })");
  const json c = messagesToChatResponse(answer, kNow);
  EXPECT_EQ(c["object"], "chat.completion");
  EXPECT_EQ(c["created"], 1767225600) << "the time the gateway was given";
  EXPECT_EQ(c["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(c["choices"][0]["message"]["content"], "Checking.");
  EXPECT_EQ(c["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"city\":\"Oslo\"}");
  EXPECT_EQ(c["usage"]["prompt_tokens"], 15);
  EXPECT_EQ(c["usage"]["prompt_tokens_details"]["cached_tokens"], 5);
  EXPECT_EQ(c["usage"]["completion_tokens"], 7);
  EXPECT_EQ(openAiFinishReason("max_tokens"), "length");
  EXPECT_EQ(openAiFinishReason("end_turn"), "stop");
}

TEST(TranslateTest, MessagesRequestAndChatAnswerTranslateTheOtherWay) {
  const json req = json::parse(R"({
    "model": "claude", "max_tokens": 50, "system": [{"type": "text", "text": "Sys."}],
    "stop_sequences": ["X"],
    "messages": [
      {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}
    ],
    "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "tool", "name": "f"}
  })");
  auto c = messagesToChatRequest(req, "gpt-x");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ((*c)["model"], "gpt-x");
  EXPECT_EQ((*c)["max_completion_tokens"], 50);
  EXPECT_EQ((*c)["stop"], json::array({"X"}));
  const json& msgs = (*c)["messages"];
  ASSERT_EQ(msgs.size(), 4u);
  EXPECT_EQ(msgs[0]["role"], "system");
  EXPECT_EQ(msgs[2]["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
  EXPECT_EQ(msgs[3]["role"], "tool");
  EXPECT_EQ(msgs[3]["tool_call_id"], "t1");
  EXPECT_EQ((*c)["tool_choice"]["function"]["name"], "f");

  const json completion = json::parse(R"({
    "id": "chatcmpl-1", "model": "gpt-x",
    "choices": [{"index": 0, "finish_reason": "length",
                 "message": {"role": "assistant", "content": "Partial"}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 2}}
  })");
  const json m = chatToMessagesResponse(completion);
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["stop_reason"], "max_tokens");
  EXPECT_EQ(m["content"][0]["text"], "Partial");
  EXPECT_EQ(m["usage"]["input_tokens"], 10);
  EXPECT_EQ(m["usage"]["cache_read_input_tokens"], 2);
  EXPECT_EQ(m["usage"]["output_tokens"], 4);
}

std::vector<SseEvent> events(const std::string& stream) {
  SseParser p;
  return *p.feed(stream);
}

TEST(TranslateTest, AnAnthropicStreamBecomesOpenAiChunks) {
  const std::string stream =
      "event: message_start\ndata: "
      "{\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"model\":\"c\","
      "\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n"
      "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"
      "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
      "event: ping\ndata: {\"type\":\"ping\"}\n\n"
      "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
      "\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n"
      "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
      "\"delta\":{\"type\":\"text_delta\",\"text\":\" world\"}}\n\n"
      "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
      "event: message_delta\ndata: "
      "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},"
      "\"usage\":{\"output_tokens\":2}}\n\n"
      "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
  for (bool include_usage : {false, true}) {
    MessagesToChatStream t(include_usage, kNow);
    std::string text, finish;
    json usage;
    bool done_final = false;
    int chunks = 0;
    for (const auto& e : events(stream)) {
      for (const auto& out : t.translate(e)) {
        ++chunks;
        const std::string data = out.raw.substr(6, out.raw.size() - 8);
        if (data == "[DONE]") {
          done_final = out.final;
          continue;
        }
        const json c = json::parse(data);
        if (c.contains("usage")) usage = c["usage"];
        if (!c["choices"].empty()) {
          text += c["choices"][0]["delta"].value("content", "");
          if (c["choices"][0]["finish_reason"].is_string())
            finish = c["choices"][0]["finish_reason"];
        }
      }
    }
    EXPECT_EQ(text, "Hello world");
    EXPECT_EQ(finish, "length");
    EXPECT_TRUE(done_final) << "[DONE] is the final marker";
    EXPECT_EQ(usage.is_null(), !include_usage);
    if (include_usage) {
      EXPECT_EQ(usage["prompt_tokens"], 9);
      EXPECT_EQ(usage["completion_tokens"], 2);
    }
    EXPECT_EQ(chunks, include_usage ? 6 : 5);
  }
}

TEST(TranslateTest, AnOpenAiStreamBecomesAnthropicEvents) {
  const std::string stream =
      "data: "
      "{\"id\":\"c1\",\"model\":\"g\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
      "\"content\":\"\"},\"finish_reason\":null}]}\n\n"
      "data: "
      "{\"id\":\"c1\",\"model\":\"g\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},"
      "\"finish_reason\":null}]}\n\n"
      "data: "
      "{\"id\":\"c1\",\"model\":\"g\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{"
      "\"index\":0,"
      "\"id\":\"call_9\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{"
      "\\\"a\\\"\"}}]},"
      "\"finish_reason\":null}]}\n\n"
      "data: "
      "{\"id\":\"c1\",\"model\":\"g\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{"
      "\"index\":0,"
      "\"function\":{\"arguments\":\":1}\"}}]},\"finish_reason\":null}]}\n\n"
      "data: "
      "{\"id\":\"c1\",\"model\":\"g\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":"
      "\"tool_calls\"}]}\n\n"
      "data: "
      "{\"id\":\"c1\",\"model\":\"g\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_"
      "tokens\":3}}\n\n"
      "data: [DONE]\n\n";
  ChatToMessagesStream t;
  std::vector<std::string> names;
  std::string text, json_args, stop;
  int64_t output = -1;
  bool stop_final = false;
  for (const auto& e : events(stream)) {
    for (const auto& out : t.translate(e)) {
      SseParser p;
      const auto parsed = *p.feed(out.raw);
      ASSERT_EQ(parsed.size(), 1u);
      names.push_back(parsed[0].event);
      const json d = json::parse(parsed[0].data);
      if (parsed[0].event == "content_block_delta") {
        text += d["delta"].value("text", "");
        json_args += d["delta"].value("partial_json", "");
      }
      if (parsed[0].event == "message_delta") {
        stop = d["delta"]["stop_reason"];
        output = d["usage"]["output_tokens"];
      }
      if (parsed[0].event == "message_stop") stop_final = out.final;
    }
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"message_start", "content_block_start", "content_block_delta",
                                      "content_block_stop", "content_block_start",
                                      "content_block_delta", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(text, "Hi");
  EXPECT_EQ(json_args, "{\"a\":1}");
  EXPECT_EQ(stop, "tool_use");
  EXPECT_EQ(output, 3);
  EXPECT_TRUE(stop_final);
}

// Collects the data of translated events (OpenAI chunks or Anthropic events).
std::vector<json> translatedData(const std::vector<TranslatedEvent>& out) {
  std::vector<json> data;
  for (const auto& e : out) {
    const size_t at = e.raw.find("data: ");
    const std::string d = e.raw.substr(at + 6, e.raw.size() - at - 8);
    if (d != "[DONE]") data.push_back(json::parse(d));
  }
  return data;
}

TEST(TranslateTest, NullCountsAndNullFieldsAreTolerated) {
  const json message = json::parse(R"({"id": null, "model": "c", "stop_reason": null,
    "content": [{"type": "text", "text": "ok"}],
    "usage": {"input_tokens": 3, "output_tokens": 2, "cache_read_input_tokens": null,
              "cache_creation_input_tokens": null}})");
  const json chat = messagesToChatResponse(message, kNow);
  EXPECT_EQ(chat["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(chat["choices"][0]["finish_reason"], "stop");
  const json completion = json::parse(R"({"id": "x", "model": "g",
    "choices": [{"message": {"content": "ok"}, "finish_reason": null}],
    "usage": {"prompt_tokens": 4, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": null}}})");
  EXPECT_EQ(chatToMessagesResponse(completion)["usage"]["input_tokens"], 4);
  MessagesToChatStream t(true, kNow);
  const auto start = t.translate(
      {"message_start",
       R"({"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":5,"cache_read_input_tokens":null}}})",
       ""});
  EXPECT_EQ(start.size(), 1u);
}

TEST(TranslateTest, ServerToolInputIsNotSentAsAClientToolCall) {
  MessagesToChatStream t(false, kNow);
  std::vector<TranslatedEvent> out;
  const auto feed = [&](const char* name, const char* data) {
    for (auto& e : t.translate({name, data, ""})) out.push_back(e);
  };
  feed("message_start", R"({"type":"message_start","message":{"id":"m","model":"c"}})");
  feed(
      "content_block_start",
      R"({"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"s1","name":"web_search"}})");
  feed(
      "content_block_delta",
      R"({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"q\":1}"}})");
  feed(
      "content_block_start",
      R"({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t1","name":"f"}})");
  feed(
      "content_block_delta",
      R"({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{}"}})");
  std::string args;
  int calls = 0;
  for (const auto& c : translatedData(out)) {
    for (const auto& call : c["choices"][0]["delta"].value("tool_calls", json::array())) {
      EXPECT_EQ(call["index"], 0);
      if (call.contains("id")) {
        ++calls;
        EXPECT_EQ(call["id"], "t1");
      }
      args += call["function"].value("arguments", "");
    }
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(args, "{}") << "the server tool's input stays upstream";
}

TEST(TranslateTest, ToolCallFragmentsFollowTheirIndexNotTheirId) {
  ChatToMessagesStream t;
  std::vector<TranslatedEvent> out;
  const auto feed = [&](const std::string& data) {
    for (auto& e : t.translate({"", data, ""})) out.push_back(e);
  };
  // Some servers repeat the id on every fragment; parallel calls interleave.
  feed(
      R"({"id":"c","model":"g","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"x\""}}]}}]})");
  feed(
      R"({"id":"c","model":"g","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"arguments":":1}"}}]}}]})");
  feed(
      R"({"id":"c","model":"g","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"{}"}}]},"finish_reason":"tool_calls"}]})");
  feed(
      R"({"id":"c","model":"g","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":6}}})");
  feed("[DONE]");
  std::map<int64_t, std::string> args;
  std::vector<std::string> names;
  json final_usage;
  for (const auto& e : translatedData(out)) {
    if (e["type"] == "content_block_start") names.push_back(e["content_block"]["name"]);
    if (e["type"] == "content_block_delta") {
      args[e["index"].get<int64_t>()] += e["delta"]["partial_json"].get<std::string>();
    }
    if (e["type"] == "message_delta") final_usage = e["usage"];
  }
  EXPECT_EQ(names, (std::vector<std::string>{"f", "g"}));
  EXPECT_EQ(args[0], "{\"x\":1}");
  EXPECT_EQ(args[1], "{}");
  // Cached input is reported apart, as Anthropic does, not twice.
  EXPECT_EQ(final_usage["input_tokens"], 4);
  EXPECT_EQ(final_usage["cache_read_input_tokens"], 6);
  EXPECT_EQ(final_usage["output_tokens"], 2);
}

TEST(TranslateTest, RequestsAvoidWhatTheOtherApiRefuses) {
  const json chat = json::parse(R"({"model": "m", "temperature": 0.2, "top_p": 1,
    "parallel_tool_calls": false,
    "tools": [{"type": "function", "function": {"name": "f"}}],
    "messages": [{"role": "user", "content": ""},
                 {"role": "user", "content": [{"type": "text", "text": ""}, {"type": "text", "text": "hi"}]},
                 {"role": "assistant", "content": null}]})");
  auto m = chatToMessagesRequest(chat, "claude", 100);
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(m->contains("top_p")) << "recent Anthropic models refuse temperature with top_p";
  EXPECT_EQ((*m)["temperature"], 0.2);
  ASSERT_EQ((*m)["messages"].size(), 1u) << "no empty turns or empty text blocks";
  EXPECT_EQ((*m)["messages"][0]["content"].size(), 1u);
  EXPECT_EQ((*m)["tool_choice"]["disable_parallel_tool_use"], true);
  EXPECT_EQ(openAiFinishReason("model_context_window_exceeded"), "length");
}

}  // namespace
}  // namespace purser::gateway
