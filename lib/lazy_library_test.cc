#include "lazy_library.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "tests/support/expect_error.h"

namespace trainctl {
namespace {

// Declared as the forwarders declare theirs (lazy_library.h's TRAINCTL_FORWARD_SYMBOL).
constinit LazyLibrary libm("libm.so.6", "tests need");
constinit LazyLibrary::Symbol cosine(libm, "cos");
constinit LazyLibrary::Symbol missing(libm, "trainctl_no_such_function");
const bool added = libm.add(cosine) && libm.add(missing);
// As a forwarder called by a static initialiser that runs before the forwarder's own.
constinit LazyLibrary::Symbol not_added(libm, "sin");

constinit LazyLibrary absent("libtrainctl-absent.so.9", "nothing needs");
constinit LazyLibrary::Symbol in_absent(absent, "f");

TEST(LazyLibraryTest, ASymbolIsTheLibrarysOwnFunction) {
  ASSERT_TRUE(added);
  EXPECT_DOUBLE_EQ(cosine.get<double(double)>()(0.5), std::cos(0.5));
  EXPECT_EQ(reinterpret_cast<void*>(cosine.get<double(double)>()),
            reinterpret_cast<void*>(libm.resolve<double(double)>("cos")));
}

TEST(LazyLibraryTest, ASymbolNotAddedIsFoundOnItsFirstCall) {
  EXPECT_DOUBLE_EQ(not_added.get<double(double)>()(0.25), std::sin(0.25));
}

TEST(LazyLibraryTest, AFunctionTheLibraryLacksFailsWhenCalledNotWhenLoaded) {
  EXPECT_NO_THROW(libm.load());
  const Error e = testing::expect_error([] { missing.get<void()>(); });
  EXPECT_EQ(e.kind(), ErrorKind::Connection);
  EXPECT_THAT(e.message(), ::testing::HasSubstr("libm.so.6 has no trainctl_no_such_function"));
}

TEST(LazyLibraryTest, AMissingLibrarySaysWhatNeedsIt) {
  const Error e = testing::expect_error([] { in_absent.get<void()>(); });
  EXPECT_EQ(e.kind(), ErrorKind::Connection);
  EXPECT_THAT(e.message(),
              ::testing::HasSubstr("cannot load libtrainctl-absent.so.9, which nothing needs"));
}

}  // namespace
}  // namespace trainctl
