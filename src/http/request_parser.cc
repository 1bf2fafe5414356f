#include "http/request_parser.h"

#include <boost/asio/buffer.hpp>

namespace purser::http {

void RequestParser::on_request_impl(boost::beast::http::verb, std::string_view method,
                                    std::string_view target, int version, error_code&) {
  request_.method_name.assign(method);
  request_.method = parseMethod(method);
  request_.target.assign(target);
  request_.version = version;
}

void RequestParser::on_field_impl(boost::beast::http::field, std::string_view name,
                                  std::string_view value, error_code&) {
  request_.headers.add(std::string(name), std::string(value));
}

void RequestParser::on_body_init_impl(const boost::optional<std::uint64_t>& length, error_code&) {
  // The server checks Content-Length against its body limit before the body is read, so this
  // reservation is bounded.
  if (length && *length <= body_limit_hint_) request_.body.reserve(static_cast<size_t>(*length));
}

std::size_t RequestParser::on_body_impl(std::string_view body, error_code&) {
  request_.body.append(body);
  return body.size();
}

std::size_t RequestParser::on_chunk_body_impl(std::uint64_t, std::string_view body, error_code&) {
  request_.body.append(body);
  return body.size();
}

Result<Request> parseRequest(std::string_view data, size_t header_limit, size_t body_limit) {
  Request request;
  RequestParser parser(request);
  parser.header_limit(static_cast<std::uint32_t>(header_limit));
  parser.body_limit(body_limit);
  parser.eager(true);
  boost::system::error_code ec;
  // The same check the server makes: a Content-Length over the limit is refused from the header.
  size_t used = parser.put(boost::asio::buffer(data.data(), data.size()), ec);
  while (!ec && !parser.is_done() && used < data.size()) {
    if (parser.is_header_done() && parser.content_length() &&
        *parser.content_length() > body_limit) {
      return fail(Error(ErrorCode::kResourceExhausted, "body limit exceeded"));
    }
    data.remove_prefix(used);
    used = parser.put(boost::asio::buffer(data.data(), data.size()), ec);
  }
  if (!ec && parser.is_header_done() && parser.content_length() &&
      *parser.content_length() > body_limit) {
    return fail(Error(ErrorCode::kResourceExhausted, "body limit exceeded"));
  }
  if (ec) return fail(invalidArgument(ec.message()));
  if (!parser.is_done()) return fail(invalidArgument("incomplete request"));
  return request;
}

}  // namespace purser::http
