#include "render/value_schema.h"

#include <gtest/gtest.h>

#include <string>

#include "error.h"
#include "tests/support/expect_error.h"

namespace trainctl::render {
namespace {

using api::JobKind;
using nlohmann::json;

const ValueSchema& pytorch() {
  return builtin_schema(JobKind::PyTorchJob);
}

/// The message check_values throws for `layer` from `origin`; "" when it accepts the layer.
std::string problems(const std::string& layer, const ValueOrigin& origin,
                     const ValueSchema& schema = pytorch()) {
  try {
    check_values(json::parse(layer), schema, origin);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage) << e.message();  // exit code 2
    return e.message();
  }
  return "";
}

const ValueOrigin kFlags{.flags = true};
const ValueOrigin kSet{.label = "--set x"};

TEST(ValueSchema, FlagValuesAreCheckedAndNamedByTheirFlag) {
  EXPECT_EQ(problems(R"({"workers": -1})", kFlags), "--workers: must be at least 1, got -1");
  EXPECT_EQ(problems(R"({"nprocPerNode": "many"})", kFlags),
            "--nproc-per-node: must be auto, cpu, gpu or a positive integer, got \"many\"");
  EXPECT_EQ(problems(R"({"worker": {"gpus": -2}})", kFlags),
            "--worker-gpus: must be at least 0, got -2");
  EXPECT_EQ(problems(R"({"restartPolicy": "Sometimes"})", kFlags),
            "--restart-policy: must be one of Always, OnFailure, Never or ExitCode, got "
            "\"Sometimes\"");
  EXPECT_EQ(problems(R"({"chief": 2})", kFlags, builtin_schema(JobKind::TFJob)),
            "--chief: must be at most 1, got 2");
  EXPECT_EQ(problems(R"({"workers": 0})", kFlags, builtin_schema(JobKind::TFJob)), "");
  EXPECT_EQ(problems(R"({"slotsPerWorker": 0})", kFlags, builtin_schema(JobKind::MPIJob)),
            "--slots-per-worker: must be at least 1, got 0");
}

TEST(ValueSchema, SetValuesAreCheckedLikeTheTypedFlags) {
  const ValueOrigin set{.label = "--set workers=abc"};
  EXPECT_EQ(problems(R"({"workers": "abc"})", set),
            "--set workers=abc: workers: must be an integer, got \"abc\"");
  EXPECT_EQ(problems(R"({"workers": -1})", kSet), "--set x: workers: must be at least 1, got -1");
  EXPECT_EQ(problems(R"({"workers": [1, 2]})", kSet),
            "--set x: workers: must be an integer, got [1,2]");
  EXPECT_EQ(problems(R"({"workers": 2.5})", kSet), "--set x: workers: must be an integer, got 2.5");
  EXPECT_EQ(problems(R"({"gpus": "2"})", kSet), "--set x: gpus: must be an integer, got \"2\"");
  EXPECT_EQ(problems(R"({"env": "notalist"})", kSet),
            "--set x: env: must be a list of {name, value} or a map of NAME: value, got "
            "\"notalist\"");
  EXPECT_EQ(problems(R"({"env": [{"value": "1"}]})", kSet),
            "--set x: env[0]: must be {name, value} with a name, got {\"value\":\"1\"}");
  EXPECT_EQ(problems(R"({"labels": {"version": 2}})", kSet),
            "--set x: labels.version: must be a string, got 2 (quote it, or use --set-string)");
  EXPECT_EQ(problems(R"({"cpu": "lots"})", kSet),
            "--set x: cpu: must be a quantity such as 4, 500m or 16Gi, got \"lots\"");
  EXPECT_EQ(problems(R"({"hostNetwork": "yes"})", kSet),
            "--set x: hostNetwork: must be true or false, got \"yes\"");
  EXPECT_EQ(problems(R"({"command": ["python", 3]})", kSet),
            "--set x: command[1]: must be a string, got 3 (quote it, or use --set-string)");
}

TEST(ValueSchema, GoodValuesPassAndNullLeavesAValueUnset) {
  EXPECT_EQ(problems(R"({"name": "bert", "image": "reg/pt:1", "workers": 4, "gpus": 8,
      "cpu": 4, "memory": "16Gi", "nprocPerNode": 4, "env": {"EPOCHS": 3},
      "volumes": ["data:/data:ro", {"pvc": "ckpt", "mount": "/ckpt", "readOnly": false}],
      "labels": {"team": "a"}, "tolerations": [{"key": "gpu", "operator": "Exists"}],
      "imagePullSecrets": ["regcred", {"name": "other"}], "elasticPolicy": {"maxReplicas": 8},
      "master": {"cpu": "500m", "image": "reg/pt:2"}, "worker": {"replicas": 3},
      "queue": "team-a", "backoffLimit": 3, "restartPolicy": null})",
                     kSet),
            "");
  EXPECT_EQ(problems(R"({"ps": {"replicas": 2, "cpu": 4}, "chief": 1, "evaluator": null})", kSet,
                     builtin_schema(JobKind::TFJob)),
            "");
}

