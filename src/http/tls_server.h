// TlsServerContext: the server side of TLS — the certificate a listener presents, which clients
// it asks for a certificate, and re-reading both while connections stay open.
//
// What every context holds (the Mozilla "intermediate" profile, as Envoy's defaults): TLS 1.2
// and 1.3 only (`min_version` may raise the floor to 1.3), ECDHE key exchange with AEAD ciphers
// (AES-GCM, ChaCha20-Poly1305), no renegotiation, no compression, ALPN answering `http/1.1`.
// With `client_ca_file` every client must present a certificate that CA signed (mutual TLS); the
// certificate's subject is read back with peerSubject().
//
// reload() builds a whole new context from the files and swaps it in only when it is good: a
// connection keeps the context it was accepted with, new ones get the new one, and a bad pair
// (a key that is not the certificate's, a half-written file) leaves the old one serving.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "common/result.h"

namespace boost::asio::ssl {
class context;
}
typedef struct ssl_st SSL;

namespace purser::http {

struct TlsOptions {
  std::string cert_file;            // PEM certificate chain
  std::string key_file;             // PEM private key
  std::string client_ca_file;       // PEM CA certificates: clients must present one they signed
  std::string min_version = "1.2";  // "1.2" or "1.3"
};

class TlsServerContext {
 public:
  // Reads the files; a clear error naming the file when one cannot be used.
  static Result<std::unique_ptr<TlsServerContext>> open(TlsOptions options);
  ~TlsServerContext();

  // The context new connections are made with.
  std::shared_ptr<boost::asio::ssl::context> current() const;
  // Re-reads the files; the current context stays when they cannot be used.
  Result<void> reload();
  // Whether a file changed (its identity, size or modification time) since it was last read;
  // cert-manager and Kubernetes replace mounted secrets by renaming, which this sees.
  bool filesChanged() const;
  // How many times the context was replaced since open().
  uint64_t reloads() const;
  const TlsOptions& options() const { return options_; }

 private:
  explicit TlsServerContext(TlsOptions options);
  std::string fingerprint() const;

  const TlsOptions options_;
  mutable std::mutex mu_;
  std::shared_ptr<boost::asio::ssl::context> current_;  // guarded by mu_
  std::string loaded_fingerprint_;                      // guarded by mu_
  uint64_t reloads_ = 0;                                // guarded by mu_
};

// The verified peer certificate's subject in RFC 2253 form ("CN=ci-runner,O=Acme"); empty when
// the peer sent none.
std::string peerSubject(SSL* ssl);

}  // namespace purser::http
