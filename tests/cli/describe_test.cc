// `purser workloads get` without -o json: the object in full, a field a line, as people read it.
#include "cli/describe.h"

#include <gtest/gtest.h>

#include <sstream>

namespace purser::cli {
namespace {

std::string described(const Json& value) {
  std::ostringstream out;
  printDescribed(value, out);
  return out.str();
}

TEST(DescribeTest, ShowsEveryFieldNestedObjectsAndListsNameAndStateFirst) {
  const Json workload = Json::parse(R"({
    "state": "running", "name": "ml/train-1", "queue": "research", "gpu_charged": "1.25",
    "admission": {"cluster_queue": "research", "pod_sets": [
        {"name": "workers", "count": 2, "usage": {"cpu": "8", "nvidia.com/gpu": "4"}}]},
    "pod_sets": [{"name": "workers", "command": ["sleep", "300"], "env": ["WANDB_KEY"]}],
    "reason": null, "warnings": [], "preemptible": true
  })");
  EXPECT_EQ(described(workload),
            "Name: ml/train-1\n"
            "State: running\n"
            "Admission:\n"
            "  Cluster queue: research\n"
            "  Pod sets:\n"
            "    - Name: workers\n"
            "      Count: 2\n"
            "      Usage:\n"
            "        Cpu: 8\n"
            "        nvidia.com/gpu: 4\n"
            "Gpu charged: 1.25\n"
            "Pod sets:\n"
            "  - Name: workers\n"
            "    Command: sleep, 300\n"
            "    Env: WANDB_KEY\n"
            "Preemptible: yes\n"
            "Queue: research\n");
}

TEST(DescribeTest, ControlCharactersAMemberWroteNeverReachTheTerminal) {
  const Json value = {
      {"name", "ml/x"}, {"reason", "line one\nline two \x1b[31mred\x1b[0m"}, {"items", {"a\tb"}}};
  const std::string text = described(value);
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find('\t'), std::string::npos) << text;
  EXPECT_NE(text.find("Reason: line one\\nline two \\x1b[31mred\\x1b[0m\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("Items: a\\x09b\n"), std::string::npos) << text;
  // Exactly one line per field: the newline in a value did not start another.
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3) << text;

  // The C1 controls as UTF-8 (CSI U+009B, OSC U+009D, ST U+009C), which terminals that take 8-bit
  // controls obey, are written out too; other non-ASCII text is left as it is.
  const std::string c1 = described(Json{{"command",
                                         "a\xc2\x9b"
                                         "31mred \xc2\x9d"
                                         "0;t\xc2\x9c caf\xc3\xa9"}});
  EXPECT_EQ(c1.find("\xc2\x9b"), std::string::npos) << c1;
  EXPECT_EQ(c1.find("\xc2\x9d"), std::string::npos) << c1;
  EXPECT_EQ(c1, "Command: a\\u009b31mred \\u009d0;t\\u009c caf\xc3\xa9\n") << c1;
}

TEST(DescribeTest, APlainValueOrAnEmptyObjectIsShownAsItIs) {
  EXPECT_EQ(described(Json(42)), "42\n");
  EXPECT_EQ(described(Json::object()), "");
  EXPECT_EQ(described(Json{{"list", {1, "two", nullptr}}}), "List: 1, two, null\n");
}

}  // namespace
}  // namespace purser::cli