TEST(ValueSchema, UnknownKeysAreAnErrorWithADidYouMean) {
  const std::string imagee = problems(R"({"imagee": "foo"})", {.label = "--set imagee=foo"});
  EXPECT_EQ(imagee.substr(0, imagee.find('\n')),
            "--set imagee=foo: imagee: unknown value (did you mean \"image\"?)");
  EXPECT_NE(imagee.find("a template of your own, given with --template, takes any"),
            std::string::npos)
      << imagee;
  const std::string nested = problems(R"({"worker": {"imge": "foo"}})", {.label = "values.yaml"});
  EXPECT_EQ(nested.substr(0, nested.find('\n')),
            "values.yaml: worker.imge: unknown value (did you mean \"worker.image\"?)");
  const std::string far = problems(R"({"dataset": "s3://x"})", kSet);
  EXPECT_EQ(far.substr(0, far.find('\n')), "--set x: dataset: unknown value");
  const std::string volume =
      problems(R"({"volumes": [{"pvc": "a", "mount": "/a", "readonly": true}]})", kSet);
  EXPECT_EQ(volume.substr(0, volume.find('\n')),
            "--set x: volumes[0].readonly: unknown value (did you mean \"volumes[0].readOnly\"?)");
}

TEST(ValueSchema, AnotherKindsValueIsAnErrorExceptInSharedDefaults) {
  EXPECT_EQ(problems(R"({"ps": 2})", kSet),
            "--set x: ps: the pytorchjob template does not read it (the tfjob template does)");
  EXPECT_EQ(problems(R"({"slotsPerWorker": 2})", {.label = "values.yaml"}),
            "values.yaml: slotsPerWorker: the pytorchjob template does not read it (the mpijob "
            "template does)");
  // .trainctl.yaml and TRAINCTL_* hold defaults for every template.
  EXPECT_EQ(
      problems(R"({"ps": 2, "slotsPerWorker": 2})", {.label = ".trainctl.yaml", .shared = true}),
      "");
  // ... but are checked all the same.
  EXPECT_EQ(problems(R"({"workers": "x"})", {.label = "TRAINCTL_WORKERS", .shared = true}),
            "TRAINCTL_WORKERS: workers: must be an integer, got \"x\"");
  EXPECT_NE(problems(R"({"imagee": "x"})", {.label = "TRAINCTL_IMAGEE", .shared = true}), "");
}

TEST(ValueSchema, EveryProblemOfALayerIsListed) {
  EXPECT_EQ(problems(R"({"workers": 0, "gpus": -1})", kFlags),
            "--gpus: must be at least 0, got -1\n--workers: must be at least 1, got 0");
}

TEST(ValueSchema, FlagsOfTheRolesComeFromTheSchema) {
  const ValueSchema& tf = builtin_schema(JobKind::TFJob);
  std::vector<std::string> roles;
  for (const auto& r : tf.roles)
    roles.emplace_back(r.name);
  EXPECT_EQ(roles, (std::vector<std::string>{"chief", "ps", "worker", "evaluator"}));
  std::vector<std::string> flags;
  for (const auto& v : tf.role_values) {
    if (!v.flag.empty())
      flags.emplace_back(v.flag);
  }
  EXPECT_EQ(flags, (std::vector<std::string>{"image", "cpu", "memory", "gpus"}));
  ASSERT_NE(pytorch().find("nprocPerNode"), nullptr);
  EXPECT_EQ(tf.find("nprocPerNode"), nullptr);
}

TEST(RequireImage, SaysImageIsRequiredInFlagTerms) {
  const Error e =
      testing::expect_error([] { require_image(json::parse(R"({"workers": 3})"), pytorch()); });
  EXPECT_EQ(e.kind(), ErrorKind::Usage);
  EXPECT_EQ(e.message(),
            "--image is required (the container image of every replica; per role: "
            "--master-image, --worker-image)");
  // One replica in all: the Master only.
  EXPECT_EQ(testing::expect_error([] { require_image(json::object(), pytorch()); }).message(),
            "--image is required (the container image of every replica; per role: "
            "--master-image)");
  EXPECT_NO_THROW(require_image(json::parse(R"({"image": "i"})"), pytorch()));
  EXPECT_NO_THROW(require_image(
      json::parse(R"({"workers": 3, "master": {"image": "a"}, "worker": {"image": "b"}})"),
      pytorch()));
  EXPECT_NO_THROW(require_image(json::parse(R"({"launcher": {"image": "a"}, "worker": {"image":
      "b"}})"),
                                builtin_schema(JobKind::MPIJob)));
}

TEST(ParseVolume, ModeIsReadOnlyOrReadWrite) {
  EXPECT_EQ(parse_volume("data:/mnt:ro"), json::parse(R"({"pvc":"data","mount":"/mnt",
      "readOnly":true})"));
  EXPECT_EQ(parse_volume("data:/mnt:rw"), json::parse(R"({"pvc":"data","mount":"/mnt",
      "readOnly":false})"));
  EXPECT_EQ(parse_volume("data:/mnt"), json::parse(R"({"pvc":"data","mount":"/mnt"})"));
  EXPECT_EQ(testing::expect_error([] { parse_volume("data:/mnt:wr"); }).message(),
            "mode \"wr\" in \"data:/mnt:wr\" is not ro or rw");
  EXPECT_EQ(testing::expect_error([] { parse_volume("data"); }).message(),
            "expected PVC:MOUNT_PATH[:ro|:rw], got \"data\"");
  EXPECT_EQ(testing::expect_error([] { parse_volume("data:mnt"); }).message(),
            "mount path \"mnt\" in \"data:mnt\" must be absolute");
}

}  // namespace
}  // namespace trainctl::render
