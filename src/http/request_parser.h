// RequestParser: Beast's HTTP/1.1 request parser, delivering straight into a Request (no
// intermediate Beast message, no copy of the fields). Framing (Content-Length, chunked) and the
// header and body limits are Beast's. Included only by the server and the fuzzers: it brings in
// Beast's parser templates.
#pragma once

#include <utility>

#include <boost/beast/http/basic_parser.hpp>

#include "http/message.h"

namespace purser::http {

class RequestParser final : public boost::beast::http::basic_parser<true> {
 public:
  explicit RequestParser(Request& request) : request_(request) {}
  // Bodies up to this size are reserved in one allocation when their length is announced.
  void bodyLimitHint(size_t limit) { body_limit_hint_ = limit; }

 private:
  using error_code = boost::system::error_code;
  void on_request_impl(boost::beast::http::verb, std::string_view method, std::string_view target,
                       int version, error_code&) override;
  void on_response_impl(int, std::string_view, int, error_code&) override {}
  void on_field_impl(boost::beast::http::field, std::string_view name, std::string_view value,
                     error_code&) override;
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>& length, error_code&) override;
  std::size_t on_body_impl(std::string_view body, error_code&) override;
  void on_chunk_header_impl(std::uint64_t, std::string_view, error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, std::string_view body, error_code&) override;
  void on_finish_impl(error_code&) override {}

  Request& request_;
  size_t body_limit_hint_ = 0;
};

// Parses one complete request from `data` (for fuzzing and tests). Returns the request, or the
// parser's error ("need more" when `data` ends mid-request).
Result<Request> parseRequest(std::string_view data, size_t header_limit, size_t body_limit);

}  // namespace purser::http
