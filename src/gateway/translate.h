// Translation between OpenAI chat completions and Anthropic messages, so one model alias can be
// served by — and fall back across — both kinds of provider. Requests, whole answers and the
// streaming events of each are translated: system prompts, text, tools and tool results, stop
// reasons and usage. Pure functions of JSON values; table-tested.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "gateway/sse.h"

namespace purser::gateway {

// OpenAI chat request -> Anthropic messages request for `model`. `default_max_tokens` fills
// Anthropic's required max_tokens when the request sets none.
Result<nlohmann::json> chatToMessagesRequest(const nlohmann::json& chat, const std::string& model,
                                             int64_t default_max_tokens);
// Anthropic messages answer -> OpenAI chat completion, `created` at `now`.
nlohmann::json messagesToChatResponse(const nlohmann::json& message, SystemTime now);

// Anthropic messages request -> OpenAI chat request for `model`.
Result<nlohmann::json> messagesToChatRequest(const nlohmann::json& messages,
                                             const std::string& model);
// OpenAI chat completion -> Anthropic messages answer.
nlohmann::json chatToMessagesResponse(const nlohmann::json& completion);

// A translated stream event: its bytes, and whether it is the stream's final marker (which the
// gateway holds until the usage is settled).
struct TranslatedEvent {
  std::string raw;
  bool final = false;
};

// Anthropic stream events -> OpenAI chat.completion.chunk events (and "[DONE]").
class MessagesToChatStream {
 public:
  // `include_usage`: the client asked for the usage chunk (stream_options.include_usage); the
  // chunks say they were `created` at `now`.
  MessagesToChatStream(bool include_usage, SystemTime now)
      : include_usage_(include_usage), now_(now) {}
  std::vector<TranslatedEvent> translate(const SseEvent& event);

 private:
  std::string chunk(nlohmann::json delta, nlohmann::json finish_reason) const;
  bool include_usage_;
  SystemTime now_;
  std::string id_ = "chatcmpl-purser";
  std::string model_;
  int64_t created_ = 0;
  int64_t input_tokens_ = 0;
  int64_t cached_tokens_ = 0;
  int64_t output_tokens_ = 0;
  int tool_index_ = -1;                 // OpenAI's index of the current tool call
  std::map<int64_t, int> tool_blocks_;  // Anthropic content block index -> OpenAI tool index
  std::string finish_reason_;
};

// OpenAI chat.completion.chunk events -> Anthropic stream events.
class ChatToMessagesStream {
 public:
  std::vector<TranslatedEvent> translate(const SseEvent& event);

 private:
  std::vector<TranslatedEvent> start(const nlohmann::json& chunk);
  std::vector<TranslatedEvent> closeBlock();
  bool started_ = false;
  bool stopped_ = false;
  int block_ = -1;     // index of the latest content block
  bool open_ = false;  // whether that block is still open
  bool block_is_text_ = false;
  std::string stop_reason_;
  int64_t input_tokens_ = 0;
  int64_t cached_tokens_ = 0;
  int64_t output_tokens_ = 0;
  bool usage_seen_ = false;
  std::map<int64_t, int> tool_blocks_;  // OpenAI tool call index -> Anthropic block index
};

std::string openAiFinishReason(const std::string& anthropic_stop_reason);
std::string anthropicStopReason(const std::string& openai_finish_reason);

}  // namespace purser::gateway
