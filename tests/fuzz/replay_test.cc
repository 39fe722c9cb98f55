// Corpus replay: every file under tests/fuzz/corpus/<target>/ through the target's
// LLVMFuzzerTestOneInput, in the ordinary build (any compiler, no libFuzzer). Keeps the fuzz
// targets compiling and every regression input passing in CI; `packaging/fuzz` does the fuzzing.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#define TRAINCTL_FUZZ_TARGET(name) \
  extern "C" int trainctl_fuzz_##name(const std::uint8_t* data, std::size_t size);
#include "fuzz_targets.inc"
#undef TRAINCTL_FUZZ_TARGET

namespace {

using FuzzTarget = int (*)(const std::uint8_t*, std::size_t);

/// Runs every corpus file of `target`; returns how many there were.
int replay(const std::string& target, FuzzTarget run) {
  const std::filesystem::path dir =
      std::filesystem::path(TRAINCTL_SOURCE_DIR) / "tests/fuzz/corpus" / target;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    SCOPED_TRACE(entry.path().string());
    EXPECT_EQ(run(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), 0);
    ++files;
  }
  return files;
}

#define TRAINCTL_FUZZ_TARGET(name)                     \
  TEST(FuzzCorpus, name) {                             \
    EXPECT_GT(replay(#name, trainctl_fuzz_##name), 0); \
  }
#include "fuzz_targets.inc"
#undef TRAINCTL_FUZZ_TARGET

}  // namespace
