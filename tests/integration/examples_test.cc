// The manifests and scripts under examples/ work as their header comments say: every job
// manifest validates offline (`submit --dry-run=client`), is created on a sandbox with the
// training CRDs and reads back with `trainctl get`; the scripts parse, and the CI script maps
// trainctl's exit codes to the pipeline's outcome.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <string>
#include <vector>

#include "api/job.h"
#include "kube/resource.h"
#include "tests/support/run_command.h"
#include "tests/support/sandbox_fixture.h"
#include "tests/support/temp_dir.h"
#include "yaml_json.h"

namespace trainctl {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const std::filesystem::path kExamples = std::filesystem::path(TRAINCTL_SOURCE_DIR) / "examples";

/// The job manifests issue 4 promises; the test fails when one goes missing.
const std::vector<std::string> kManifests = {"tfjob-ps-worker.yaml", "pytorch-ddp.yaml",
                                             "pytorch-elastic.yaml", "mpi-horovod.yaml",
                                             "queue.yaml"};

/// The documents of an example file, split into training jobs and everything else (Queues).
struct ExampleDocuments {
  std::vector<json> jobs;
  std::vector<json> others;
};

ExampleDocuments load_example(const std::string& file) {
  ExampleDocuments docs;
  for (const YAML::Node& node : YAML::LoadAllFromFile((kExamples / file).string())) {
    json doc = yaml_to_json(node);
    if (api::job_kind_from_name(doc.value("kind", "")))
      docs.jobs.push_back(std::move(doc));
    else
      docs.others.push_back(std::move(doc));
  }
  return docs;
}

/// The jobs of `docs` as one YAML stream (for stdin when the file also holds non-job documents).
std::string jobs_yaml(const ExampleDocuments& docs) {
  std::string out;
  for (const auto& job : docs.jobs)
    out += "---\n" + job.dump() + "\n";
  return out;
}

testing::CommandResult trainctl(const std::string& args, const std::string& input = "") {
  return testing::run_clean(TRAINCTL_BINARY, args, input);
}

/// `submit -f FILE` for a file of jobs only, `submit -f -` with the job documents otherwise.
testing::CommandResult submit(const std::string& flags, const std::string& file) {
  const ExampleDocuments docs = load_example(file);
  if (docs.others.empty())
    return trainctl(fmt::format("submit {} -f {}", flags, (kExamples / file).string()));
  return trainctl(fmt::format("submit {} -f -", flags), jobs_yaml(docs));
}

std::string replica_specs_field(const json& job) {
  return std::string(api::job_kind_info(*api::job_kind_from_name(job["kind"].get<std::string>()))
                         .replica_specs_field);
}

TEST(ExamplesTest, EveryJobManifestValidatesOffline) {
  for (const auto& file : kManifests) {
    SCOPED_TRACE(file);
    const ExampleDocuments docs = load_example(file);
    ASSERT_FALSE(docs.jobs.empty());
    // No server at all: a client dry run must not need one.
    const auto r = submit("--dry-run=client -o json -s https://127.0.0.1:1", file);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json out = json::parse(r.out);
    const json printed = docs.jobs.size() == 1 ? json::array({out}) : out["items"];
    ASSERT_EQ(printed.size(), docs.jobs.size());
    for (std::size_t i = 0; i < docs.jobs.size(); ++i) {
      EXPECT_EQ(printed[i]["kind"], docs.jobs[i]["kind"]);
      EXPECT_EQ(printed[i]["metadata"]["name"], docs.jobs[i]["metadata"]["name"]);
      const std::string specs = replica_specs_field(docs.jobs[i]);
      EXPECT_EQ(printed[i]["spec"][specs], docs.jobs[i]["spec"][specs]);
    }
  }
}

TEST(ExamplesTest, ABrokenExampleWouldFailValidation) {
  // The dry run above is a real check: the same manifest with an error is rejected.
  const ExampleDocuments docs = load_example("mpi-horovod.yaml");
  json job = docs.jobs.at(0);
  job["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 2;
  const auto r = trainctl("submit --dry-run=client -f -", job.dump());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("spec.mpiReplicaSpecs.Launcher.replicas"));
}

TEST(ExamplesTest, QueueExampleDefinesTheQueueItsJobUses) {
  const ExampleDocuments docs = load_example("queue.yaml");
  ASSERT_EQ(docs.others.size(), 1u);
  const json& queue = docs.others[0];
  EXPECT_EQ(queue["apiVersion"], "scheduling.volcano.sh/v1beta1");
  EXPECT_EQ(queue["kind"], "Queue");
  EXPECT_TRUE(queue["spec"]["capability"].contains("nvidia.com/gpu"));
  ASSERT_EQ(docs.jobs.size(), 1u);
  EXPECT_EQ(docs.jobs[0]["spec"]["runPolicy"]["schedulingPolicy"]["queue"],
            queue["metadata"]["name"]);
}

TEST(ExamplesTest, ShellScriptsParse) {
  int scripts = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kExamples)) {
    if (entry.path().extension() != ".sh")
      continue;
    ++scripts;
    const auto r = testing::run_command("bash -n " + entry.path().string());
    EXPECT_EQ(r.exit_code, 0) << entry.path() << ": " << r.err;
  }
  EXPECT_GE(scripts, 2);  // demo.sh and ci-pipeline.sh
}

