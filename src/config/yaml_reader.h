// YamlReader: turns YAML nodes into typed values while collecting errors that name the file,
// line, column and dotted field path, and say what was expected. Every config section (and
// later, Kueue manifests) reads through it, so all of them report mistakes the same way.
//
//   YamlReader r("purser.yaml");
//   auto root = r.map(doc, "");
//   root.required("listen", cfg.listen);
//   root.optional("threads", cfg.threads);
//   root.finish();             // reports keys nobody read: typos do not pass silently
//   if (!r.ok()) return fail(r.error());
//
// Not thread-safe; one reader per file being loaded.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/money.h"
#include "common/result.h"

namespace purser::config {

class YamlReader {
 public:
  explicit YamlReader(std::string file) : file_(std::move(file)) {}

  class Map;
  // A view of `node` as a mapping at `path`; an error (and an empty view) if it is not one.
  Map map(const YAML::Node& node, std::string path);

  void addError(const YAML::Node& at, const std::string& path, std::string message);
  void addError(const YAML::Mark& at, const std::string& path, std::string message);
  bool ok() const { return errors_.empty(); }
  // All errors as one: a single error as it is, several as one message with a line each.
  Error error() const;
  const std::vector<Error>& errors() const { return errors_; }
  const std::string& file() const { return file_; }

  // Converters: each returns nullopt after recording an error.
  std::optional<std::string> asString(const YAML::Node& n, const std::string& path);
  std::optional<bool> asBool(const YAML::Node& n, const std::string& path);
  std::optional<int64_t> asInt(const YAML::Node& n, const std::string& path, int64_t min,
                               int64_t max);
  std::optional<double> asNumber(const YAML::Node& n, const std::string& path, double min,
                                 double max);
  std::optional<Duration> asDuration(const YAML::Node& n, const std::string& path);
  // Money as a decimal string ("2.50"); a YAML number is refused (it would pass through binary
  // floating point in many tools).
  std::optional<Money> asMoney(const YAML::Node& n, const std::string& path);
  // A byte count: an integer or a quantity such as "16Mi".
  std::optional<uint64_t> asBytes(const YAML::Node& n, const std::string& path, uint64_t min,
                                  uint64_t max);

  class Map {
   public:
    bool valid() const { return valid_; }
    bool has(const std::string& key) const;
    YAML::Node get(const std::string& key);  // marks the key as read
    // Marks the key as known (so finish() accepts it) and tells whether it is there.
    bool present(const std::string& key);
    const std::string& path() const { return path_; }
    std::string child(const std::string& key) const {
      return path_.empty() ? key : path_ + "." + key;
    }
    const YAML::Node& node() const { return node_; }

    void required(const std::string& key, std::string& out);
    void optional(const std::string& key, std::string& out);
    void optional(const std::string& key, bool& out);
    void optional(const std::string& key, int64_t& out, int64_t min, int64_t max);
    void optional(const std::string& key, size_t& out, int64_t min, int64_t max);
    void optional(const std::string& key, double& out, double min, double max);
    void optional(const std::string& key, Duration& out, Duration min = Duration::zero());
    void optionalBytes(const std::string& key, size_t& out, uint64_t min, uint64_t max);
    void requiredMoney(const std::string& key, Money& out);
    void optionalMoney(const std::string& key, Money& out);
    // One of `choices`.
    void optionalChoice(const std::string& key, std::string& out,
                        const std::vector<std::string>& choices);
    void requiredChoice(const std::string& key, std::string& out,
                        const std::vector<std::string>& choices);
    void optionalStrings(const std::string& key, std::vector<std::string>& out);
    // The value at `key` as a nested mapping.
    Map map(const std::string& key) { return reader_->map(get(key), child(key)); }
    // Reports every key that was not read.
    void finish();

   private:
    friend class YamlReader;
    Map(YamlReader& reader, YAML::Node node, std::string path, bool valid)
        : reader_(&reader), node_(std::move(node)), path_(std::move(path)), valid_(valid) {}
    YamlReader* reader_;
    YAML::Node node_;
    std::string path_;
    bool valid_;
    std::set<std::string> read_;
  };

 private:
  std::string file_;
  std::vector<Error> errors_;
};

// Parses a whole YAML document; errors come back with file:line:column. Hostile text is refused
// before or while it is read: invalid UTF-8 (YAML is Unicode text, and so are its strings once
// their escapes are read), text libyaml does not accept as YAML (it reads everything first:
// yaml-cpp's own parser has hung on malformed text), collections nested deeper than
// `max_nesting`, more than 10,000 aliases, and aliases that expand past a budget of nodes
// proportional to the text's size (a "billion laughs" document).
Result<YAML::Node> parseYaml(std::string_view text, const std::string& file,
                             size_t max_nesting = 128);
// The same for a stream of documents separated by "---".
Result<std::vector<YAML::Node>> parseYamlStream(std::string_view text, const std::string& file,
                                                size_t max_nesting = 128);

// The closest of `candidates` to `word` if it is a plausible typo, else empty.
std::string closestMatch(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace purser::config
