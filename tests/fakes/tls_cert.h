// Writes a fresh self-signed certificate and key (PEM) into a directory, for TLS tests. The
// certificate names only `subject_alt_names` (OpenSSL syntax: "DNS:localhost,IP:127.0.0.1"). The
// certificate is its own CA, so a client given cert_file as its trust anchor verifies it.
#pragma once

#include <string>

namespace purser::testing {

struct TlsFiles {
  std::string cert_file;
  std::string key_file;
};

TlsFiles writeSelfSignedCert(const std::string& dir,
                             const std::string& subject_alt_names = "DNS:localhost");

}  // namespace purser::testing
