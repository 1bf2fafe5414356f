// Kubeconfig files, as kubectl reads them: a context (the current one unless named) picks a
// cluster (its server, its CA and whether to skip verifying it) and a user (a bearer token, from
// the file or a tokenFile, or a client certificate and key). File paths inside are relative to
// the kubeconfig's directory; *-data fields are base64. Credentials kubectl gets by running a
// program (exec, auth-provider) or basic auth are refused with a reason: Purser runs no plugin.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace purser::config {

struct Kubeconfig {
  std::string context;  // the context used
  std::string server;
  std::string ca_pem;  // the cluster's CA (PEM); empty: the system's CAs
  bool insecure = false;
  std::string token;
  std::string client_cert_pem, client_key_pem;
  std::string namespace_;  // the context's namespace, if it names one
};

// `base_dir` resolves relative paths inside the text. An error names the file and what is
// wrong with it.
Result<Kubeconfig> parseKubeconfig(std::string_view text, const std::string& file,
                                   const std::string& base_dir, const std::string& context);
Result<Kubeconfig> readKubeconfig(const std::string& path, const std::string& context);

}  // namespace purser::config
