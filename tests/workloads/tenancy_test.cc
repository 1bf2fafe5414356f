// Tenancy, on its own: two tenants with a team of one name get two namespaces, and neither sees
// the other's; a Namespace object of the manifests decides whose a name is, and its labels win.
#include "workloads/tenancy.h"

#include <gtest/gtest.h>

#include "common/clock.h"
#include "workloads/record.h"

namespace purser::workloads {
namespace {

class TenancyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    identity::Snapshot people;
    people.tenants.push_back({"t-acme", "acme", "2026-01-01T00:00:00Z"});
    people.tenants.push_back({"t-globex", "globex", "2026-01-01T00:00:00Z"});
    // acme's "ml" came first; globex has an "ml" too, and an "infra" only it has.
    people.teams.push_back({"tm-1", "t-acme", "ml", "2026-01-01T00:00:00Z"});
    people.teams.push_back({"tm-2", "t-globex", "ml", "2026-02-01T00:00:00Z"});
    people.teams.push_back({"tm-3", "t-globex", "infra", "2026-02-01T00:00:00Z"});
    directory.load(people);
  }

  ManualClock clock;
  identity::Directory directory{clock};
  fleet::ManifestSet manifests;
  Tenancy tenancy{directory, manifests};
};

TEST_F(TenancyTest, TheFirstTeamOfANameOwnsItAndAnotherTenantsTeamIsSuffixed) {
  EXPECT_EQ(tenancy.owningTenant("ml"), "t-acme");
  EXPECT_EQ(tenancy.owningTenant("infra"), "t-globex");
  EXPECT_EQ(tenancy.owningTenant("nobody"), "");
  EXPECT_EQ(tenancy.namespaceOf("t-acme", "ml"), "ml");
  EXPECT_EQ(tenancy.namespaceOf("t-globex", "ml"), "ml@t-globex");
  EXPECT_EQ(tenancy.namespaceOf("t-globex", "infra"), "infra");
  // A name no tenant has yet is the asker's as it is; a name already inside Purser stays.
  EXPECT_EQ(tenancy.namespaceOf("t-acme", "new-team"), "new-team");
  EXPECT_EQ(tenancy.namespaceOf("t-acme", "ml@t-globex"), "ml@t-globex");
  // Platform admins (no tenant) name namespaces as they are.
  EXPECT_EQ(tenancy.namespaceOf("", "ml"), "ml");
}

TEST_F(TenancyTest, ANamespaceObjectOfTheManifestsDecidesWhoseANameIs) {
  manifests.namespaces["ml"] = {{"purser.dev/tenant", "globex"}, {"tier", "gold"}};
  EXPECT_EQ(tenancy.owningTenant("ml"), "t-globex");
  EXPECT_EQ(tenancy.namespaceOf("t-globex", "ml"), "ml");
  EXPECT_EQ(tenancy.namespaceOf("t-acme", "ml"), "ml@t-acme");
  // A label naming no tenant decides nothing: the first team's tenant owns it.
  manifests.namespaces["ml"] = {{"purser.dev/tenant", "initech"}};
  EXPECT_EQ(tenancy.owningTenant("ml"), "t-acme");
}

TEST_F(TenancyTest, LabelsNameTheNamespaceAndItsTenantAndTheManifestsWin) {
  EXPECT_EQ(tenancy.labelsOf("ml@t-globex", "t-globex"),
            (std::map<std::string, std::string>{{"kubernetes.io/metadata.name", "ml@t-globex"},
                                                {"purser.dev/tenant", "globex"}}));
  manifests.namespaces["ml"] = {{"tier", "gold"}, {"purser.dev/tenant", "acme"}};
  EXPECT_EQ(
      tenancy.labelsOf("ml", "t-acme"),
      (std::map<std::string, std::string>{
          {"kubernetes.io/metadata.name", "ml"}, {"purser.dev/tenant", "acme"}, {"tier", "gold"}}));
}

TEST_F(TenancyTest, WhatATenantIsShownDropsPurserSuffixes) {
  EXPECT_EQ(shownText("ml@t-globex/train"), "ml@t-globex/train")
      << "only a tenant id's length of suffix is Purser's";
  const std::string id = "01jb5k9w1g6v5r0q3c2m8x7t4e";  // a tenant id: 26 characters
  EXPECT_EQ(shownText("ml@" + id + "/train"), "ml/train");
  EXPECT_EQ(shownText("workload ml@" + id + "/a preempted ml@" + id + "/b"),
            "workload ml/a preempted ml/b");
}

}  // namespace
}  // namespace purser::workloads
