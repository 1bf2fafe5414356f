#include "http/router.h"

#include <gtest/gtest.h>

namespace purser::http {
namespace {

Response named(const char* name) { return Response::text(200, name); }

std::string dispatch(Router& router, Method method, const std::string& target,
                     std::string* allow = nullptr) {
  Request req;
  req.method = method;
  req.target = target;
  auto m = router.match(req);
  if (allow != nullptr) *allow = m.allow;
  if (m.route == nullptr) return m.allow.empty() ? "404" : "405";
  std::string out = std::get<SyncHandler>(m.route->handler)(req).body;
  for (const auto& [k, v] : req.params) out += " " + k + "=" + v;
  return out;
}

TEST(RouterTest, MatchesLiteralsParamsAndCatchAllsBySpecificity) {
  Router r;
  ASSERT_TRUE(r.add(Method::kGet, "/api/v1/keys/{id}", [](Request&) { return named("key"); }));
  ASSERT_TRUE(r.add(Method::kGet, "/api/v1/keys/mine", [](Request&) { return named("mine"); }));
  ASSERT_TRUE(r.add(Method::kGet, "/api/v1/{kind}/{id}", [](Request&) { return named("any"); }));
  ASSERT_TRUE(r.add(Method::kGet, "/assets/*path", [](Request&) { return named("asset"); }));
  ASSERT_TRUE(r.add(Method::kPost, "/v1/chat/completions", [](Request&) { return named("chat"); }));

  EXPECT_EQ(dispatch(r, Method::kGet, "/api/v1/keys/mine"), "mine");
  EXPECT_EQ(dispatch(r, Method::kGet, "/api/v1/keys/k1?x=1"), "key id=k1");
  EXPECT_EQ(dispatch(r, Method::kGet, "/api/v1/teams/t%201"), "any kind=teams id=t 1");
  EXPECT_EQ(dispatch(r, Method::kGet, "/assets/js/app.js"), "asset path=js/app.js");
  EXPECT_EQ(dispatch(r, Method::kPost, "/v1/chat/completions"), "chat");
  EXPECT_EQ(dispatch(r, Method::kGet, "/api/v1/keys/"), "404");  // empty parameter
  EXPECT_EQ(dispatch(r, Method::kGet, "/api/v1/keys/a/b"), "404");
  EXPECT_EQ(dispatch(r, Method::kGet, "/nothing"), "404");
  std::string allow;
  EXPECT_EQ(dispatch(r, Method::kGet, "/v1/chat/completions", &allow), "405");
  EXPECT_EQ(allow, "POST");
  EXPECT_EQ(dispatch(r, Method::kHead, "/api/v1/keys/mine"), "mine");  // HEAD -> GET
}

TEST(RouterTest, RejectsBadAndDuplicatePatterns) {
  Router r;
  ASSERT_TRUE(r.add(Method::kGet, "/a/{id}", [](Request&) { return named("a"); }));
  auto dup = r.add(Method::kGet, "/a/{other}", [](Request&) { return named("b"); });
  ASSERT_FALSE(dup.has_value());
  EXPECT_EQ(dup.error().code, ErrorCode::kAlreadyExists);
  EXPECT_TRUE(r.add(Method::kPost, "/a/{id}", [](Request&) { return named("c"); }).has_value());
  EXPECT_FALSE(r.add(Method::kGet, "no-slash", [](Request&) { return named("x"); }).has_value());
  EXPECT_FALSE(
      r.add(Method::kGet, "/x/*rest/more", [](Request&) { return named("x"); }).has_value());
  EXPECT_FALSE(r.add(Method::kGet, "/x/{bad", [](Request&) { return named("x"); }).has_value());
}

TEST(RequestTest, QueryParametersAreDecoded) {
  Request req;
  req.target = "/v1/x?limit=5&name=a%20b+c&flag&bad=%zz";
  EXPECT_EQ(req.path(), "/v1/x");
  EXPECT_EQ(req.queryParam("limit"), "5");
  EXPECT_EQ(req.queryParam("name"), "a b c");
  EXPECT_EQ(req.queryParam("flag"), "");
  EXPECT_EQ(req.queryParam("missing"), std::nullopt);
  EXPECT_EQ(req.queryParam("bad"), std::nullopt);
}

TEST(HeadersTest, NamesAreCaseInsensitive) {
  Headers h;
  h.add("Content-Type", "a");
  h.add("X-Multi", "1");
  h.add("x-multi", "2");
  EXPECT_EQ(h.get("content-type"), "a");
  h.set("X-MULTI", "3");
  EXPECT_EQ(h.size(), 2u);
  EXPECT_EQ(h.get("x-multi"), "3");
  h.remove("CONTENT-TYPE");
  EXPECT_FALSE(h.has("content-type"));
}

}  // namespace
}  // namespace purser::http
