#include "gateway/sse.h"

#include <gtest/gtest.h>

namespace purser::gateway {
namespace {

std::vector<SseEvent> feedInPieces(const std::string& stream, size_t piece) {
  SseParser p;
  std::vector<SseEvent> all;
  for (size_t i = 0; i < stream.size(); i += piece) {
    auto events = p.feed(std::string_view(stream).substr(i, piece));
    EXPECT_TRUE(events.has_value());
    for (auto& e : *events) all.push_back(std::move(e));
  }
  EXPECT_TRUE(p.pending().empty()) << "left over: " << p.pending();
  return all;
}

TEST(SseTest, ParsesOpenAiAndAnthropicStreamsSplitAnywhere) {
  const std::string stream =
      "data: {\"a\":1}\n\n"
      ": keep-alive comment\n\n"
      "event: message_delta\ndata: {\"usage\":{\"output_tokens\":3}}\n\n"
      "data: line one\ndata: line two\n\n"
      "event: ping\r\ndata: {}\r\n\r\n"
      "data: [DONE]\n\n";
  for (size_t piece : {1u, 2u, 3u, 7u, 64u, 1000u}) {
    const auto events = feedInPieces(stream, piece);
    ASSERT_EQ(events.size(), 6u) << "piece " << piece;
    EXPECT_EQ(events[0].data, "{\"a\":1}");
    EXPECT_EQ(events[0].raw, "data: {\"a\":1}\n\n");
    EXPECT_EQ(events[1].data, "");
    EXPECT_EQ(events[2].event, "message_delta");
    EXPECT_EQ(events[2].data, "{\"usage\":{\"output_tokens\":3}}");
    EXPECT_EQ(events[3].data, "line one\nline two");
    EXPECT_EQ(events[4].event, "ping");
    EXPECT_EQ(events[4].raw, "event: ping\r\ndata: {}\r\n\r\n");
    EXPECT_EQ(events[5].data, "[DONE]");
    std::string joined;
    for (const auto& e : events) joined += e.raw;
    EXPECT_EQ(joined, stream) << "the raw bytes of the events are the stream, exactly";
  }
}

TEST(SseTest, AnIncompleteEventStaysPendingAndARunawayOneIsAnError) {
  SseParser p(64);
  auto a = p.feed("data: {\"partial\":");
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(a->empty());
  EXPECT_EQ(p.pending(), "data: {\"partial\":");
  auto b = p.feed(std::string(100, 'x'));
  ASSERT_FALSE(b.has_value());
  EXPECT_EQ(b.error().code, ErrorCode::kResourceExhausted);
}

TEST(SseTest, ALargeEventInManyPiecesIsFoundWhereverItsEndFalls) {
  // The end of an event is searched for from where the last search stopped (a 64 MiB event in
  // 16 KiB pieces once held a worker for ~28 s); the blank line may straddle any two pieces.
  for (const std::string end :
       {std::string("\n\n"), std::string("\r\n\r\n"), std::string("\n\r\n")}) {
    const std::string event = "data: " + std::string(300'000, 'x') + end;
    for (size_t piece : {size_t{16 * 1024}, size_t{4099}, size_t{1}}) {
      if (piece == 1 && end.size() > 2) continue;  // covered by the split-anywhere test
      SseParser p(1 << 20);
      std::vector<SseEvent> got;
      for (size_t i = 0; i < event.size(); i += piece) {
        auto events = p.feed(std::string_view(event).substr(i, piece));
        ASSERT_TRUE(events.has_value());
        for (auto& e : *events) got.push_back(std::move(e));
      }
      ASSERT_EQ(got.size(), 1u) << "piece " << piece;
      EXPECT_EQ(got[0].data.size(), 300'000u);
      EXPECT_EQ(got[0].raw, event);
      EXPECT_TRUE(p.pending().empty());
    }
  }
}

}  // namespace
}  // namespace purser::gateway
