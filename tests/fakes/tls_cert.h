// Writes a fresh self-signed certificate and key (PEM) into a directory, for TLS tests. The
// certificate names only `subject_alt_names` (OpenSSL syntax: "DNS:localhost,IP:127.0.0.1"). The
// certificate is its own CA, so a client given cert_file as its trust anchor verifies it. A CA
// of the test's own and certificates it signs are made the same way.
#pragma once

#include <string>

namespace purser::testing {

struct TlsFiles {
  std::string cert_file;
  std::string key_file;
};

TlsFiles writeSelfSignedCert(const std::string& dir,
                             const std::string& subject_alt_names = "DNS:localhost");

// A certificate authority of its own (dir/NAME-ca.pem, dir/NAME-ca-key.pem), for mutual TLS and
// chains.
TlsFiles writeCa(const std::string& dir, const std::string& name);

// A certificate `ca` signed (dir/NAME.pem, dir/NAME-key.pem): subject CN=`common_name` (and
// O=`organization` when given), the given subject alternative names, usable by servers and
// clients alike.
TlsFiles writeSignedCert(const std::string& dir, const std::string& name, const TlsFiles& ca,
                         const std::string& common_name, const std::string& organization = "",
                         const std::string& subject_alt_names = "DNS:localhost,IP:127.0.0.1");

}  // namespace purser::testing
