#pragma once

// Tests that run over both ways requests travel (kube::Transport): libcurl's, the controller's,
// and the HTTP/1.1 connections of trainctl's own, the CLI's. A suite derives from TransportTest
// and is instantiated with
//   INSTANTIATE_TEST_SUITE_P(Transports, Suite, testing::kBothTransports, testing::transport_name);

#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "kube/rest_config.h"
#include "tests/support/https_test_server.h"

namespace trainctl::kube {

/// How gtest names a test's transport (in `--gtest_list_tests`, and so in ctest's names).
inline void PrintTo(Transport transport, std::ostream* out) {
  *out << (transport == Transport::Direct ? "Direct" : "Multiplexed");
}

}  // namespace trainctl::kube

namespace trainctl::testing {

inline const auto kBothTransports =
    ::testing::Values(kube::Transport::Multiplexed, kube::Transport::Direct);

inline std::string transport_name(const ::testing::TestParamInfo<kube::Transport>& info) {
  return ::testing::PrintToString(info.param);
}

class TransportTest : public ::testing::TestWithParam<kube::Transport> {
 protected:
  /// The server's config, over this test's transport.
  kube::RestConfig rest_config_for(const HttpsTestServer& server) const {
    kube::RestConfig config = server.rest_config();
    config.transport = GetParam();
    return config;
  }
};

}  // namespace trainctl::testing
