#include "job_values.h"

#include <gtest/gtest.h>

namespace trainctl::cli {
namespace {

// The trainctl.io/spec-hash annotation: sha256 of the spec with sorted keys and no spaces, the
// digest `sha256sum` prints for that text.
TEST(SpecHashTest, IsTheSha256OfTheSpecWithSortedKeysAndNoSpaces) {
  EXPECT_EQ(spec_hash(nlohmann::json::object()),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a");
  EXPECT_EQ(spec_hash({{"b", {1, "x"}}, {"a", {{"z", true}}}}),  // {"a":{"z":true},"b":[1,"x"]}
            "a152735c9c773014784e195ed74b8ae150c66911fcc92e21e6870726a1229790");
}

}  // namespace
}  // namespace trainctl::cli
