// Runs a fuzz target over files given on the command line (or every file in the directories
// given), so the fuzzers build and their corpora pass in the ordinary test build, with no
// libFuzzer. With --mutate N it then runs N mutants of each file as well: bit flips, hostile
// bytes and tokens (invalid UTF-8, deep brackets, huge numbers, YAML aliases, SSE framing),
// deletions, repeats and splices with the other files. Mutants come from a seeded generator
// (--seed), so a run is reproducible; it is bounded by count, never by time. A short run of each
// target is part of `make test` (a crash fails the build); `make fuzz` runs the coverage-guided
// fuzzer for long.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// splitmix64
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
};

const char* const kTokens[] = {"\xff",
                               "\xc3",
                               "\xed\xa0\x80",
                               "\xf4\x90\x80\x80",
                               "\xc0\xaf",
                               "[[[[[[[[[[[[[[[[",
                               "{\"a\":{\"a\":{\"a\":",
                               "\"",
                               "\\",
                               "\\u0000",
                               "\\udc00",
                               "\\ud800",
                               "-",
                               "99999999999999999999",
                               "18446744073709551616",
                               "-9223372036854775809",
                               "1e999",
                               "0.5",
                               "null",
                               "true",
                               "---\n",
                               "&a ",
                               "*a",
                               ": ",
                               "- ",
                               "\n  ",
                               "\t",
                               "\r\n\r\n",
                               "\n\n",
                               "data: ",
                               "event: ",
                               "[DONE]",
                               "%FF",
                               "%00",
                               "%",
                               "{}",
                               "[]",
                               "\"usage\":",
                               "\"model\":",
                               "apiVersion: kueue.x-k8s.io/v1beta1\n",
                               "kind: Workload\n",
                               "nvidia.com/gpu",
                               "Gi",
                               "m",
                               ",",
                               "\x00"};

std::string mutate(std::string s, const std::vector<std::string>& corpus, Rng& rng) {
  const size_t rounds = 1 + rng.below(4);
  for (size_t r = 0; r < rounds; ++r) {
    switch (rng.below(6)) {
      case 0:  // flip a bit
        if (!s.empty()) s[rng.below(s.size())] ^= static_cast<char>(1u << rng.below(8));
        break;
      case 1: {  // a hostile byte
        static const char kBytes[] = {'\0', '\xff', '\x7f', '\x80', '"', '\\', '{', '[',
                                      ':',  ',',    '\n',   '#',    '&', '*',  '%', '-'};
        if (!s.empty()) s[rng.below(s.size())] = kBytes[rng.below(sizeof kBytes)];
        break;
      }
      case 2: {  // a hostile token
        const char* t = kTokens[rng.below(std::size(kTokens))];
        s.insert(rng.below(s.size() + 1), t, std::max<size_t>(1, std::strlen(t)));
        break;
      }
      case 3:  // delete a range
        if (!s.empty()) {
          const size_t at = rng.below(s.size());
          s.erase(at, 1 + rng.below(std::min<size_t>(64, s.size() - at)));
        }
        break;
      case 4:  // repeat a range
        if (!s.empty()) {
          const size_t at = rng.below(s.size());
          const std::string chunk = s.substr(at, 1 + rng.below(32));
          const size_t times = 1 + rng.below(16);
          for (size_t i = 0; i < times; ++i) s.insert(at, chunk);
        }
        break;
      case 5: {  // splice with another input
        const std::string& other = corpus[rng.below(corpus.size())];
        s = s.substr(0, rng.below(s.size() + 1)) + other.substr(rng.below(other.size() + 1));
        break;
      }
    }
  }
  if (s.size() > 64 * 1024) s.resize(64 * 1024);
  return s;
}

// With PURSER_FUZZ_LAST=FILE, each input is written there before it runs, so an input that
// hangs or exhausts memory can be found.
void run(const std::string& bytes) {
  if (const char* last = std::getenv("PURSER_FUZZ_LAST")) {
    std::ofstream(last, std::ios::binary | std::ios::trunc) << bytes;
  }
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  size_t mutants = 0;
  uint64_t seed = 1;
  std::vector<std::string> corpus;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--mutate" && i + 1 < argc) {
      mutants = std::strtoull(argv[++i], nullptr, 10);
      continue;
    }
    if (arg == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
      continue;
    }
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(arg)) {
      for (const auto& e : std::filesystem::directory_iterator(arg)) files.push_back(e.path());
    } else {
      files.emplace_back(arg);
    }
    for (const auto& f : files) {
      std::ifstream in(f, std::ios::binary);
      corpus.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
  }
  for (const auto& input : corpus) run(input);
  Rng rng{seed};
  for (const auto& input : corpus) {
    for (size_t m = 0; m < mutants; ++m) run(mutate(input, corpus, rng));
  }
  std::printf("replayed %zu input(s) and %zu mutant(s) (seed %llu)\n", corpus.size(),
              corpus.size() * mutants, static_cast<unsigned long long>(seed));
  return corpus.empty() ? 1 : 0;
}
