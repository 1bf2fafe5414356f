#include "http/tls_server.h"

#include <utility>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509err.h>
#include <sys/stat.h>

#include <fmt/format.h>
#include <boost/asio/ssl/context.hpp>

#include <cstring>

#include "common/crypto.h"

namespace purser::http {

namespace ssl = boost::asio::ssl;

namespace {

// TLS 1.2's suites: forward secrecy and AEAD only. TLS 1.3's are all AEAD.
constexpr char kTls12Ciphers[] =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";
constexpr char kTls13Suites[] =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";

// What OpenSSL says went wrong, for a message that must say something.
std::string opensslReason() {
  std::string why = crypto::takeOpensslError();
  return why.empty() ? std::string("not usable") : why;
}

// ALPN: HTTP/1.1 when the client offers it; otherwise no protocol is agreed (a client that
// offers only h2 is answered without ALPN and learns from the response what it speaks).
int selectAlpn(SSL* /*ssl*/, const unsigned char** out, unsigned char* outlen,
               const unsigned char* in, unsigned int inlen, void* /*arg*/) {
  static constexpr unsigned char kHttp11[] = {'h', 't', 't', 'p', '/', '1', '.', '1'};
  for (unsigned int i = 0; i < inlen;) {
    const unsigned int n = in[i];
    if (i + 1 + n > inlen) break;
    if (n == sizeof kHttp11 && std::memcmp(in + i + 1, kHttp11, n) == 0) {
      *out = in + i + 1;
      *outlen = static_cast<unsigned char>(n);
      return SSL_TLSEXT_ERR_OK;
    }
    i += 1 + n;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

Result<std::shared_ptr<ssl::context>> build(const TlsOptions& o) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX* native = ctx->native_handle();
  SSL_CTX_set_options(
      native, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  if (SSL_CTX_set_min_proto_version(
          native, o.min_version == "1.3" ? TLS1_3_VERSION : TLS1_2_VERSION) != 1 ||
      SSL_CTX_set_max_proto_version(native, TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_cipher_list(native, kTls12Ciphers) != 1 ||
      SSL_CTX_set_ciphersuites(native, kTls13Suites) != 1) {
    return fail(invalidArgument(
        fmt::format("TLS: the protocol versions and ciphers cannot be set: {}", opensslReason())));
  }
  SSL_CTX_set_alpn_select_cb(native, selectAlpn, nullptr);
  if (SSL_CTX_use_certificate_chain_file(native, o.cert_file.c_str()) != 1) {
    return fail(invalidArgument(
        fmt::format("cannot load TLS certificate \"{}\": {}", o.cert_file, opensslReason())));
  }
  if (SSL_CTX_use_PrivateKey_file(native, o.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    if (ERR_GET_REASON(ERR_peek_last_error()) != X509_R_KEY_VALUES_MISMATCH) {
      return fail(invalidArgument(
          fmt::format("cannot load TLS private key \"{}\": {}", o.key_file, opensslReason())));
    }
    ERR_clear_error();
    return fail(invalidArgument(
        fmt::format("the TLS private key \"{}\" is not the key of the certificate \"{}\"",
                    o.key_file, o.cert_file)));
  }
  if (SSL_CTX_check_private_key(native) != 1) {
    ERR_clear_error();
    return fail(invalidArgument(
        fmt::format("the TLS private key \"{}\" is not the key of the certificate \"{}\"",
                    o.key_file, o.cert_file)));
  }
  if (!o.client_ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(native, o.client_ca_file.c_str(), nullptr) != 1) {
      return fail(invalidArgument(
          fmt::format("cannot load the client CA \"{}\": {}", o.client_ca_file, opensslReason())));
    }
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(o.client_ca_file.c_str());
    if (names == nullptr) {
      return fail(invalidArgument(fmt::format("the client CA \"{}\" holds no certificate: {}",
                                              o.client_ca_file, opensslReason())));
    }
    SSL_CTX_set_client_CA_list(native, names);  // takes ownership
    SSL_CTX_set_verify(native, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    SSL_CTX_set_verify_depth(native, 8);
    // A client certificate is verified on every handshake; resumed sessions carry the verified
    // peer, so tickets are safe, but a session id context is required for resumption.
    static constexpr unsigned char kSessionContext[] = "purser";
    SSL_CTX_set_session_id_context(native, kSessionContext, sizeof kSessionContext - 1);
  }
  ERR_clear_error();
  return ctx;
}

std::string statPart(const std::string& path) {
  struct stat st {};
  if (path.empty()) return "-";
  if (::stat(path.c_str(), &st) != 0) return "missing";
  return fmt::format("{}:{}:{}:{}.{}", st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec,
                     st.st_mtim.tv_nsec);
}

}  // namespace

TlsServerContext::TlsServerContext(TlsOptions options) : options_(std::move(options)) {}
TlsServerContext::~TlsServerContext() = default;

Result<std::unique_ptr<TlsServerContext>> TlsServerContext::open(TlsOptions options) {
  std::unique_ptr<TlsServerContext> out(new TlsServerContext(std::move(options)));
  out->loaded_fingerprint_ = out->fingerprint();
  out->current_ = PURSER_TRY_VALUE(build(out->options_));
  return out;
}

std::shared_ptr<ssl::context> TlsServerContext::current() const {
  std::lock_guard lock(mu_);
  return current_;
}

std::string TlsServerContext::fingerprint() const {
  return statPart(options_.cert_file) + "|" + statPart(options_.key_file) + "|" +
         statPart(options_.client_ca_file);
}

bool TlsServerContext::filesChanged() const {
  const std::string now = fingerprint();
  std::lock_guard lock(mu_);
  return now != loaded_fingerprint_;
}

Result<void> TlsServerContext::reload() {
  const std::string fingerprint_before = fingerprint();
  auto fresh = build(options_);
  std::lock_guard lock(mu_);
  // Remembered either way: a bad pair is not retried until a file changes again.
  loaded_fingerprint_ = fingerprint_before;
  if (!fresh) return fail(fresh.error());
  current_ = std::move(*fresh);
  ++reloads_;
  return {};
}

uint64_t TlsServerContext::reloads() const {
  std::lock_guard lock(mu_);
  return reloads_;
}

std::string peerSubject(SSL* ssl) {
  X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr) return {};
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr) return {};
  X509_NAME_print_ex(bio, X509_get_subject_name(cert), 0, XN_FLAG_RFC2253);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string out(data != nullptr && n > 0 ? data : "", n > 0 ? static_cast<size_t>(n) : 0);
  BIO_free(bio);
  return out;
}

}  // namespace purser::http
