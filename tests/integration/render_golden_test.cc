// Golden files of `trainctl render`: each case's flags must render exactly
// tests/golden/<case>.yaml, byte for byte. After an intended change of the templates or the
// printer, rewrite them with
//   TRAINCTL_UPDATE_GOLDEN=1 build/tests/integration_tests --gtest_filter='RenderGolden*'
// and review the diff. Each case also checks a few fields of the parsed job, so a wrong golden
// file cannot be blessed silently.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "yaml_json.h"

namespace trainctl {
namespace {

using nlohmann::json;

const std::filesystem::path kGoldenDir =
    std::filesystem::path(TRAINCTL_SOURCE_DIR) / "tests/golden";

/// One flag combination, its golden file and the fields it must render.
struct GoldenCase {
  std::string name;  // tests/golden/<name>.yaml
  std::string args;  // after `trainctl render`
  std::function<void(const json& job)> check;
};

void PrintTo(const GoldenCase& c, std::ostream* out) {
  *out << "trainctl render " << c.args;
}

/// The container of replica `type` (first container of its pod template).
const json& container(const json& job, const std::string& type) {
  for (const char* specs : {"tfReplicaSpecs", "pytorchReplicaSpecs", "mpiReplicaSpecs"}) {
    if (job["spec"].contains(specs))
      return job["spec"][specs][type]["template"]["spec"]["containers"][0];
  }
  static const json none;
  return none;
}

const json& pod_spec(const json& job, const std::string& specs, const std::string& type) {
  return job["spec"][specs][type]["template"]["spec"];
}

/// The version annotation changes with every release; golden files spell it as this.
constexpr const char* kVersionPlaceholder = "trainctl.io/version: VERSION";

std::string without_version(const std::string& yaml) {
  static const std::regex version("trainctl\\.io/version: [^\n]*");
  return std::regex_replace(yaml, version, kVersionPlaceholder);
}

const std::vector<GoldenCase>& golden_cases() {
  static const std::vector<GoldenCase> cases = {
      {"tfjob-minimal", "tfjob --name mnist --image reg/tf:2.15 -- python train.py",
       [](const json& job) {
         EXPECT_EQ(job["kind"], "TFJob");
         EXPECT_EQ(job["spec"]["tfReplicaSpecs"].size(), 1u);
         EXPECT_EQ(job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 1);
         EXPECT_EQ(container(job, "Worker")["name"], "tensorflow");
         EXPECT_EQ(container(job, "Worker")["command"], json({"python", "train.py"}));
         EXPECT_FALSE(job["spec"].contains("runPolicy"));
       }},
      {"tfjob-ps-chief-evaluator",
       "tfjob --name ps --image reg/tf:2.15 --workers 4 --ps 2 --chief 1 --evaluator 1 "
       "-- python train.py",
       [](const json& job) {
         const json& specs = job["spec"]["tfReplicaSpecs"];
         EXPECT_EQ(specs["Chief"]["replicas"], 1);
         EXPECT_EQ(specs["PS"]["replicas"], 2);
         EXPECT_EQ(specs["Worker"]["replicas"], 4);
         EXPECT_EQ(specs["Evaluator"]["replicas"], 1);
         EXPECT_EQ(container(job, "Evaluator")["image"], "reg/tf:2.15");
       }},
      {"tfjob-role-overrides",
       "tfjob --name roles --image reg/tf:2.15 --workers 2 --ps 2 --chief 1 --cpu 4 --ps-cpu 2 "
       "--ps-memory 8Gi --worker-image reg/tf:2.15-gpu --worker-gpus 1 --chief-memory 4Gi "
       "-- python train.py",
       [](const json& job) {
         EXPECT_EQ(job["spec"]["tfReplicaSpecs"]["PS"]["replicas"], 2);
         EXPECT_EQ(container(job, "PS")["resources"]["limits"]["cpu"], "2");
         EXPECT_EQ(container(job, "PS")["resources"]["requests"]["memory"], "8Gi");
         EXPECT_EQ(container(job, "PS")["image"], "reg/tf:2.15");
         EXPECT_EQ(container(job, "Worker")["image"], "reg/tf:2.15-gpu");
         EXPECT_EQ(container(job, "Worker")["resources"]["limits"]["nvidia.com/gpu"], 1);
         EXPECT_EQ(container(job, "Worker")["resources"]["limits"]["cpu"], "4");
         EXPECT_FALSE(container(job, "PS")["resources"]["limits"].contains("nvidia.com/gpu"));
         EXPECT_EQ(container(job, "Chief")["resources"]["limits"]["memory"], "4Gi");
       }},
      {"tfjob-resources",
       "tfjob --name res --image reg/tf:2.15 --workers 2 --gpus 2 --cpu 500m --memory 16Gi "
       "-- python train.py",
       [](const json& job) {
         const json& resources = container(job, "Worker")["resources"];
         EXPECT_TRUE(resources["limits"]["nvidia.com/gpu"].is_number_integer());
         EXPECT_EQ(resources["limits"]["nvidia.com/gpu"], 2);
         EXPECT_EQ(resources["limits"]["cpu"], "500m");
         EXPECT_EQ(resources["requests"]["cpu"], "500m");
         EXPECT_EQ(resources["limits"]["memory"], "16Gi");
         EXPECT_FALSE(resources["requests"].contains("nvidia.com/gpu"));
       }},
      {"tfjob-quantities-from-values",
       "tfjob --name quant --image reg/tf:2.15 --set gpus=2 --set cpu=4 --set memory=1.5 "
       "-- python train.py",
       [](const json& job) {
         // Numbers from values render as Kubernetes quantities: GPUs an integer, CPU and memory
         // quantity strings. (A GPU count given as a string is an error: gpus is an integer.)
         const json& limits = container(job, "Worker")["resources"]["limits"];
         EXPECT_TRUE(limits["nvidia.com/gpu"].is_number_integer());
         EXPECT_EQ(limits["nvidia.com/gpu"], 2);
         EXPECT_EQ(limits["cpu"], "4");
         EXPECT_EQ(limits["memory"], "1.5");
       }},
      {"tfjob-pod-settings",
       "tfjob --name pods --image reg/tf:2.15 --env LR=0.1 --env OPTS=a=b --label team=vision "
       "--annotation owner=alice --volume data:/data:ro --volume ckpt:/ckpt "
       "--node-selector pool=gpu --toleration nvidia.com/gpu:NoSchedule "
       "--toleration dedicated=ml:NoExecute --host-network --image-pull-secret regcred "
       "--working-dir /workspace -- python train.py",
       [](const json& job) {
         const json& c = container(job, "Worker");
         EXPECT_EQ(c["env"], json::parse(R"([{"name":"LR","value":"0.1"},
                                              {"name":"OPTS","value":"a=b"}])"));
         EXPECT_EQ(c["workingDir"], "/workspace");
         EXPECT_EQ(c["volumeMounts"][0], json::parse(R"({"name":"vol-0","mountPath":"/data",
                                                         "readOnly":true})"));
         EXPECT_EQ(c["volumeMounts"][1]["mountPath"], "/ckpt");
         const json& pod = pod_spec(job, "tfReplicaSpecs", "Worker");
         EXPECT_EQ(pod["volumes"][1]["persistentVolumeClaim"]["claimName"], "ckpt");
         EXPECT_EQ(pod["nodeSelector"], json({{"pool", "gpu"}}));
         EXPECT_EQ(pod["tolerations"][0],
                   json::parse(R"({"key":"nvidia.com/gpu","operator":"Exists",
                                   "effect":"NoSchedule"})"));
         EXPECT_EQ(pod["tolerations"][1]["value"], "ml");
         EXPECT_EQ(pod["hostNetwork"], true);
         EXPECT_EQ(pod["imagePullSecrets"], json::parse(R"([{"name":"regcred"}])"));
         EXPECT_EQ(job["metadata"]["labels"]["team"], "vision");
         EXPECT_EQ(job["metadata"]["annotations"]["owner"], "alice");
         const json& template_meta =
             job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"];
         EXPECT_EQ(template_meta["labels"]["team"], "vision");
         EXPECT_EQ(template_meta["annotations"]["owner"], "alice");
       }},
      {"tfjob-run-policy",
       "tfjob -n team-a --name policy --image reg/tf:2.15 --queue team-a --priority-class high "
       "--min-available 3 --backoff-limit 3 --active-deadline 7200 --ttl 600 "
       "--clean-pod-policy All --restart-policy OnFailure -- python train.py",
       [](const json& job) {
         EXPECT_EQ(job["metadata"]["namespace"], "team-a");
         const json& policy = job["spec"]["runPolicy"];
         EXPECT_EQ(policy["schedulingPolicy"],
                   json::parse(R"({"queue":"team-a","priorityClass":"high","minAvailable":3})"));
         EXPECT_EQ(policy["backoffLimit"], 3);
         EXPECT_EQ(policy["activeDeadlineSeconds"], 7200);
         EXPECT_EQ(policy["ttlSecondsAfterFinished"], 600);
         EXPECT_EQ(policy["cleanPodPolicy"], "All");
         EXPECT_EQ(job["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"], "OnFailure");
       }},
      {"pytorchjob-ddp",
       "pytorchjob --name ddp --image reg/pt:2.2 --workers 4 --gpus 8 --nproc-per-node gpu "
       "-- torchrun train.py",
       [](const json& job) {
         EXPECT_EQ(job["kind"], "PyTorchJob");
         EXPECT_EQ(job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"], 1);
         EXPECT_EQ(job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"], 3);
         EXPECT_EQ(job["spec"]["nprocPerNode"], "gpu");
         EXPECT_EQ(container(job, "Master")["name"], "pytorch");
         EXPECT_EQ(container(job, "Master")["resources"]["limits"]["nvidia.com/gpu"], 8);
         EXPECT_EQ(container(job, "Worker")["resources"]["limits"]["nvidia.com/gpu"], 8);
       }},
      {"pytorchjob-role-overrides",
       "pytorchjob --name roles --image reg/pt:2.2 --workers 3 --master-cpu 2 --master-memory 4Gi "
       "--worker-gpus 1 --worker-image reg/pt:2.2-cuda -- torchrun train.py",
       [](const json& job) {
         EXPECT_EQ(job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"], 2);
         EXPECT_EQ(container(job, "Master")["resources"]["limits"]["cpu"], "2");
         EXPECT_EQ(container(job, "Master")["image"], "reg/pt:2.2");
         EXPECT_FALSE(container(job, "Master")["resources"]["limits"].contains("nvidia.com/gpu"));
         EXPECT_EQ(container(job, "Worker")["image"], "reg/pt:2.2-cuda");
         EXPECT_EQ(container(job, "Worker")["resources"]["limits"]["nvidia.com/gpu"], 1);
       }},
      {"pytorchjob-elastic",
       "pytorchjob --name elastic --image reg/pt:2.2 --workers 4 --nproc-per-node 2 "
       "--set elasticPolicy.rdzvBackend=c10d --set elasticPolicy.minReplicas=2 "
       "--set elasticPolicy.maxReplicas=4 --set elasticPolicy.maxRestarts=10 -- torchrun train.py",
       [](const json& job) {
         EXPECT_FALSE(job["spec"]["pytorchReplicaSpecs"].contains("Master"));
         EXPECT_EQ(job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"], 4);
         EXPECT_EQ(job["spec"]["elasticPolicy"],
                   json::parse(R"({"rdzvBackend":"c10d","minReplicas":2,"maxReplicas":4,
                                   "maxRestarts":10})"));
         EXPECT_EQ(job["spec"]["nprocPerNode"], "2");
       }},
      {"mpijob-horovod",
       "mpijob --name hvd --image reg/hvd:0.28 --workers 2 --gpus 4 --slots-per-worker 4 "
       "--mpi-implementation OpenMPI -- mpirun -np 8 python train.py",
       [](const json& job) {
         EXPECT_EQ(job["apiVersion"], "kubeflow.org/v2beta1");
         EXPECT_EQ(job["spec"]["slotsPerWorker"], 4);
         EXPECT_EQ(job["spec"]["mpiImplementation"], "OpenMPI");
         EXPECT_EQ(job["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"], 1);
         EXPECT_EQ(job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"], 2);
         EXPECT_EQ(container(job, "Launcher")["name"], "mpi-launcher");
         EXPECT_EQ(container(job, "Launcher")["command"],
                   json({"mpirun", "-np", "8", "python", "train.py"}));
         EXPECT_FALSE(container(job, "Launcher").contains("resources"));
         EXPECT_EQ(container(job, "Worker")["name"], "mpi-worker");
         EXPECT_FALSE(container(job, "Worker").contains("command"));
         EXPECT_EQ(container(job, "Worker")["resources"]["limits"]["nvidia.com/gpu"], 4);
       }},
      {"mpijob-intel-launcher",
       "mpijob --name intel --image reg/mpi:1 --workers 3 --gpus 2 --mpi-implementation Intel "
       "--launcher-cpu 1 --launcher-memory 2Gi -- mpirun python train.py",
       [](const json& job) {
         EXPECT_EQ(job["spec"]["slotsPerWorker"], 2);  // defaults to --gpus
         EXPECT_EQ(job["spec"]["mpiImplementation"], "Intel");
         EXPECT_EQ(job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"], 3);
         EXPECT_EQ(container(job, "Launcher")["resources"],
                   json::parse(R"({"limits":{"cpu":"1","memory":"2Gi"},
                                   "requests":{"cpu":"1","memory":"2Gi"}})"));
       }},
  };
  return cases;
}

class RenderGoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(RenderGoldenTest, MatchesTheGoldenFile) {
  const GoldenCase& c = GetParam();
  // Run from an empty directory with a clean environment: no .trainctl.yaml, user config or
  // TRAINCTL_* values can leak into the output.
  testing::TempDir cwd;
  const testing::CommandResult r =
      testing::run_clean(TRAINCTL_BINARY, "render " + c.args, "", cwd.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string rendered = without_version(r.out);
  const json job = yaml_to_json(YAML::Load(rendered));
  std::smatch name;
  ASSERT_TRUE(std::regex_search(c.args, name, std::regex("--name ([^ ]+)")))
      << "a golden case needs a fixed --name";
  EXPECT_EQ(job["metadata"]["name"], name[1].str());
  EXPECT_TRUE(job["metadata"]["annotations"].contains("trainctl.io/spec-hash"));
  c.check(job);

  const auto golden = kGoldenDir / (c.name + ".yaml");
  const char* update = std::getenv("TRAINCTL_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    std::filesystem::create_directories(kGoldenDir);
    std::ofstream(golden, std::ios::binary) << rendered;
    return;
  }
  ASSERT_TRUE(std::filesystem::exists(golden))
      << golden << " is missing; create it with TRAINCTL_UPDATE_GOLDEN=1";
  EXPECT_EQ(rendered, testing::TempDir::read(golden))
      << "`trainctl render " << c.args << "` no longer matches " << golden
      << ". If the change is intended, rerun with TRAINCTL_UPDATE_GOLDEN=1 to rewrite the golden "
         "files and review the diff.";
}

INSTANTIATE_TEST_SUITE_P(Cases, RenderGoldenTest, ::testing::ValuesIn(golden_cases()),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                           std::string name = info.param.name;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(RenderGoldenFilesTest, EveryGoldenFileHasACase) {
  for (const auto& entry : std::filesystem::directory_iterator(kGoldenDir)) {
    const std::string stem = entry.path().stem().string();
    const bool known = std::any_of(golden_cases().begin(), golden_cases().end(),
                                   [&](const GoldenCase& c) { return c.name == stem; });
    EXPECT_TRUE(known) << entry.path() << " belongs to no case in render_golden_test.cc";
  }
}

}  // namespace
}  // namespace trainctl
