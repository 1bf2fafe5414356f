#include "common/json_scan.h"

#include <gtest/gtest.h>

#include "fakes/mutate.h"

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/json.h"

namespace purser {
namespace {

TEST(JsonScanTest, ReadsFieldsWithoutBuildingADocument) {
  const std::string text =
      R"( {"model":"gpt","stream":true,"max_tokens":16,"n":-3,"f":1.5,"e":1e3,"z":null,)"
      R"("messages":[{"role":"user","content":"hi \"there\" \u00e9 \ud83d\ude00"}],"o":{}} )";
  auto doc = scanJson(text);
  ASSERT_TRUE(doc.has_value()) << doc.error().message;
  ASSERT_TRUE(doc->isObject());
  EXPECT_EQ(doc->text().front(), '{');
  EXPECT_EQ(doc->text().back(), '}');
  EXPECT_EQ(doc->get("model")->string(), "gpt");
  EXPECT_EQ(doc->get("model")->text(), "\"gpt\"");
  EXPECT_EQ(doc->get("stream")->boolean(), true);
  EXPECT_EQ(doc->get("max_tokens")->integer(), 16);
  EXPECT_EQ(doc->get("n")->integer(), -3);
  EXPECT_FALSE(doc->get("f")->integer().has_value());
  EXPECT_FALSE(doc->get("e")->integer().has_value());
  EXPECT_TRUE(doc->get("z")->isNull());
  EXPECT_FALSE(doc->get("absent").has_value());
  EXPECT_TRUE(doc->get("o")->empty());
  auto messages = doc->get("messages");
  ASSERT_TRUE(messages && messages->isArray());
  EXPECT_FALSE(messages->empty());
  EXPECT_FALSE(messages->at(1).has_value());
  EXPECT_EQ(messages->at(0)->get("content")->string(), "hi \"there\" \xC3\xA9 \xF0\x9F\x98\x80");
  EXPECT_EQ(doc->members().size(), 9u);
}

TEST(JsonScanTest, KeysWithEscapesAreComparedDecoded) {
  auto doc = scanJson(R"({"mo\u0064el":"a","model":"b","x":1})");
  ASSERT_TRUE(doc.has_value());
  EXPECT_EQ(doc->count("model"), 2u);
  EXPECT_EQ(doc->get("model")->string(), "b");  // the last, as parseJson() keeps
  EXPECT_EQ(parseJson(doc->text())->at("model"), "b");
}

TEST(JsonScanTest, IntegersAtTheEdgesOfSixtyFourBits) {
  EXPECT_EQ(scanJson("9223372036854775807")->integer(), INT64_MAX);
  EXPECT_FALSE(scanJson("9223372036854775808")->integer().has_value());
  EXPECT_EQ(scanJson("-9223372036854775808")->integer(), INT64_MIN);
  EXPECT_FALSE(scanJson("-9223372036854775809")->integer().has_value());
  EXPECT_EQ(scanJson("-0")->integer(), 0);
  EXPECT_FALSE(scanJson("99999999999999999999999")->integer().has_value());
}

TEST(JsonScanTest, RefusesWhatParseJsonRefuses) {
  for (const std::string bad : {"",
                                " ",
                                "{",
                                "}",
                                "[1,]",
                                "{\"a\":1,}",
                                "{\"a\" 1}",
                                "{1:2}",
                                "01",
                                "1.",
                                "1e",
                                "-",
                                "+1",
                                ".5",
                                "tru",
                                "nul",
                                "\"abc",
                                "\"a\\x\"",
                                "\"\\u12\"",
                                "\"\\ud800\"",
                                "\"\\udc00\"",
                                "\"\\ud800\\u0041\"",
                                "\"a\x01\"",
                                "\"\xC0\xAF\"",
                                "\"\xED\xA0\x80\"",
                                "\"\xF4\x90\x80\x80\"",
                                "[1] 2",
                                "-21e999",
                                "1e400",
                                "[1.5e309]",
                                "{\"a\":1}}",
                                "[1 2]",
                                "NaN",
                                "'a'"}) {
    auto scanned = scanJson(bad);
    EXPECT_FALSE(scanned.has_value()) << "accepted: " << bad;
    EXPECT_FALSE(parseJson(bad).has_value()) << "parseJson accepted: " << bad;
    if (!scanned.has_value()) {
      EXPECT_EQ(scanned.error().code, ErrorCode::kInvalidArgument);
    }
  }
}

TEST(JsonScanTest, ANulByteEndsNothingAndIsRefused) {
  // Nothing may hide behind a NUL: both readers refuse the whole text.
  const std::string text("{\"model\":\"a\"}\0{\"model\":\"b\"}", 27);
  EXPECT_FALSE(scanJson(text).has_value());
  EXPECT_FALSE(parseJson(text).has_value());
}

