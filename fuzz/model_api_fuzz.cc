// Fuzzes what the gateway does with model API bodies and upstream answers that are not its own:
// client requests of each API translated for the other (OpenAI chat <-> Anthropic messages),
// upstream answers translated back, and upstream streams split into events and translated event
// by event. The first byte picks what the rest is. A JSON type error (nlohmann's exception) is
// the gateway's documented way of refusing a field of the wrong type; anything else is a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/json.h"
#include "gateway/sse.h"
#include "gateway/translate.h"

namespace gw = purser::gateway;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 6;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (mode < 4) {
      auto body = purser::parseJson(rest, 64);
      if (!body) return 0;
      switch (mode) {
        case 0:
          (void)gw::chatToMessagesRequest(*body, "m", 100);
          break;
        case 1:
          (void)gw::messagesToChatRequest(*body, "m");
          break;
        case 2:
          (void)purser::writeJson(gw::messagesToChatResponse(*body, purser::SystemTime()));
          break;
        case 3:
          (void)purser::writeJson(gw::chatToMessagesResponse(*body));
          break;
      }
      return 0;
    }
    // An upstream stream, in pieces of 7 bytes, through the parser and a translator.
    gw::SseParser parser(4096);
    gw::MessagesToChatStream to_chat(/*include_usage=*/true, purser::SystemTime());
    gw::ChatToMessagesStream to_messages;
    for (size_t i = 0; i < rest.size(); i += 7) {
      auto events = parser.feed(rest.substr(i, 7));
      if (!events) break;
      for (const auto& e : *events) {
        if (mode == 4) {
          (void)to_chat.translate(e);
        } else {
          (void)to_messages.translate(e);
        }
      }
    }
  } catch (const nlohmann::json::exception&) {
  }
  return 0;
}
