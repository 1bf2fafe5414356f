// Cookies read from a request and written in Set-Cookie.
#include "http/cookies.h"

#include <gtest/gtest.h>

namespace purser::http {
namespace {

Request withCookies(std::initializer_list<const char*> headers) {
  Request r;
  for (const char* h : headers) r.headers.add("Cookie", h);
  return r;
}

TEST(CookiesTest, OneIsFoundByNameAmongOthers) {
  const Request r = withCookies({"theme=dark; purser_session=pss_abc;  other = x "});
  EXPECT_EQ(cookie(r, "purser_session"), "pss_abc");
  EXPECT_EQ(cookie(r, "other"), "x");
  EXPECT_EQ(cookie(r, "theme"), "dark");
  EXPECT_EQ(cookie(r, "purser"), std::nullopt);
  EXPECT_EQ(cookie(r, "session"), std::nullopt);
  EXPECT_EQ(cookie(withCookies({}), "purser_session"), std::nullopt);
  EXPECT_EQ(cookie(withCookies({"a=\"quoted\""}), "a"), "quoted");
  EXPECT_EQ(cookie(withCookies({"a="}), "a"), "");
  EXPECT_EQ(cookie(withCookies({";;=;a"}), "a"), std::nullopt);
  // Several Cookie fields (HTTP/2 proxies split them): each is read; the first match wins.
  EXPECT_EQ(cookie(withCookies({"x=1", "a=2; a=3"}), "a"), "2");
}

TEST(CookiesTest, SetCookieCarriesTheFlagsAsked) {
  CookieOptions o;
  EXPECT_EQ(setCookie("purser_session", "pss_x", o),
            "purser_session=pss_x; Path=/; HttpOnly; SameSite=Lax");
  o.secure = true;
  o.max_age = 0;
  o.path = "/auth/oidc";
  EXPECT_EQ(setCookie("purser_oidc", "", o),
            "purser_oidc=; Path=/auth/oidc; Max-Age=0; HttpOnly; Secure; SameSite=Lax");
}

}  // namespace
}  // namespace purser::http
