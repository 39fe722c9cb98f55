#include "job_target.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "error.h"

namespace trainctl::cli {
namespace {

using ::testing::HasSubstr;

TEST(JobTargetTest, KindFromTypeTakesKubectlsSpellings) {
  for (const char* type : {"pytorchjob", "pytorchjobs", "PyTorchJob", "PYTORCHJOBS",
                           "pytorchjob.kubeflow.org", "pytorchjobs.kubeflow.org"}) {
    EXPECT_EQ(kind_from_type(type), api::JobKind::PyTorchJob) << type;
  }
  EXPECT_EQ(kind_from_type("tfjob"), api::JobKind::TFJob);
  EXPECT_EQ(kind_from_type("mpijobs.kubeflow.org"), api::JobKind::MPIJob);
  for (const char* type : {"pod", "job", "tfjob.example.com", "", "tfjob."})
    EXPECT_EQ(kind_from_type(type), std::nullopt) << type;
}

TEST(JobTargetTest, ParseJobRefSplitsTypeAndNameAndChecksKind) {
  const JobRef plain = parse_job_ref("mnist", std::nullopt);
  EXPECT_EQ(plain.name, "mnist");
  EXPECT_EQ(plain.kind, std::nullopt);
  EXPECT_EQ(parse_job_ref("mnist", api::JobKind::TFJob).kind, api::JobKind::TFJob);
  const JobRef typed = parse_job_ref("tfjob.kubeflow.org/mnist", std::nullopt);
  EXPECT_EQ(typed.name, "mnist");
  EXPECT_EQ(typed.kind, api::JobKind::TFJob);
  EXPECT_EQ(parse_job_ref("tfjob/mnist", api::JobKind::TFJob).kind, api::JobKind::TFJob);
  auto usage = [](const char* arg, std::optional<api::JobKind> kind) {
    try {
      parse_job_ref(arg, kind);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Usage) << arg;
      return e.message();
    }
    ADD_FAILURE() << arg << " parsed";
    return std::string();
  };
  EXPECT_THAT(usage("pytorchjob/x", api::JobKind::TFJob),
              HasSubstr("\"pytorchjob/x\" names a PyTorchJob but --kind is tfjob"));
  EXPECT_THAT(usage("pods/x", std::nullopt), HasSubstr("\"pods\" is not a job type"));
  EXPECT_THAT(usage("tfjob/", std::nullopt), HasSubstr("TYPE/NAME"));
  EXPECT_THAT(usage("tfjob/a/b", std::nullopt), HasSubstr("TYPE/NAME"));
  EXPECT_THAT(usage("", std::nullopt), HasSubstr("must not be empty"));
}

}  // namespace
}  // namespace trainctl::cli
