#include "config/kubeconfig.h"

#include <gtest/gtest.h>

#include "fakes/temp_dir.h"

namespace purser::config {
namespace {

constexpr const char* kConfig = R"(apiVersion: v1
kind: Config
current-context: prod
clusters:
- name: prod-cluster
  cluster: {server: "https://10.0.0.1:6443", certificate-authority: ca.crt}
- name: lab-cluster
  cluster: {server: "https://lab:6443", insecure-skip-tls-verify: true}
contexts:
- name: prod
  context: {cluster: prod-cluster, user: robot, namespace: ml}
- name: lab
  context: {cluster: lab-cluster, user: gke}
- name: old
  context: {cluster: lab-cluster, user: admin}
- name: lost
  context: {cluster: nowhere, user: robot}
users:
- name: robot
  user: {tokenFile: secrets/token}
- name: gke
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: gke-gcloud-auth-plugin}
- name: admin
  user: {username: admin, password: hunter2}
)";

class KubeconfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::writeFile(dir.file("ca.crt"), "-----BEGIN CERTIFICATE-----\nMIIB\n");
    std::filesystem::create_directories(dir.file("secrets"));
    testing::writeFile(dir.file("secrets/token"), "eyJhbGciOi.robot\n");
  }
  Result<Kubeconfig> parse(const std::string& text, const std::string& context = "") {
    return parseKubeconfig(text, "kubeconfig", dir.path(), context);
  }
  testing::TempDir dir;
};

TEST_F(KubeconfigTest, TheCurrentContextGivesTheServerCaAndToken) {
  auto kc = parse(kConfig);
  ASSERT_TRUE(kc) << kc.error().message;
  EXPECT_EQ(kc->context, "prod");
  EXPECT_EQ(kc->server, "https://10.0.0.1:6443");
  EXPECT_EQ(kc->ca_pem, "-----BEGIN CERTIFICATE-----\nMIIB\n");  // relative to the file
  EXPECT_EQ(kc->token, "eyJhbGciOi.robot");                      // its newline dropped
  EXPECT_EQ(kc->namespace_, "ml");
  EXPECT_FALSE(kc->insecure);
}

TEST_F(KubeconfigTest, CredentialsPurserCannotUseAreRefusedWithWhy) {
  auto exec = parse(kConfig, "lab");
  ASSERT_FALSE(exec);
  EXPECT_NE(exec.error().message.find("running a program"), std::string::npos);
  auto basic = parse(kConfig, "old");
  ASSERT_FALSE(basic);
  EXPECT_NE(basic.error().message.find("basic authentication"), std::string::npos);
  auto lost = parse(kConfig, "lost");
  ASSERT_FALSE(lost);
  EXPECT_NE(lost.error().message.find("cluster \"nowhere\""), std::string::npos);
  auto missing = parse(kConfig, "staging");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("no context named \"staging\""), std::string::npos);
}

TEST_F(KubeconfigTest, HostileFilesAreRefusedNotCrashedOn) {
  EXPECT_FALSE(parse("[1, 2]"));
  EXPECT_FALSE(parse("kind: Config\n"));  // no current-context
  EXPECT_FALSE(parse("current-context: a\ncontexts: 7\n"));
  EXPECT_FALSE(parse("current-context: a\ncontexts: [{name: a, context: [x]}]\n"));
  EXPECT_FALSE(parse("current-context: a\ncontexts: [{name: [a]}]\n"));
  EXPECT_FALSE(parse("{{{{"));
  const std::string bad_data =
      "current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\n"
      "clusters: [{name: c, cluster: {server: 'https://x', certificate-authority-data: '!!'}}]\n"
      "users: [{name: u, user: {}}]\n";
  auto b = parse(bad_data);
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message.find("not base64"), std::string::npos);
  const std::string half =
      "current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\n"
      "clusters: [{name: c, cluster: {server: 'https://x'}}]\n"
      "users: [{name: u, user: {client-certificate-data: QUJD}}]\n";
  auto h = parse(half);
  ASSERT_FALSE(h);
  EXPECT_NE(h.error().message.find("without its key"), std::string::npos);
  testing::writeFile(dir.file("huge"), std::string(2 << 20, '#'));
  auto huge = readKubeconfig(dir.file("huge"), "");
  ASSERT_FALSE(huge);
  EXPECT_NE(huge.error().message.find("larger than 1 MiB"), std::string::npos);
  EXPECT_FALSE(readKubeconfig(dir.file("absent"), ""));
}

}  // namespace
}  // namespace purser::config
