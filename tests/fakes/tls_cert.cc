#include "fakes/tls_cert.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <stdexcept>

namespace purser::testing {
namespace {

void addExtension(X509* cert, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) throw std::runtime_error("X509V3_EXT_conf_nid failed");
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

void writePem(const std::string& path, X509* cert, EVP_PKEY* key) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) throw std::runtime_error("cannot write " + path);
  if (cert != nullptr) PEM_write_X509(f, cert);
  if (key != nullptr) PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
}

template <typename T>
T* readPem(const std::string& path, T* (*read)(FILE*, T**, pem_password_cb*, void*)) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) throw std::runtime_error("cannot read " + path);
  T* out = read(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  if (out == nullptr) throw std::runtime_error("no PEM object in " + path);
  return out;
}

void addName(X509_NAME* name, const char* field, const std::string& value) {
  if (value.empty()) return;
  X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(value.c_str()), -1, -1, 0);
}

long nextSerial() {
  static long serial = 100;
  return ++serial;
}

// A fresh P-256 key and a certificate of it valid from an hour ago for a day, with a serial of its
// own; the caller names, extends, signs and frees them.
X509* newCert(EVP_PKEY** key) {
  *key = EVP_EC_gen("P-256");
  if (*key == nullptr) throw std::runtime_error("EC key generation failed");
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), nextSerial());
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 3600 * 24);
  X509_set_pubkey(cert, *key);
  return cert;
}

}  // namespace

TlsFiles writeCa(const std::string& dir, const std::string& name) {
  EVP_PKEY* key = nullptr;
  X509* cert = newCert(&key);
  X509_NAME* subject = X509_get_subject_name(cert);
  addName(subject, "O", "Purser tests");
  addName(subject, "CN", name);
  X509_set_issuer_name(cert, subject);
  addExtension(cert, NID_basic_constraints, "critical,CA:TRUE");
  addExtension(cert, NID_key_usage, "critical,keyCertSign,cRLSign");
  X509_sign(cert, key, EVP_sha256());
  TlsFiles files{dir + "/" + name + "-ca.pem", dir + "/" + name + "-ca-key.pem"};
  writePem(files.cert_file, cert, nullptr);
  writePem(files.key_file, nullptr, key);
  X509_free(cert);
  EVP_PKEY_free(key);
  return files;
}

TlsFiles writeSignedCert(const std::string& dir, const std::string& name, const TlsFiles& ca,
                         const std::string& common_name, const std::string& organization,
                         const std::string& subject_alt_names) {
  X509* ca_cert = readPem<X509>(ca.cert_file, PEM_read_X509);
  EVP_PKEY* ca_key = readPem<EVP_PKEY>(ca.key_file, PEM_read_PrivateKey);
  EVP_PKEY* key = nullptr;
  X509* cert = newCert(&key);
  X509_NAME* subject = X509_get_subject_name(cert);
  addName(subject, "O", organization);
  addName(subject, "CN", common_name);
  X509_set_issuer_name(cert, X509_get_subject_name(ca_cert));
  if (!subject_alt_names.empty())
    addExtension(cert, NID_subject_alt_name, subject_alt_names.c_str());
  addExtension(cert, NID_basic_constraints, "critical,CA:FALSE");
  addExtension(cert, NID_ext_key_usage, "serverAuth,clientAuth");
  X509_sign(cert, ca_key, EVP_sha256());
  TlsFiles files{dir + "/" + name + ".pem", dir + "/" + name + "-key.pem"};
  writePem(files.cert_file, cert, nullptr);
  writePem(files.key_file, nullptr, key);
  X509_free(cert);
  X509_free(ca_cert);
  EVP_PKEY_free(key);
  EVP_PKEY_free(ca_key);
  return files;
}

TlsFiles writeSelfSignedCert(const std::string& dir, const std::string& subject_alt_names) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  if (key == nullptr) throw std::runtime_error("EC key generation failed");
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 3600 * 24);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
  X509_set_issuer_name(cert, name);
  addExtension(cert, NID_subject_alt_name, subject_alt_names.c_str());
  addExtension(cert, NID_basic_constraints, "critical,CA:TRUE");
  X509_sign(cert, key, EVP_sha256());

  TlsFiles files{dir + "/cert.pem", dir + "/key.pem"};
  FILE* f = std::fopen(files.cert_file.c_str(), "w");
  PEM_write_X509(f, cert);
  std::fclose(f);
  f = std::fopen(files.key_file.c_str(), "w");
  PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
  X509_free(cert);
  EVP_PKEY_free(key);
  return files;
}

}  // namespace purser::testing
