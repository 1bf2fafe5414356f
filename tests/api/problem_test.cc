// How errors become problem documents: a client sees the messages written for it and never the
// text of an internal error, and a busy server says when to try again.
#include "api/problem.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace purser::api {
namespace {

using nlohmann::json;

TEST(ProblemTest, AClientErrorShowsItsMessageAndField) {
  const http::Response r = problem(invalidArgument("name is too long").withField("name"));
  EXPECT_EQ(r.status, 400);
  const json body = json::parse(r.body);
  EXPECT_EQ(body["detail"], "name is too long");
  EXPECT_EQ(body["field"], "name");
  EXPECT_FALSE(r.headers.has("Retry-After"));
}

TEST(ProblemTest, AServerErrorHidesItsMessage) {
  const http::Response r = problem(unavailable("could not reach db.internal:5432"));
  EXPECT_EQ(r.status, 503);
  const json body = json::parse(r.body);
  EXPECT_EQ(body["detail"], "internal error");
  EXPECT_EQ(r.body.find("db.internal"), std::string::npos);
  EXPECT_FALSE(r.headers.has("Retry-After"));
}

TEST(ProblemTest, ABusyServerSaysSoAndWhenToTryAgain) {
  const http::Response r = problem(serverBusy("the server is busy: try again shortly"));
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(json::parse(r.body)["detail"], "the server is busy: try again shortly");
  EXPECT_EQ(r.headers.get("Retry-After").value_or(""), "1");
  EXPECT_EQ(r.headers.get("Content-Type").value_or(""), "application/problem+json");
}

}  // namespace
}  // namespace purser::api