/// A stand-in for trainctl that prints a job name for the dry run, exits with `code` for the
/// submit --wait and with `list_code` for `list`, so the CI script's branches run without a
/// cluster.
std::string fake_trainctl(const testing::TempDir& dir, int code, int list_code = 0) {
  return dir
      .write("fake-trainctl",
             fmt::format("#!/bin/sh\n"
                         "echo \"$*\" >>\"$(dirname \"$0\")/calls\"\n"
                         "case \"$*\" in *--dry-run=client*) "
                         "echo pytorchjob.kubeflow.org/bert-ddp; exit 0;; esac\n"
                         "case \"$*\" in *--wait*) exit {};; esac\n"
                         "case \"$*\" in list*) exit {};; esac\n"
                         "exit 0\n",
                         code, list_code),
             true)
      .string();
}

TEST(ExamplesTest, CiPipelineExitsWithTrainctlsCodeAndSaysWhatItMeans) {
  const struct {
    int code;
    const char* message;
    int list_code = 0;  // whether the cluster answers a plain read afterwards
  } outcomes[] = {{0, "bert-ddp succeeded"},
                  {1, "bert-ddp failed"},
                  {2, "invalid"},
                  // An API error from a cluster that answers (AlreadyExists: another run created
                  // the job meanwhile) is not worth a retry; one that cannot be reached is.
                  {3, "the cluster refused the submission (see above); not retrying"},
                  {3, "retry the pipeline later", 3},
                  {4, "deleting the job"}};
  for (const auto& o : outcomes) {
    SCOPED_TRACE(o.message);
    testing::TempDir dir;
    const std::string fake = fake_trainctl(dir, o.code, o.list_code);
    const auto r = testing::run_command(fmt::format(
        "TRAINCTL={} bash {} {} {}", fake, (kExamples / "ci-pipeline.sh").string(),
        (kExamples / "pytorch-ddp.yaml").string(), (dir.path() / "artifacts").string()));
    EXPECT_EQ(r.exit_code, o.code) << r.out << r.err;
    EXPECT_THAT(r.out + r.err, HasSubstr(o.message));
    const std::string calls = testing::TempDir::read(dir.path() / "calls");
    EXPECT_THAT(calls, HasSubstr("--wait"));
    EXPECT_THAT(calls, HasSubstr("--report " + (dir.path() / "artifacts/run.json").string()));
    EXPECT_EQ(calls.find("delete bert-ddp") != std::string::npos, o.code == 4) << calls;
  }
}

TEST(ExamplesTest, CiPipelineStopsWithExit2OnAnInvalidManifest) {
  // The real binary: the offline validation fails before anything is submitted.
  testing::TempDir dir;
  const auto bad = dir.write("bad.yaml",
                             "apiVersion: kubeflow.org/v1\nkind: TFJob\n"
                             "metadata: {name: Bad_Name}\nspec: {}\n");
  const auto r = testing::run_command(fmt::format(
      "TRAINCTL={} bash {} {} {}", TRAINCTL_BINARY, (kExamples / "ci-pipeline.sh").string(),
      bad.string(), (dir.path() / "artifacts").string()));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("Bad_Name"));
}

TEST(ExamplesSandboxTest, EveryExampleIsCreatedAndReadBack) {
  testing::LocalSandbox local;
  testing::install_training_crds(local.client());
  const std::string kubeconfig = local.sandbox().kubeconfig_path().string();
  for (const auto& file : kManifests) {
    SCOPED_TRACE(file);
    const ExampleDocuments docs = load_example(file);
    for (const auto& other : docs.others) {
      ASSERT_EQ(other["kind"], "Queue");
      local.client().create(kube::resources::queues(), "", other);
    }
    const auto r = submit("--kubeconfig " + kubeconfig, file);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const auto& job : docs.jobs) {
      const std::string name = job["metadata"]["name"];
      const api::JobKind kind = *api::job_kind_from_name(job["kind"].get<std::string>());
      EXPECT_THAT(r.out, HasSubstr(fmt::format("/{} created", name)));
      const auto got = trainctl(fmt::format("--kubeconfig {} get {} -o json", kubeconfig, name));
      ASSERT_EQ(got.exit_code, 0) << got.err;
      const json live = json::parse(got.out);
      EXPECT_EQ(live["kind"], job["kind"]);
      EXPECT_EQ(live["metadata"]["name"], name);
      const std::string specs = std::string(api::job_kind_info(kind).replica_specs_field);
      for (const auto& [type, spec] : job["spec"][specs].items())
        EXPECT_EQ(live["spec"][specs][type]["replicas"], spec["replicas"]) << type;
    }
  }
  const json queue = local.client().get(kube::resources::queues(), "", "team-a");
  EXPECT_EQ(queue["spec"]["capability"]["nvidia.com/gpu"], 16);
}

}  // namespace
}  // namespace trainctl
