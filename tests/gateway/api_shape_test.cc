// What the model APIs refuse in a request's main field is refused by Purser too, naming the
// part that is wrong, rather than forwarded for an upstream to misread.
#include "gateway/api_shape.h"

#include <gtest/gtest.h>

#include "common/json_scan.h"

namespace purser::gateway {
namespace {

// The (message, param) for `field` holding `json`; "ok" when it is well formed.
std::string check(std::string_view field, const std::string& json) {
  auto doc = scanJson(json, 64);
  if (!doc) return "unparsable";
  auto wrong = shapeError(field, *doc);
  return wrong ? wrong->second + ": " + wrong->first : "ok";
}

TEST(ApiShapeTest, MessagesAreObjectsAndTheirContentTextOrParts) {
  EXPECT_EQ(check("messages", R"([{"role":"user","content":"hi"}])"), "ok");
  EXPECT_EQ(check("messages", R"([{"role":"user","content":[{"type":"text","text":"hi"}]}])"),
            "ok");
  EXPECT_EQ(check("messages", R"([{"role":"assistant","content":null,"tool_calls":[]}])"), "ok");
  EXPECT_EQ(check("messages", "[1, 2, 3]"),
            "messages[0]: Invalid type for 'messages[0]': expected an object, but got a number "
            "instead.");
  EXPECT_EQ(check("messages", R"([{"role":"user","content":"a"},"b"])"),
            "messages[1]: Invalid type for 'messages[1]': expected an object, but got a string "
            "instead.");
  EXPECT_EQ(check("messages", R"([{"role":"user","content":{"text":"hi"}}])"),
            "messages[0].content: Invalid type for 'messages[0].content': expected a string or "
            "an array of content parts, but got an object instead.");
  EXPECT_EQ(check("messages", R"([{"role":"user","content":["hi"]}])"),
            "messages[0].content[0]: Invalid type for 'messages[0].content[0]': expected an "
            "object, but got a string instead.");
}

TEST(ApiShapeTest, EmbeddingsInputIsTextTextsTokensOrTokenLists) {
  for (const char* good : {R"("hello")", R"(["a", "b"])", "[1, 2, 3]", "[[1, 2], [3]]"}) {
    EXPECT_EQ(check("input", good), "ok") << good;
  }
  EXPECT_EQ(check("input", "{}"),
            "input: Invalid type for 'input': expected a string, an array of strings, an array "
            "of tokens or an array of token arrays, but got an object instead.");
  EXPECT_EQ(check("input", "[]"), "input: 'input' must not be empty.");
  EXPECT_EQ(check("input", R"(["a", 1])"),
            "input[1]: Invalid type for 'input[1]': expected a string, but got a number instead.");
  EXPECT_EQ(check("input", "[1.5]"),
            "input[0]: Invalid type for 'input[0]': expected a token (a whole number), but got a "
            "number instead.");
  EXPECT_EQ(check("input", "[[1], [\"x\"]]"),
            "input[1]: Invalid type for 'input[1]': expected an array of tokens, but got a "
            "string instead.");
  EXPECT_EQ(check("prompt", "[null]"),
            "prompt[0]: Invalid type for 'prompt[0]': expected a string, a token or an array of "
            "tokens, but got null instead.");
}

}  // namespace
}  // namespace purser::gateway
