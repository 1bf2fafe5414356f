#include "gateway/translate.h"
#include "common/json.h"

#include <fmt/format.h>

#include <chrono>

namespace purser::gateway {

using nlohmann::json;

namespace {

// Readers that tolerate absent, null and mistyped fields (both APIs allow nulls in places, and
// upstreams are not always strict): a default instead of an exception.
std::string str(const json& o, const char* key, const char* def = "") {
  if (o.is_object() && o.contains(key) && o[key].is_string()) return o[key].get<std::string>();
  return def;
}
int64_t num(const json& o, const char* key) {
  if (o.is_object() && o.contains(key)) return jsonInt(o[key]).value_or(0);
  return 0;
}
json obj(const json& o, const char* key) {
  if (o.is_object() && o.contains(key) && o[key].is_object()) return o[key];
  return json::object();
}
json arr(const json& o, const char* key) {
  if (o.is_object() && o.contains(key) && o[key].is_array()) return o[key];
  return json::array();
}
bool flag(const json& o, const char* key) {
  return o.is_object() && o.contains(key) && o[key].is_boolean() && o[key].get<bool>();
}
// A JSON schema, or the empty object schema.
json schema(const json& o, const char* key) {
  if (o.is_object() && o.contains(key) && o[key].is_object()) return o[key];
  return json{{"type", "object"}};
}

int64_t unixSeconds(SystemTime t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

std::string textOf(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (content.is_array()) {
    for (const auto& part : content) {
      if (part.is_object() && str(part, "type") == "text" && part.contains("text") &&
          part["text"].is_string()) {
        if (!out.empty()) out += "\n";
        out += part["text"].get<std::string>();
      }
    }
  }
  return out;
}

std::string openAiEvent(const json& data) { return "data: " + writeJson(data) + "\n\n"; }

std::string anthropicEvent(std::string_view name, const json& data) {
  return fmt::format("event: {}\ndata: {}\n\n", name, writeJson(data));
}

// An OpenAI image part as an Anthropic image block.
json imageBlock(const json& part) {
  std::string url;
  if (part.contains("image_url")) {
    url = part["image_url"].is_string() ? part["image_url"].get<std::string>()
                                        : str(part["image_url"], "url");
  }
  if (url.starts_with("data:")) {
    const size_t semi = url.find(';');
    const size_t comma = url.find(',');
    if (semi != std::string::npos && comma != std::string::npos) {
      return {{"type", "image"},
              {"source",
               {{"type", "base64"},
                {"media_type", url.substr(5, semi - 5)},
                {"data", url.substr(comma + 1)}}}};
    }
  }
  return {{"type", "image"}, {"source", {{"type", "url"}, {"url", url}}}};
}

// Appends a message, merging into the previous one when the role repeats (Anthropic wants
// user and assistant turns to alternate).
void appendTurn(json& messages, const std::string& role, json blocks) {
  if (blocks.empty()) return;  // Anthropic refuses turns without content
  if (!messages.empty() && messages.back()["role"] == role) {
    json& last = messages.back()["content"];
    for (auto& b : blocks) last.push_back(std::move(b));
    return;
  }
  messages.push_back({{"role", role}, {"content", std::move(blocks)}});
}

}  // namespace

std::string openAiFinishReason(const std::string& s) {
  if (s == "max_tokens" || s == "model_context_window_exceeded") return "length";
  if (s == "tool_use") return "tool_calls";
  if (s == "refusal") return "content_filter";
  return "stop";  // end_turn, stop_sequence, pause_turn
}

std::string anthropicStopReason(const std::string& f) {
  if (f == "length") return "max_tokens";
  if (f == "tool_calls" || f == "function_call") return "tool_use";
  if (f == "content_filter") return "refusal";
  return "end_turn";
}

// --- OpenAI chat -> Anthropic messages ---------------------------------------------------------

Result<json> chatToMessagesRequest(const json& chat, const std::string& model,
                                   int64_t default_max_tokens) {
  json out = {{"model", model}};
  int64_t max_tokens = default_max_tokens;
  for (const char* f : {"max_completion_tokens", "max_tokens"}) {
    if (chat.contains(f) && jsonInt(chat[f])) {
      max_tokens = *jsonInt(chat[f]);
      break;
    }
  }
  out["max_tokens"] = max_tokens;
  std::string system;
  json messages = json::array();
  for (const auto& m : arr(chat, "messages")) {
    if (!m.is_object()) return fail(invalidArgument("each message must be an object"));
    const std::string role = str(m, "role");
    const json content = m.contains("content") ? m["content"] : json(nullptr);
    if (role == "system" || role == "developer") {
      if (!system.empty()) system += "\n";
      system += textOf(content);
    } else if (role == "user") {
      json blocks = json::array();
      if (content.is_string() && !content.get<std::string>().empty()) {
        blocks.push_back({{"type", "text"}, {"text", content}});
      } else if (content.is_array()) {
        for (const auto& part : content) {
          const std::string type = str(part, "type");
          const std::string text = str(part, "text");
          // Anthropic refuses empty text blocks.
          if (type == "text" && !text.empty()) blocks.push_back({{"type", "text"}, {"text", text}});
          if (type == "image_url") blocks.push_back(imageBlock(part));
        }
      }
      appendTurn(messages, "user", std::move(blocks));
    } else if (role == "assistant") {
      json blocks = json::array();
      const std::string text = textOf(content);
      if (!text.empty()) blocks.push_back({{"type", "text"}, {"text", text}});
      for (const auto& call : arr(m, "tool_calls")) {
        const json fn = obj(call, "function");
        json input = parseJsonOrDiscarded(str(fn, "arguments", "{}"));
        if (!input.is_object()) input = json::object();
        blocks.push_back({{"type", "tool_use"},
                          {"id", str(call, "id")},
                          {"name", str(fn, "name")},
                          {"input", input}});
      }
      appendTurn(messages, "assistant", std::move(blocks));
    } else if (role == "tool") {
      appendTurn(messages, "user",
                 json::array({{{"type", "tool_result"},
                               {"tool_use_id", str(m, "tool_call_id")},
                               {"content", textOf(content)}}}));
    } else {
      return fail(invalidArgument(fmt::format("unknown message role \"{}\"", role)));
    }
  }
  out["messages"] = messages;
  if (!system.empty()) out["system"] = system;
  if (chat.contains("temperature") && chat["temperature"].is_number()) {
    out["temperature"] = std::min(1.0, chat["temperature"].get<double>());
  }
  // Recent Anthropic models take temperature or top_p, not both; temperature wins.
  if (chat.contains("top_p") && chat["top_p"].is_number() && !out.contains("temperature")) {
    out["top_p"] = chat["top_p"];
  }
  if (chat.contains("stop")) {
    if (chat["stop"].is_string()) out["stop_sequences"] = json::array({chat["stop"]});
    if (chat["stop"].is_array()) out["stop_sequences"] = chat["stop"];
  }
  if (flag(chat, "stream")) out["stream"] = true;
  if (chat.contains("tools") && chat["tools"].is_array()) {
    json tools = json::array();
    for (const auto& t : chat["tools"]) {
      const json fn = obj(t, "function");
      tools.push_back({{"name", str(fn, "name")},
                       {"description", str(fn, "description")},
                       {"input_schema", schema(fn, "parameters")}});
    }
    out["tools"] = tools;
  }
  if (chat.contains("tool_choice")) {
    const json& c = chat["tool_choice"];
    if (c == "auto") out["tool_choice"] = {{"type", "auto"}};
    if (c == "required") out["tool_choice"] = {{"type", "any"}};
    if (c == "none") out["tool_choice"] = {{"type", "none"}};
    if (c.is_object() && c.contains("function")) {
      out["tool_choice"] = {{"type", "tool"}, {"name", str(c["function"], "name")}};
    }
  }
  if (chat.contains("parallel_tool_calls") && chat["parallel_tool_calls"] == false &&
      out.contains("tools")) {
    if (!out.contains("tool_choice")) out["tool_choice"] = {{"type", "auto"}};
    if (out["tool_choice"]["type"] != "none") {
      out["tool_choice"]["disable_parallel_tool_use"] = true;
    }
  }
  if (chat.contains("user") && chat["user"].is_string())
    out["metadata"] = {{"user_id", chat["user"]}};
  return out;
}

json messagesToChatResponse(const json& message, SystemTime now) {
  std::string text;
  json tool_calls = json::array();
  for (const auto& block : arr(message, "content")) {
    const std::string type = str(block, "type");
    if (type == "text") text += str(block, "text");
    if (type == "tool_use") {
      tool_calls.push_back(
          {{"id", str(block, "id")},
           {"type", "function"},
           {"function",
            {{"name", str(block, "name")}, {"arguments", writeJson(obj(block, "input"))}}}});
    }
  }
  json msg = {{"role", "assistant"},
              {"content", text.empty() && !tool_calls.empty() ? json(nullptr) : json(text)}};
  if (!tool_calls.empty()) msg["tool_calls"] = tool_calls;
  const json usage = obj(message, "usage");
  const int64_t cached = num(usage, "cache_read_input_tokens");
  const int64_t prompt =
      num(usage, "input_tokens") + cached + num(usage, "cache_creation_input_tokens");
  const int64_t completion = num(usage, "output_tokens");
  return {{"id", "chatcmpl-" + str(message, "id", "purser")},
          {"object", "chat.completion"},
          {"created", unixSeconds(now)},
          {"model", str(message, "model")},
          {"choices",
           json::array(
               {{{"index", 0},
                 {"message", msg},
                 {"logprobs", nullptr},
                 {"finish_reason", openAiFinishReason(str(message, "stop_reason", "end_turn"))}}})},
          {"usage",
           {{"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"total_tokens", prompt + completion},
            {"prompt_tokens_details", {{"cached_tokens", cached}}}}}};
}

// --- Anthropic messages -> OpenAI chat ---------------------------------------------------------

Result<json> messagesToChatRequest(const json& req, const std::string& model) {
  json messages = json::array();
  if (req.contains("system")) {
    const std::string system = textOf(req["system"]);
    if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  }
  for (const auto& m : arr(req, "messages")) {
    if (!m.is_object()) return fail(invalidArgument("each message must be an object"));
    const std::string role = str(m, "role");
    const json content = m.contains("content") ? m["content"] : json("");
    if (role != "user" && role != "assistant") {
      return fail(invalidArgument(fmt::format("unknown message role \"{}\"", role)));
    }
    if (content.is_string()) {
      messages.push_back({{"role", role}, {"content", content}});
      continue;
    }
    json parts = json::array();
    json tool_calls = json::array();
    std::string text;
    for (const auto& block : content) {
      const std::string type = str(block, "type");
      if (type == "text") {
        parts.push_back({{"type", "text"}, {"text", str(block, "text")}});
        text += str(block, "text");
      } else if (type == "image") {
        const json source = obj(block, "source");
        const std::string url =
            str(source, "type") == "base64"
                ? "data:" + str(source, "media_type") + ";base64," + str(source, "data")
                : str(source, "url");
        parts.push_back({{"type", "image_url"}, {"image_url", {{"url", url}}}});
      } else if (type == "tool_use") {
        tool_calls.push_back(
            {{"id", str(block, "id")},
             {"type", "function"},
             {"function",
              {{"name", str(block, "name")}, {"arguments", writeJson(obj(block, "input"))}}}});
      } else if (type == "tool_result") {
        messages.push_back(
            {{"role", "tool"},
             {"tool_call_id", str(block, "tool_use_id")},
             {"content", block.contains("content") ? textOf(block["content"]) : ""}});
      }
    }
    if (role == "assistant") {
      json msg = {{"role", "assistant"}, {"content", text.empty() ? json(nullptr) : json(text)}};
      if (!tool_calls.empty()) msg["tool_calls"] = tool_calls;
      messages.push_back(msg);
    } else if (!parts.empty()) {
      messages.push_back({{"role", "user"}, {"content", parts}});
    }
  }
  json out = {{"model", model}, {"messages", messages}};
  // OpenAI's current name (its reasoning models refuse the older max_tokens).
  if (req.contains("max_tokens")) out["max_completion_tokens"] = req["max_tokens"];
  for (const char* f : {"temperature", "top_p"}) {
    if (req.contains(f)) out[f] = req[f];
  }
  if (req.contains("stop_sequences")) out["stop"] = req["stop_sequences"];
  if (flag(req, "stream")) out["stream"] = true;
  if (req.contains("tools") && req["tools"].is_array()) {
    json tools = json::array();
    for (const auto& t : req["tools"]) {
      tools.push_back({{"type", "function"},
                       {"function",
                        {{"name", str(t, "name")},
                         {"description", str(t, "description")},
                         {"parameters", schema(t, "input_schema")}}}});
    }
    out["tools"] = tools;
  }
  if (req.contains("tool_choice") && req["tool_choice"].is_object()) {
    const std::string type = str(req["tool_choice"], "type");
    if (type == "auto") out["tool_choice"] = "auto";
    if (type == "any") out["tool_choice"] = "required";
    if (type == "none") out["tool_choice"] = "none";
    if (type == "tool") {
      out["tool_choice"] = {{"type", "function"},
                            {"function", {{"name", str(req["tool_choice"], "name")}}}};
    }
  }
  return out;
}

json chatToMessagesResponse(const json& completion) {
  json choice = arr(completion, "choices").empty() ? json::object() : completion["choices"][0];
  const json msg = obj(choice, "message");
  json content = json::array();
  if (msg.contains("content") && msg["content"].is_string() &&
      !msg["content"].get<std::string>().empty()) {
    content.push_back({{"type", "text"}, {"text", msg["content"]}});
  }
  for (const auto& call : arr(msg, "tool_calls")) {
    const json fn = obj(call, "function");
    json input = parseJsonOrDiscarded(str(fn, "arguments", "{}"));
    if (!input.is_object()) input = json::object();
    content.push_back({{"type", "tool_use"},
                       {"id", str(call, "id")},
                       {"name", str(fn, "name")},
                       {"input", input}});
  }
  const json usage = obj(completion, "usage");
  int64_t cached = 0;
  if (usage.contains("prompt_tokens_details") && usage["prompt_tokens_details"].is_object()) {
    cached = num(usage["prompt_tokens_details"], "cached_tokens");
  }
  const std::string finish = str(choice, "finish_reason", "stop");
  return {{"id", "msg_" + str(completion, "id", "purser")},
          {"type", "message"},
          {"role", "assistant"},
          {"model", str(completion, "model")},
          {"content", content},
          {"stop_reason", anthropicStopReason(finish)},
          {"stop_sequence", nullptr},
          {"usage",
           {{"input_tokens", num(usage, "prompt_tokens") - cached},
            {"output_tokens", num(usage, "completion_tokens")},
            {"cache_read_input_tokens", cached}}}};
}

// --- Streams ------------------------------------------------------------------------------------

std::string MessagesToChatStream::chunk(json delta, json finish_reason) const {
  return openAiEvent({{"id", id_},
                      {"object", "chat.completion.chunk"},
                      {"created", created_},
                      {"model", model_},
                      {"choices", json::array({{{"index", 0},
                                                {"delta", std::move(delta)},
                                                {"logprobs", nullptr},
                                                {"finish_reason", std::move(finish_reason)}}})}});
}

std::vector<TranslatedEvent> MessagesToChatStream::translate(const SseEvent& event) {
  std::vector<TranslatedEvent> out;
  const json data = parseJsonOrDiscarded(event.data);
  if (!data.is_object()) return out;
  const std::string type = event.event.empty() ? str(data, "type") : event.event;
  if (type == "message_start") {
    const json msg = obj(data, "message");
    id_ = "chatcmpl-" + str(msg, "id", "purser");
    model_ = str(msg, "model");
    created_ = unixSeconds(now_);
    const json usage = obj(msg, "usage");
    input_tokens_ = num(usage, "input_tokens") + num(usage, "cache_creation_input_tokens");
    cached_tokens_ = num(usage, "cache_read_input_tokens");
    out.push_back({chunk({{"role", "assistant"}, {"content", ""}}, nullptr)});
  } else if (type == "content_block_start") {
    const json block = obj(data, "content_block");
    if (str(block, "type") == "tool_use") {
      ++tool_index_;
      tool_blocks_[num(data, "index")] = tool_index_;
      out.push_back({chunk(
          {{"tool_calls",
            json::array({{{"index", tool_index_},
                          {"id", str(block, "id")},
                          {"type", "function"},
                          {"function", {{"name", str(block, "name")}, {"arguments", ""}}}}})}},
          nullptr)});
    }
  } else if (type == "content_block_delta") {
    const json delta = obj(data, "delta");
    const std::string kind = str(delta, "type");
    if (kind == "text_delta") {
      out.push_back({chunk({{"content", str(delta, "text")}}, nullptr)});
    } else if (kind == "input_json_delta") {
      // Only for the client's tool calls: server tools (web search and the like) run upstream.
      auto call = tool_blocks_.find(num(data, "index"));
      if (call != tool_blocks_.end()) {
        out.push_back(
            {chunk({{"tool_calls",
                     json::array({{{"index", call->second},
                                   {"function", {{"arguments", str(delta, "partial_json")}}}}})}},
                   nullptr)});
      }
    }
  } else if (type == "message_delta") {
    const json delta = obj(data, "delta");
    finish_reason_ = openAiFinishReason(str(delta, "stop_reason", "end_turn"));
    // Cumulative; a delta without it keeps what was counted.
    if (data.contains("usage")) {
      output_tokens_ = std::max(output_tokens_, num(data["usage"], "output_tokens"));
    }
    out.push_back({chunk(json::object(), finish_reason_)});
  } else if (type == "message_stop") {
    if (include_usage_) {
      const int64_t prompt = input_tokens_ + cached_tokens_;
      out.push_back(
          {openAiEvent({{"id", id_},
                        {"object", "chat.completion.chunk"},
                        {"created", created_},
                        {"model", model_},
                        {"choices", json::array()},
                        {"usage",
                         {{"prompt_tokens", prompt},
                          {"completion_tokens", output_tokens_},
                          {"total_tokens", prompt + output_tokens_},
                          {"prompt_tokens_details", {{"cached_tokens", cached_tokens_}}}}}})});
    }
    out.push_back({"data: [DONE]\n\n", true});
  } else if (type == "error") {
    const json err = obj(data, "error");
    out.push_back({openAiEvent({{"error",
                                 {{"message", str(err, "message", "upstream error")},
                                  {"type", "server_error"},
                                  {"param", nullptr},
                                  {"code", str(err, "type", "api_error")}}}})});
  }
  return out;
}

std::vector<TranslatedEvent> ChatToMessagesStream::start(const json& chunk) {
  started_ = true;
  return {{anthropicEvent("message_start",
                          {{"type", "message_start"},
                           {"message",
                            {{"id", "msg_" + str(chunk, "id", "purser")},
                             {"type", "message"},
                             {"role", "assistant"},
                             {"model", str(chunk, "model")},
                             {"content", json::array()},
                             {"stop_reason", nullptr},
                             {"stop_sequence", nullptr},
                             {"usage", {{"input_tokens", 0}, {"output_tokens", 0}}}}}})}};
}

std::vector<TranslatedEvent> ChatToMessagesStream::closeBlock() {
  std::vector<TranslatedEvent> out;
  if (open_) {
    out.push_back({anthropicEvent("content_block_stop",
                                  {{"type", "content_block_stop"}, {"index", block_}})});
    open_ = false;
  }
  return out;
}

std::vector<TranslatedEvent> ChatToMessagesStream::translate(const SseEvent& event) {
  std::vector<TranslatedEvent> out;
  const auto append = [&out](std::vector<TranslatedEvent> more) {
    for (auto& e : more) out.push_back(std::move(e));
  };
  if (event.data == "[DONE]") {
    if (stopped_) return out;
    stopped_ = true;
    if (!started_) append(start(json::object()));
    append(closeBlock());
    json usage = {{"output_tokens", output_tokens_}};
    if (usage_seen_) {
      usage["input_tokens"] = input_tokens_;
      usage["cache_read_input_tokens"] = cached_tokens_;
    }
    out.push_back({anthropicEvent(
        "message_delta", {{"type", "message_delta"},
                          {"delta",
                           {{"stop_reason", stop_reason_.empty() ? "end_turn" : stop_reason_},
                            {"stop_sequence", nullptr}}},
                          {"usage", usage}})});
    out.push_back({anthropicEvent("message_stop", {{"type", "message_stop"}}), true});
    return out;
  }
  const json chunk = parseJsonOrDiscarded(event.data);
  if (!chunk.is_object()) return out;
  if (chunk.contains("error")) {
    const json err = chunk["error"];
    out.push_back({anthropicEvent(
        "error",
        {{"type", "error"},
         {"error", {{"type", "api_error"}, {"message", str(err, "message", "upstream error")}}}})});
    return out;
  }
  if (!started_) append(start(chunk));
  if (chunk.contains("usage") && chunk["usage"].is_object()) {
    usage_seen_ = true;
    // OpenAI counts cached input inside prompt_tokens; Anthropic apart.
    cached_tokens_ = num(obj(chunk["usage"], "prompt_tokens_details"), "cached_tokens");
    input_tokens_ = std::max<int64_t>(0, num(chunk["usage"], "prompt_tokens") - cached_tokens_);
    output_tokens_ = num(chunk["usage"], "completion_tokens");
  }
  if (!chunk.contains("choices") || !chunk["choices"].is_array() || chunk["choices"].empty())
    return out;
  const json& choice = chunk["choices"][0];
  const json delta = obj(choice, "delta");
  if (delta.contains("content") && delta["content"].is_string() &&
      !delta["content"].get<std::string>().empty()) {
    if (!open_ || !block_is_text_) {
      append(closeBlock());
      ++block_;
      open_ = true;
      block_is_text_ = true;
      out.push_back({anthropicEvent("content_block_start",
                                    {{"type", "content_block_start"},
                                     {"index", block_},
                                     {"content_block", {{"type", "text"}, {"text", ""}}}})});
    }
    out.push_back({anthropicEvent(
        "content_block_delta", {{"type", "content_block_delta"},
                                {"index", block_},
                                {"delta", {{"type", "text_delta"}, {"text", delta["content"]}}}})});
  }
  for (const auto& call : arr(delta, "tool_calls")) {
    const json fn = obj(call, "function");
    // A call is known by its index; some servers repeat its id on every fragment.
    const int64_t index = num(call, "index");
    auto known = tool_blocks_.find(index);
    if (known == tool_blocks_.end()) {
      append(closeBlock());
      ++block_;
      open_ = true;
      block_is_text_ = false;
      known = tool_blocks_.emplace(index, block_).first;
      out.push_back({anthropicEvent("content_block_start", {{"type", "content_block_start"},
                                                            {"index", block_},
                                                            {"content_block",
                                                             {{"type", "tool_use"},
                                                              {"id", str(call, "id")},
                                                              {"name", str(fn, "name")},
                                                              {"input", json::object()}}}})});
    }
    const std::string args = str(fn, "arguments");
    if (!args.empty()) {
      out.push_back(
          {anthropicEvent("content_block_delta",
                          {{"type", "content_block_delta"},
                           {"index", known->second},
                           {"delta", {{"type", "input_json_delta"}, {"partial_json", args}}}})});
    }
  }
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
    stop_reason_ = anthropicStopReason(choice["finish_reason"].get<std::string>());
  }
  return out;
}

}  // namespace purser::gateway
