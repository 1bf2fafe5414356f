#include "gateway/translate.h"

#include <fmt/format.h>

#include <chrono>

namespace purser::gateway {

using nlohmann::json;

namespace {

int64_t unixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string textOf(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (content.is_array()) {
    for (const auto& part : content) {
      if (part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
          part["text"].is_string()) {
        if (!out.empty()) out += "\n";
        out += part["text"].get<std::string>();
      }
    }
  }
  return out;
}

std::string openAiEvent(const json& data) { return "data: " + data.dump() + "\n\n"; }

std::string anthropicEvent(std::string_view name, const json& data) {
  return fmt::format("event: {}\ndata: {}\n\n", name, data.dump());
}

// An OpenAI image part as an Anthropic image block.
json imageBlock(const json& part) {
  std::string url;
  if (part.contains("image_url")) {
    url = part["image_url"].is_string() ? part["image_url"].get<std::string>()
                                        : part["image_url"].value("url", "");
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
  if (!messages.empty() && messages.back()["role"] == role) {
    json& last = messages.back()["content"];
    for (auto& b : blocks) last.push_back(std::move(b));
    return;
  }
  messages.push_back({{"role", role}, {"content", std::move(blocks)}});
}

}  // namespace

std::string openAiFinishReason(const std::string& s) {
  if (s == "max_tokens") return "length";
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
    if (chat.contains(f) && chat[f].is_number_integer()) {
      max_tokens = chat[f].get<int64_t>();
      break;
    }
  }
  out["max_tokens"] = max_tokens;
  std::string system;
  json messages = json::array();
  for (const auto& m : chat.value("messages", json::array())) {
    if (!m.is_object()) return fail(invalidArgument("each message must be an object"));
    const std::string role = m.value("role", "");
    const json content = m.contains("content") ? m["content"] : json(nullptr);
    if (role == "system" || role == "developer") {
      if (!system.empty()) system += "\n";
      system += textOf(content);
    } else if (role == "user") {
      json blocks = json::array();
      if (content.is_string()) {
        blocks.push_back({{"type", "text"}, {"text", content}});
      } else if (content.is_array()) {
        for (const auto& part : content) {
          const std::string type = part.value("type", "");
          if (type == "text")
            blocks.push_back({{"type", "text"}, {"text", part.value("text", "")}});
          if (type == "image_url") blocks.push_back(imageBlock(part));
        }
      }
      appendTurn(messages, "user", std::move(blocks));
    } else if (role == "assistant") {
      json blocks = json::array();
      const std::string text = textOf(content);
      if (!text.empty()) blocks.push_back({{"type", "text"}, {"text", text}});
      for (const auto& call : m.value("tool_calls", json::array())) {
        const json fn = call.value("function", json::object());
        json input = json::parse(fn.value("arguments", "{}"), nullptr, false);
        if (!input.is_object()) input = json::object();
        blocks.push_back({{"type", "tool_use"},
                          {"id", call.value("id", "")},
                          {"name", fn.value("name", "")},
                          {"input", input}});
      }
      appendTurn(messages, "assistant", std::move(blocks));
    } else if (role == "tool") {
      appendTurn(messages, "user",
                 json::array({{{"type", "tool_result"},
                               {"tool_use_id", m.value("tool_call_id", "")},
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
  if (chat.contains("top_p") && chat["top_p"].is_number()) out["top_p"] = chat["top_p"];
  if (chat.contains("stop")) {
    if (chat["stop"].is_string()) out["stop_sequences"] = json::array({chat["stop"]});
    if (chat["stop"].is_array()) out["stop_sequences"] = chat["stop"];
  }
  if (chat.value("stream", false)) out["stream"] = true;
  if (chat.contains("tools") && chat["tools"].is_array()) {
    json tools = json::array();
    for (const auto& t : chat["tools"]) {
      const json fn = t.value("function", json::object());
      tools.push_back({{"name", fn.value("name", "")},
                       {"description", fn.value("description", "")},
                       {"input_schema", fn.value("parameters", json{{"type", "object"}})}});
    }
    out["tools"] = tools;
  }
  if (chat.contains("tool_choice")) {
    const json& c = chat["tool_choice"];
    if (c == "auto") out["tool_choice"] = {{"type", "auto"}};
    if (c == "required") out["tool_choice"] = {{"type", "any"}};
    if (c == "none") out["tool_choice"] = {{"type", "none"}};
    if (c.is_object() && c.contains("function")) {
      out["tool_choice"] = {{"type", "tool"}, {"name", c["function"].value("name", "")}};
    }
  }
  if (chat.contains("user") && chat["user"].is_string())
    out["metadata"] = {{"user_id", chat["user"]}};
  return out;
}

json messagesToChatResponse(const json& message) {
  std::string text;
  json tool_calls = json::array();
  for (const auto& block : message.value("content", json::array())) {
    const std::string type = block.value("type", "");
    if (type == "text") text += block.value("text", "");
    if (type == "tool_use") {
      tool_calls.push_back({{"id", block.value("id", "")},
                            {"type", "function"},
                            {"function",
                             {{"name", block.value("name", "")},
                              {"arguments", block.value("input", json::object()).dump()}}}});
    }
  }
  json msg = {{"role", "assistant"},
              {"content", text.empty() && !tool_calls.empty() ? json(nullptr) : json(text)}};
  if (!tool_calls.empty()) msg["tool_calls"] = tool_calls;
  const json usage = message.value("usage", json::object());
  const int64_t cached = usage.value("cache_read_input_tokens", int64_t{0});
  const int64_t prompt = usage.value("input_tokens", int64_t{0}) + cached +
                         usage.value("cache_creation_input_tokens", int64_t{0});
  const int64_t completion = usage.value("output_tokens", int64_t{0});
  return {
      {"id", "chatcmpl-" + message.value("id", std::string("purser"))},
      {"object", "chat.completion"},
      {"created", unixNow()},
      {"model", message.value("model", "")},
      {"choices", json::array({{{"index", 0},
                                {"message", msg},
                                {"logprobs", nullptr},
                                {"finish_reason", openAiFinishReason(message.value(
                                                      "stop_reason", std::string("end_turn")))}}})},
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
  for (const auto& m : req.value("messages", json::array())) {
    if (!m.is_object()) return fail(invalidArgument("each message must be an object"));
    const std::string role = m.value("role", "");
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
      const std::string type = block.value("type", "");
      if (type == "text") {
        parts.push_back({{"type", "text"}, {"text", block.value("text", "")}});
        text += block.value("text", "");
      } else if (type == "image") {
        const json source = block.value("source", json::object());
        const std::string url =
            source.value("type", "") == "base64"
                ? "data:" + source.value("media_type", "") + ";base64," + source.value("data", "")
                : source.value("url", "");
        parts.push_back({{"type", "image_url"}, {"image_url", {{"url", url}}}});
      } else if (type == "tool_use") {
        tool_calls.push_back({{"id", block.value("id", "")},
                              {"type", "function"},
                              {"function",
                               {{"name", block.value("name", "")},
                                {"arguments", block.value("input", json::object()).dump()}}}});
      } else if (type == "tool_result") {
        messages.push_back(
            {{"role", "tool"},
             {"tool_call_id", block.value("tool_use_id", "")},
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
  if (req.contains("max_tokens")) out["max_tokens"] = req["max_tokens"];
  for (const char* f : {"temperature", "top_p"}) {
    if (req.contains(f)) out[f] = req[f];
  }
  if (req.contains("stop_sequences")) out["stop"] = req["stop_sequences"];
  if (req.value("stream", false)) out["stream"] = true;
  if (req.contains("tools") && req["tools"].is_array()) {
    json tools = json::array();
    for (const auto& t : req["tools"]) {
      tools.push_back({{"type", "function"},
                       {"function",
                        {{"name", t.value("name", "")},
                         {"description", t.value("description", "")},
                         {"parameters", t.value("input_schema", json{{"type", "object"}})}}}});
    }
    out["tools"] = tools;
  }
  if (req.contains("tool_choice") && req["tool_choice"].is_object()) {
    const std::string type = req["tool_choice"].value("type", "");
    if (type == "auto") out["tool_choice"] = "auto";
    if (type == "any") out["tool_choice"] = "required";
    if (type == "none") out["tool_choice"] = "none";
    if (type == "tool") {
      out["tool_choice"] = {{"type", "function"},
                            {"function", {{"name", req["tool_choice"].value("name", "")}}}};
    }
  }
  return out;
}

json chatToMessagesResponse(const json& completion) {
  json choice = completion.value("choices", json::array()).empty() ? json::object()
                                                                   : completion["choices"][0];
  const json msg = choice.value("message", json::object());
  json content = json::array();
  if (msg.contains("content") && msg["content"].is_string() &&
      !msg["content"].get<std::string>().empty()) {
    content.push_back({{"type", "text"}, {"text", msg["content"]}});
  }
  for (const auto& call : msg.value("tool_calls", json::array())) {
    const json fn = call.value("function", json::object());
    json input = json::parse(fn.value("arguments", "{}"), nullptr, false);
    if (!input.is_object()) input = json::object();
    content.push_back({{"type", "tool_use"},
                       {"id", call.value("id", "")},
                       {"name", fn.value("name", "")},
                       {"input", input}});
  }
  const json usage = completion.value("usage", json::object());
  int64_t cached = 0;
  if (usage.contains("prompt_tokens_details") && usage["prompt_tokens_details"].is_object()) {
    cached = usage["prompt_tokens_details"].value("cached_tokens", int64_t{0});
  }
  const std::string finish = choice.value("finish_reason", json("stop")).is_string()
                                 ? choice.value("finish_reason", std::string("stop"))
                                 : std::string("stop");
  return {{"id", "msg_" + completion.value("id", std::string("purser"))},
          {"type", "message"},
          {"role", "assistant"},
          {"model", completion.value("model", "")},
          {"content", content},
          {"stop_reason", anthropicStopReason(finish)},
          {"stop_sequence", nullptr},
          {"usage",
           {{"input_tokens", usage.value("prompt_tokens", int64_t{0}) - cached},
            {"output_tokens", usage.value("completion_tokens", int64_t{0})},
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
  const json data = json::parse(event.data, nullptr, false);
  if (!data.is_object()) return out;
  const std::string type = event.event.empty() ? data.value("type", "") : event.event;
  if (type == "message_start") {
    const json msg = data.value("message", json::object());
    id_ = "chatcmpl-" + msg.value("id", std::string("purser"));
    model_ = msg.value("model", "");
    created_ = unixNow();
    const json usage = msg.value("usage", json::object());
    input_tokens_ = usage.value("input_tokens", int64_t{0}) +
                    usage.value("cache_creation_input_tokens", int64_t{0});
    cached_tokens_ = usage.value("cache_read_input_tokens", int64_t{0});
    out.push_back({chunk({{"role", "assistant"}, {"content", ""}}, nullptr)});
  } else if (type == "content_block_start") {
    const json block = data.value("content_block", json::object());
    if (block.value("type", "") == "tool_use") {
      ++tool_index_;
      out.push_back({chunk(
          {{"tool_calls",
            json::array({{{"index", tool_index_},
                          {"id", block.value("id", "")},
                          {"type", "function"},
                          {"function", {{"name", block.value("name", "")}, {"arguments", ""}}}}})}},
          nullptr)});
    }
  } else if (type == "content_block_delta") {
    const json delta = data.value("delta", json::object());
    const std::string kind = delta.value("type", "");
    if (kind == "text_delta") {
      out.push_back({chunk({{"content", delta.value("text", "")}}, nullptr)});
    } else if (kind == "input_json_delta") {
      out.push_back({chunk(
          {{"tool_calls",
            json::array({{{"index", std::max(tool_index_, 0)},
                          {"function", {{"arguments", delta.value("partial_json", "")}}}}})}},
          nullptr)});
    }
  } else if (type == "message_delta") {
    const json delta = data.value("delta", json::object());
    finish_reason_ = openAiFinishReason(delta.value("stop_reason", json("end_turn")).is_string()
                                            ? delta.value("stop_reason", std::string("end_turn"))
                                            : std::string("end_turn"));
    if (data.contains("usage"))
      output_tokens_ = data["usage"].value("output_tokens", output_tokens_);
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
    const json err = data.value("error", json::object());
    out.push_back({openAiEvent({{"error",
                                 {{"message", err.value("message", "upstream error")},
                                  {"type", "server_error"},
                                  {"param", nullptr},
                                  {"code", err.value("type", "api_error")}}}})});
  }
  return out;
}

std::vector<TranslatedEvent> ChatToMessagesStream::start(const json& chunk) {
  started_ = true;
  return {{anthropicEvent("message_start",
                          {{"type", "message_start"},
                           {"message",
                            {{"id", "msg_" + chunk.value("id", std::string("purser"))},
                             {"type", "message"},
                             {"role", "assistant"},
                             {"model", chunk.value("model", "")},
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
    if (usage_seen_) usage["input_tokens"] = input_tokens_;
    out.push_back({anthropicEvent(
        "message_delta", {{"type", "message_delta"},
                          {"delta",
                           {{"stop_reason", stop_reason_.empty() ? "end_turn" : stop_reason_},
                            {"stop_sequence", nullptr}}},
                          {"usage", usage}})});
    out.push_back({anthropicEvent("message_stop", {{"type", "message_stop"}}), true});
    return out;
  }
  const json chunk = json::parse(event.data, nullptr, false);
  if (!chunk.is_object()) return out;
  if (chunk.contains("error")) {
    const json err = chunk["error"];
    out.push_back({anthropicEvent(
        "error",
        {{"type", "error"},
         {"error",
          {{"type", "api_error"}, {"message", err.value("message", "upstream error")}}}})});
    return out;
  }
  if (!started_) append(start(chunk));
  if (chunk.contains("usage") && chunk["usage"].is_object()) {
    usage_seen_ = true;
    input_tokens_ = chunk["usage"].value("prompt_tokens", int64_t{0});
    output_tokens_ = chunk["usage"].value("completion_tokens", int64_t{0});
  }
  if (!chunk.contains("choices") || !chunk["choices"].is_array() || chunk["choices"].empty())
    return out;
  const json& choice = chunk["choices"][0];
  const json delta = choice.value("delta", json::object());
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
  for (const auto& call : delta.value("tool_calls", json::array())) {
    const json fn = call.value("function", json::object());
    if (call.contains("id") && call["id"].is_string()) {
      append(closeBlock());
      ++block_;
      open_ = true;
      block_is_text_ = false;
      out.push_back({anthropicEvent("content_block_start", {{"type", "content_block_start"},
                                                            {"index", block_},
                                                            {"content_block",
                                                             {{"type", "tool_use"},
                                                              {"id", call["id"]},
                                                              {"name", fn.value("name", "")},
                                                              {"input", json::object()}}}})});
    }
    const std::string args = fn.value("arguments", "");
    if (!args.empty() && open_) {
      out.push_back(
          {anthropicEvent("content_block_delta",
                          {{"type", "content_block_delta"},
                           {"index", block_},
                           {"delta", {{"type", "input_json_delta"}, {"partial_json", args}}}})});
    }
  }
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
    stop_reason_ = anthropicStopReason(choice["finish_reason"].get<std::string>());
  }
  return out;
}

}  // namespace purser::gateway
