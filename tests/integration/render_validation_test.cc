// The shipped templates, rendered with typical values, produce manifests the job validator
// accepts, and a bad value is caught with the rendered file's line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "api/manifest.h"
#include "api/validation.h"
#include "error.h"
#include "render/render.h"
#include "render/templates.h"
#include "tests/support/expect_error.h"

namespace trainctl {
namespace {

using nlohmann::json;

std::string render_shipped(const std::string& name, const json& values) {
  const auto search = render::template_search_path({}, {}, {}, TRAINCTL_SOURCE_DIR "/templates");
  return render::render_template(render::read_template(render::find_template(search, name)), values,
                                 name);
}

const json kValues = {{"name", "mnist"},
                      {"namespace", "team-a"},
                      {"image", "registry.example.com/mnist:1.0"},
                      {"command", {"python", "train.py", "--epochs=3"}},
                      {"workers", 3},
                      {"gpus", 2},
                      {"cpu", "8"},
                      {"memory", "32Gi"},
                      {"env", {{{"name", "NOTE"}, {"value", "a: b # not a comment"}}}},
                      {"queue", "team-a"}};

TEST(RenderValidationTest, EveryShippedTemplateRendersAValidJob) {
  for (const std::string name : {"tfjob", "pytorchjob", "mpijob"}) {
    const std::string yaml = render_shipped(name, kValues);
    const auto manifests = api::parse_manifests(yaml, name + ".yaml");
    ASSERT_EQ(manifests.size(), 1u) << name;
    EXPECT_NO_THROW(api::validate_job(manifests[0])) << name << ":\n" << yaml;
    EXPECT_EQ(manifests[0].object["metadata"]["name"], "mnist") << name;
  }
}

TEST(RenderValidationTest, AnInvalidValueIsReportedAtItsRenderedLine) {
  json values = kValues;
  values["memory"] = "lots";
  const std::string yaml = render_shipped("tfjob", values);
  const auto manifests = api::parse_manifests(yaml, "tfjob.yaml");
  const Error e = testing::expect_error([&] { api::validate_job(manifests[0]); });
  EXPECT_EQ(e.kind(), ErrorKind::Validation);
  EXPECT_THAT(e.message(),
              ::testing::MatchesRegex("(.|\n)*tfjob\\.yaml:[0-9]+: "
                                      "spec\\.tfReplicaSpecs\\.Worker\\.template\\.spec\\."
                                      "containers\\[0\\]\\.resources\\.[a-z]+\\.memory(.|\n)*"));
}

}  // namespace
}  // namespace trainctl