TEST(JsonScanTest, NumbersPastADoubleAreRefusedTinyOnesAreNot) {
  EXPECT_TRUE(scanJson("1e-999").has_value());
  EXPECT_TRUE(parseJson("1e-999").has_value());
  EXPECT_TRUE(scanJson("1.7e308").has_value());
  const std::string huge(400, '9');
  EXPECT_FALSE(scanJson(huge).has_value());
  EXPECT_FALSE(parseJson(huge).has_value());
  EXPECT_TRUE(scanJson(std::string(20, '9')).has_value()) << "past 64 bits, within a double";
}

TEST(JsonScanTest, NestingIsLimitedBeforeAnythingDeepIsRead) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto scanned = scanJson(deep, 128);
  ASSERT_FALSE(scanned.has_value());
  EXPECT_NE(scanned.error().message.find("nested deeper than the limit of 128"), std::string::npos);
  const std::string ok = std::string(128, '[') + std::string(128, ']');
  EXPECT_TRUE(scanJson(ok, 128).has_value());
  EXPECT_FALSE(scanJson("[" + ok + "]", 128).has_value());
}

TEST(JsonScanTest, SplicesValuesAndMembersIntoTheOriginalBytes) {
  const std::string text = R"({ "model" : "alias", "messages":[], "stream_options":{}, "k": 5 })";
  auto doc = scanJson(text);
  ASSERT_TRUE(doc.has_value());
  JsonSplicer s(text);
  s.replace(*doc->get("model"), "\"upstream\"");
  s.replace(*doc->get("k"), "7");
  s.prepend(*doc->get("stream_options"), "include_usage", "true");
  s.prepend(*doc, "max_tokens", "16");
  const std::string out = s.build();
  EXPECT_EQ(out, R"({"max_tokens":16, "model" : "upstream", "messages":[], )"
                 R"("stream_options":{"include_usage":true}, "k": 7 })");
  auto parsed = parseJson(out);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ((*parsed)["max_tokens"], 16);
  // Nothing to do leaves the bytes as they were.
  EXPECT_EQ(JsonSplicer(text).build(), text);
}

// Random edits of valid documents: scanJson() accepts exactly what parseJson() accepts, and what
// it reads of an accepted document is what parseJson() reads.
TEST(JsonScanTest, AgreesWithParseJsonOnMutatedDocuments) {
  const std::vector<std::string> seeds = {
      R"({"model":"m","messages":[{"role":"user","content":"h\u00e9llo \ud83d\ude00"}],"n":12})",
      R"([1,-2.5e+3,true,false,null,"x",{"a":[{}]},[]])",
      R"({"usage":{"prompt_tokens":10,"completion_tokens":3,"details":{"cached":0}}})",
      "{\"s\":\"caf\xC3\xA9 \\\" \\\\ \\/ \\b\\f\\n\\r\\t\"}",
  };
  const std::string alphabet = "{}[]\",:\\-+.eE0123456789 tfnulrsa\xC3\xA9\xED\x80\xFF\x01";
  std::mt19937 rng(20261202);
  size_t accepted = 0, refused = 0;
  for (int round = 0; round < 20000; ++round) {
    const std::string text = testing::mutated(seeds[rng() % seeds.size()], alphabet, rng);
    auto scanned = scanJson(text, 8);
    auto parsed = parseJson(text, 8);
    ASSERT_EQ(scanned.has_value(), parsed.has_value())
        << "text: " << text << "\nscan: " << (scanned.has_value() ? "ok" : scanned.error().message)
        << "\nparse: " << (parsed.has_value() ? "ok" : parsed.error().message);
    if (!scanned.has_value()) {
      ++refused;
      continue;
    }
    ++accepted;
    // Re-reading every value through the views gives back the parsed document.
    std::function<Json(const JsonView&)> rebuild = [&](const JsonView& v) -> Json {
      switch (v.kind()) {
        case JsonKind::kObject: {
          Json o = Json::object();
          for (const auto& [k, m] : v.members()) {
            o[decodeJsonKey(k)] = rebuild(m);
          }
          return o;
        }
        case JsonKind::kArray: {
          Json a = Json::array();
          for (size_t i = 0; v.at(i); ++i) a.push_back(rebuild(*v.at(i)));
          return a;
        }
        case JsonKind::kString:
          return *v.string();
        case JsonKind::kTrue:
        case JsonKind::kFalse:
          return *v.boolean();
        case JsonKind::kNull:
          return nullptr;
        case JsonKind::kNumber:
          if (auto n = v.integer()) return *n;
          return *parseJson(v.text());
      }
      return nullptr;
    };
    const Json rebuilt = rebuild(*scanned);
    EXPECT_EQ(rebuilt, *parsed) << text;
  }
  // The mutations reach both sides of the line.
  EXPECT_GT(accepted, 1000u);
  EXPECT_GT(refused, 1000u);
}

}  // namespace
}  // namespace purser
