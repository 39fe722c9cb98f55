// A real kubectl (Debian's kubernetes-client, or whichever is installed) against one sandbox
// started with `trainctl sandbox up --detach` for the whole suite: the independent check that the
// emulated API server is faithful to what kubectl expects. KUBECTL=/path/to/kubectl picks another.
#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/background_command.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace trainctl {
namespace {

namespace fs = std::filesystem;
using testing::BackgroundCommand;
using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

using Output = testing::CommandResult;

std::string shell_quote(const std::string& s) {
  std::string quoted = "'";
  for (char c : s)
    quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

/// $KUBECTL, else the first executable `kubectl` on PATH; empty when there is none.
std::string find_kubectl() {
  if (const char* env = std::getenv("KUBECTL"); env != nullptr && *env != '\0')
    return env;
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / "kubectl";
    if (::access(candidate.c_str(), X_OK) == 0)
      return candidate.string();
  }
  return "";
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

/// A Pod the sandbox's kubelet runs as scripted by its annotations.
std::string pod_yaml(const std::string& name, int run_seconds, int exit_code = 0,
                     const std::string& command = R"(["python", "train.py"])") {
  return fmt::format(R"(apiVersion: v1
kind: Pod
metadata:
  name: {}
  annotations:
    sandbox.trainctl.io/run-seconds: "{}"
    sandbox.trainctl.io/exit-code: "{}"
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: python:3.12
    command: {}
)",
                     name, run_seconds, exit_code, command);
}

/// A TFJob-like CRD, structural, with free-form spec and status as Kubeflow's own CRDs have.
constexpr const char* kTfJobCrd = R"(apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: tfjobs.kubeflow.org
spec:
  group: kubeflow.org
  scope: Namespaced
  names:
    kind: TFJob
    listKind: TFJobList
    plural: tfjobs
    singular: tfjob
    shortNames: [tfj]
    categories: [kubeflow]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-preserve-unknown-fields: true
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
)";

constexpr const char* kTfJob = R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: mnist
spec:
  runPolicy:
    cleanPodPolicy: None
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: tensorflow
            image: kubeflow/tf-mnist:latest
)";

class KubectlTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    kubectl_ = find_kubectl();
    if (kubectl_.empty() || ::access(kubectl_.c_str(), X_OK) != 0) {
      setup_error_ = fmt::format(
          "kubectl is not installed{}: run packaging/bootstrap-debian.sh (it installs Debian's "
          "kubernetes-client), or set KUBECTL=/path/to/kubectl",
          kubectl_.empty() ? "" : " at " + kubectl_);
      return;
    }
    dir_ = std::make_unique<testing::TempDir>();
    fs::create_directories(dir_->path() / "home");
    const Output up = testing::run_command(
        fmt::format("env -u KUBECONFIG {} sandbox up --detach --port 0 --data-dir {}",
                    TRAINCTL_BINARY, shell_quote(data_dir().string())));
    if (up.exit_code != 0) {
      setup_error_ =
          fmt::format("trainctl sandbox up failed (exit {}):\n{}{}", up.exit_code, up.out, up.err);
    }
  }

  static void TearDownTestSuite() {
    if (dir_ == nullptr)
      return;
    testing::run_command(fmt::format("{} sandbox down --data-dir {}", TRAINCTL_BINARY,
                                     shell_quote(data_dir().string())));
    dir_.reset();
  }

 protected:
  void SetUp() override {
    if (!setup_error_.empty())
      FAIL() << setup_error_;
  }

  static fs::path data_dir() { return dir_->path() / "sandbox"; }

  /// The environment and leading flags of every kubectl call: a HOME of its own (so kubectl's
  /// discovery cache never outlives the suite), the sandbox's kubeconfig, a request timeout.
  static std::vector<std::string> kubectl_argv(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"env", "HOME=" + (dir_->path() / "home").string(),
                                     "KUBECONFIG=" + (data_dir() / "kubeconfig").string(), kubectl_,
                                     "--request-timeout=10s"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  static Output kubectl(const std::vector<std::string>& args) {
    std::string cmd;
    for (const auto& a : kubectl_argv(args))
      cmd += shell_quote(a) + " ";
    return testing::run_command(cmd);
  }

  /// Writes a manifest into the suite's temp dir; returns its path for `-f`.
  static std::string manifest(const std::string& name, const std::string& yaml) {
    return dir_->write("manifests/" + name, yaml).string();
  }

  static Output create_pod(const std::string& name, int run_seconds, int exit_code = 0) {
    return kubectl(
        {"create", "-f", manifest(name + ".yaml", pod_yaml(name, run_seconds, exit_code))});
  }

  /// Applies the packaged PyTorchJob CRD (idempotent) and waits until it is Established.
  static bool apply_pytorchjob_crd() {
    const std::string crd =
        (fs::path(TRAINCTL_SOURCE_DIR) / "packaging/crds/kubeflow.org_pytorchjobs.yaml").string();
    return kubectl({"apply", "--server-side", "-f", crd}).exit_code == 0 &&
           kubectl({"wait", "--for", "condition=Established", "--timeout=10s",
                    "crd/pytorchjobs.kubeflow.org"})
                   .exit_code == 0;
  }

  static std::string jsonpath(const std::string& kind_and_name, const std::string& path,
                              const std::string& ns = "") {
    std::vector<std::string> args = {"get", kind_and_name, "-o", "jsonpath=" + path};
    if (!ns.empty())
      args.insert(args.end(), {"-n", ns});
    return kubectl(args).out;
  }

  /// Polls the pod's phase until it is `want` or `limit` passes; returns every phase seen, in
  /// order and without repeats.
  static std::vector<std::string> phases_until(const std::string& pod, const std::string& want,
                                               seconds limit) {
    std::vector<std::string> seen;
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      const std::string phase = jsonpath("pod/" + pod, "{.status.phase}");
      if (seen.empty() || seen.back() != phase)
        seen.push_back(phase);
      if (phase == want)
        break;
      std::this_thread::sleep_for(milliseconds(100));
    }
    return seen;
  }

  static inline std::string kubectl_;
  static inline std::string setup_error_;
  static inline std::unique_ptr<testing::TempDir> dir_;
};

TEST_F(KubectlTest, GetNodesListsTheFourSimulatedNodes) {
  Output r = kubectl({"get", "nodes", "-o", "name"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto nodes = lines_of(r.out);
  EXPECT_EQ(nodes.size(), 4u) << r.out;
  for (const auto& node : nodes)
    EXPECT_THAT(node, ::testing::StartsWith("node/"));

  Output table = kubectl({"get", "nodes"});
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, ::testing::StartsWith("NAME"));
  EXPECT_EQ(lines_of(table.out).size(), 5u) << table.out;
}

TEST_F(KubectlTest, GetNamespacesShowsDefaultAndKubeSystem) {
  Output r = kubectl({"get", "namespaces", "-o", "name"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(lines_of(r.out),
              ::testing::IsSupersetOf({"namespace/default", "namespace/kube-system"}));
}

TEST_F(KubectlTest, CreatedPodRunsThenSucceeds) {
  Output created = create_pod("runs-then-succeeds", 3);
  ASSERT_EQ(created.exit_code, 0) << created.err;
  EXPECT_EQ(created.out, "pod/runs-then-succeeds created\n");
  const auto phases = phases_until("runs-then-succeeds", "Succeeded", seconds(20));
  EXPECT_THAT(phases, ::testing::Contains("Running"));
  EXPECT_EQ(phases.back(), "Succeeded") << ::testing::PrintToString(phases);
  EXPECT_EQ(jsonpath("pod/runs-then-succeeds", "{.spec.nodeName}").empty(), false)
      << "a pod that ran must have been bound to a node";
}

TEST_F(KubectlTest, CreatingAnExistingPodFailsWithAlreadyExists) {
  ASSERT_EQ(create_pod("created-twice", 1).exit_code, 0);
  Output again = create_pod("created-twice", 1);
  EXPECT_NE(again.exit_code, 0);
  EXPECT_THAT(again.err, HasSubstr("(AlreadyExists)"));
  EXPECT_THAT(again.err, HasSubstr("pods \"created-twice\" already exists"));
}

TEST_F(KubectlTest, LogsShowTheScriptedLines) {
  ASSERT_EQ(create_pod("logs", 2).exit_code, 0);
  ASSERT_EQ(phases_until("logs", "Succeeded", seconds(20)).back(), "Succeeded");
  Output logs = kubectl({"logs", "logs"});
  EXPECT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_EQ(logs.out, "+ python train.py\nstep 1/2\nstep 2/2\nexited with code 0\n");
}

// The log options as kube-apiserver validates them, before it looks the pod up (each message
// read from kube-apiserver 1.26 first): 400 for what does not parse, 422 PodLogOptions for the
// rest; limitBytes cuts the log, sinceTime is taken.
TEST_F(KubectlTest, LogOptionsAreValidatedAsTheRealServerDoes) {
  const auto raw = [&](const std::string& pod, const std::string& query) {
    return kubectl({"get", "--raw", "/api/v1/namespaces/default/pods/" + pod + "/log?" + query});
  };
  const Output three = raw("nosuch", "sinceSeconds=0&tailLines=-1&limitBytes=0");
  EXPECT_NE(three.exit_code, 0);
  EXPECT_THAT(three.err, HasSubstr("The PodLogOptions \"nosuch\" is invalid: \n"
                                   "* tailLines: Invalid value: -1: must be greater than or equal "
                                   "to 0\n* limitBytes: Invalid value: 0: must be greater than 0\n"
                                   "* sinceSeconds: Invalid value: 0: must be greater than 0"));
  // One cause each; a valid sinceTime gets as far as the pod, which does not exist.
  const std::pair<const char*, const char*> cases[] = {
      {"sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z",
       "[]: Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"},
      {"tailLines=abc", "strconv.ParseInt: parsing \"abc\": invalid syntax"},
      {"limitBytes=1.5", "strconv.ParseInt: parsing \"1.5\": invalid syntax"},
      {"sinceTime=abc",
       "parsing time \"abc\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"abc\" as \"2006\""},
      {"sinceTime=2023-02-29T00:00:00Z", "parsing time \"2023-02-29T00:00:00Z\": day out of range"},
      {"sinceTime=2024-13-01T00:00:00Z",
       "parsing time \"2024-13-01T00:00:00Z\": month out of range"},
      {"sinceTime=2024-01-01T00:00:00Z", "pods \"nosuch\" not found"}};
  for (const auto& [query, words] : cases)
    EXPECT_THAT(raw("nosuch", query).err, HasSubstr(words)) << query;

  ASSERT_EQ(create_pod("limited", 2).exit_code, 0);
  ASSERT_EQ(phases_until("limited", "Succeeded", seconds(20)).back(), "Succeeded");
  EXPECT_EQ(kubectl({"logs", "limited", "--limit-bytes", "20"}).out, "+ python train.py\nst");
  EXPECT_EQ(raw("limited", "sinceTime=2024-01-01T00:00:00Z").out,
            "+ python train.py\nstep 1/2\nstep 2/2\nexited with code 0\n");
}

TEST_F(KubectlTest, AFailingContainerEndsThePodFailedWithItsExitCode) {
  ASSERT_EQ(create_pod("fails", 1, 3).exit_code, 0);
  ASSERT_EQ(phases_until("fails", "Failed", seconds(20)).back(), "Failed");
  EXPECT_EQ(jsonpath("pod/fails", "{.status.containerStatuses[0].state.terminated.exitCode}"), "3");
  EXPECT_THAT(kubectl({"logs", "fails"}).out, HasSubstr("exited with code 3"));
}

TEST_F(KubectlTest, LogsFollowStreamsUntilTheContainerEnds) {
  ASSERT_EQ(create_pod("follow", 2).exit_code, 0);
  ASSERT_THAT(phases_until("follow", "Running", seconds(10)), ::testing::Contains("Running"));
  const auto started = Clock::now();
  Output logs = kubectl({"logs", "-f", "follow"});
  EXPECT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_THAT(logs.out, HasSubstr("step 2/2\nexited with code 0\n"));
  EXPECT_LT(Clock::now() - started, seconds(9)) << "logs -f did not end with the container";
}

TEST_F(KubectlTest, LabelThenSelectByLabel) {
  ASSERT_EQ(create_pod("labelled", 60).exit_code, 0);
  ASSERT_EQ(create_pod("unlabelled", 60).exit_code, 0);
  Output label = kubectl({"label", "pod", "labelled", "team=a"});
  EXPECT_EQ(label.exit_code, 0) << label.err;
  EXPECT_EQ(label.out, "pod/labelled labeled\n");
  EXPECT_EQ(kubectl({"get", "pods", "-l", "team=a", "-o", "name"}).out, "pod/labelled\n");
  EXPECT_THAT(kubectl({"get", "pods", "-l", "team!=a", "-o", "name"}).out,
              ::testing::AllOf(HasSubstr("pod/unlabelled\n"), Not(HasSubstr("pod/labelled\n"))));
}

TEST_F(KubectlTest, MergePatchIsApplied) {
  ASSERT_EQ(create_pod("patched", 60).exit_code, 0);
  const std::string patch =
      R"({"metadata":{"labels":{"stage":"tuning"},"annotations":{"owner":"alice"}}})";
  Output r = kubectl({"patch", "pod", "patched", "--type=merge", "-p", patch});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "pod/patched patched\n");
  EXPECT_EQ(jsonpath("pod/patched", "{.metadata.annotations.owner} {.metadata.labels.stage}"),
            "alice tuning");
  Output again = kubectl({"patch", "pod", "patched", "--type=merge", "-p", patch});
  EXPECT_EQ(again.out, "pod/patched patched (no change)\n")
      << "a no-op patch must not change the object (or its resourceVersion)";
}

TEST_F(KubectlTest, GetWatchSeesAPodCreatedMeanwhile) {
  ASSERT_EQ(kubectl({"create", "namespace", "watched"}).exit_code, 0);
  const std::string in_ns = manifest("anchor.yaml", pod_yaml("anchor", 60));
  ASSERT_EQ(kubectl({"create", "-n", "watched", "-f", in_ns}).exit_code, 0);
  BackgroundCommand watch(kubectl_argv({"get", "pods", "-n", "watched", "-w", "-o",
                                        R"(jsonpath={.metadata.name} {.status.phase}{"\n"})"}));
  // The anchor comes from the initial LIST; once printed, the WATCH starts from that list's
  // resourceVersion, so a pod created from here on arrives as an event.
  ASSERT_TRUE(watch.wait_for("anchor ", seconds(10))) << watch.output();

  const std::string late = manifest("late.yaml", pod_yaml("late", 1));
  ASSERT_EQ(kubectl({"create", "-n", "watched", "-f", late}).exit_code, 0);
  EXPECT_TRUE(watch.wait_for("late Pending\n", seconds(10))) << watch.output();
  EXPECT_TRUE(watch.wait_for("late Succeeded\n", seconds(15))) << watch.output();
  watch.stop();
  EXPECT_THAT(watch.output(), Not(HasSubstr("rror"))) << watch.output();
}

TEST_F(KubectlTest, DeletedPodIsGoneAndGetSaysNotFound) {
  ASSERT_EQ(create_pod("deleted", 60).exit_code, 0);
  ASSERT_THAT(phases_until("deleted", "Running", seconds(10)), ::testing::Contains("Running"));
  Output del = kubectl({"delete", "pod", "deleted"});
  EXPECT_EQ(del.exit_code, 0) << del.err;
  EXPECT_EQ(del.out, "pod \"deleted\" deleted\n");
  Output get = kubectl({"get", "pod", "deleted"});
  EXPECT_NE(get.exit_code, 0);
  EXPECT_THAT(get.err, HasSubstr("Error from server (NotFound): pods \"deleted\" not found"));
}

TEST_F(KubectlTest, ApplyCreatesThenConfiguresAConfigMap) {
  const std::string path = manifest("settings.yaml", R"(apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  learning-rate: "0.1"
)");
  Output first = kubectl({"apply", "-f", path});
  EXPECT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(first.out, "configmap/settings created\n");

  manifest("settings.yaml", R"(apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  learning-rate: "0.2"
  epochs: "5"
)");
  Output second = kubectl({"apply", "-f", path});
  EXPECT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(second.out, "configmap/settings configured\n");
  EXPECT_EQ(jsonpath("configmap/settings", "{.data.learning-rate} {.data.epochs}"), "0.2 5");

  EXPECT_EQ(kubectl({"apply", "-f", path}).out, "configmap/settings unchanged\n");
}

// `kubectl get svc` asks for the server's Table; it must print what a real cluster prints, and
// the sandbox must still be there afterwards.
TEST_F(KubectlTest, GetServicesPrintsTypeClusterIpExternalIpAndPorts) {
  Output created =
      kubectl({"create", "service", "clusterip", "web", "--tcp=80:80", "--tcp=443:8443"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  EXPECT_EQ(created.out, "service/web created\n");

  Output table = kubectl({"get", "svc", "web"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  const auto lines = lines_of(table.out);
  ASSERT_EQ(lines.size(), 2u) << table.out;
  EXPECT_THAT(lines[0],
              ::testing::MatchesRegex("NAME +TYPE +CLUSTER-IP +EXTERNAL-IP +PORT\\(S\\) +AGE *"));
  EXPECT_THAT(lines[1],
              ::testing::MatchesRegex(
                  "web +ClusterIP +10\\.96\\.[0-9]+\\.[0-9]+ +<none> +80/TCP,443/TCP +[0-9]+s *"));

  Output wide = kubectl({"get", "services", "-o", "wide"});
  ASSERT_EQ(wide.exit_code, 0) << wide.err;
  EXPECT_THAT(wide.out, HasSubstr("SELECTOR"));
  EXPECT_THAT(wide.out, ::testing::ContainsRegex("web +ClusterIP .* app=web"));

  Output still_up = kubectl({"get", "namespaces", "-o", "name"});
  EXPECT_EQ(still_up.exit_code, 0) << still_up.err;
}

// Every cluster has the `kubernetes` Service in default, 10.96.0.1:443 to the API server's port
// (kube-apiserver keeps it); no other Service gets its address.
TEST_F(KubectlTest, TheKubernetesServiceIsThereAndKeepsItsAddress) {
  const std::string server =
      kubectl({"config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"}).out;
  EXPECT_EQ(jsonpath("service/kubernetes",
                     "{.spec.clusterIP} {.spec.ports[0].name} {.spec.ports[0].port} "
                     "{.spec.ports[0].targetPort} {.metadata.labels.component}"),
            fmt::format("10.96.0.1 https 443 {} apiserver", server.substr(server.rfind(':') + 1)));
  ASSERT_EQ(kubectl({"create", "service", "clusterip", "first", "--tcp=80:80"}).exit_code, 0);
  EXPECT_NE(jsonpath("service/first", "{.spec.clusterIP}"), "10.96.0.1");
}

// `kubectl get all` lists the resources discovery puts in the category "all" (pods, services, jobs,
// deployments, HPAs, as kube-apiserver does); `kubectl get events` prints kube-apiserver's event
// columns. The sandbox's discovery had no categories (kubectl: the server doesn't have a resource
// type "all") and its events printed NAME and AGE.
TEST_F(KubectlTest, GetAllListsTheCategoryAndGetEventsPrintsTheEventColumns) {
  ASSERT_EQ(kubectl({"create", "namespace", "everything"}).exit_code, 0);
  ASSERT_EQ(kubectl({"create", "-n", "everything", "-f",
                     manifest("all-pod.yaml", pod_yaml("worker", 60))})
                .exit_code,
            0);
  ASSERT_EQ(kubectl({"create", "service", "clusterip", "web", "--tcp=80:80", "-n", "everything"})
                .exit_code,
            0);
  Output all = kubectl({"get", "all", "-n", "everything", "-o", "name"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_THAT(lines_of(all.out), ::testing::UnorderedElementsAre("pod/worker", "service/web"));

  ASSERT_EQ(kubectl({"create", "-n", "everything", "-f", manifest("event.yaml", R"(apiVersion: v1
kind: Event
metadata:
  name: worker.1
involvedObject:
  kind: Pod
  name: worker
  namespace: everything
reason: Pulled
message: Container image pulled
type: Normal
source:
  component: kubelet
count: 2
firstTimestamp: "2020-01-01T00:00:00Z"
lastTimestamp: "2020-01-01T00:00:00Z"
)")})
                .exit_code,
            0);
  // The sandbox's scheduler records its own (Scheduled), as kube-scheduler does.
  Output events =
      kubectl({"get", "events", "-n", "everything", "--field-selector", "reason=Pulled"});
  ASSERT_EQ(events.exit_code, 0) << events.err;
  const auto lines = lines_of(events.out);
  ASSERT_EQ(lines.size(), 2u) << events.out;
  EXPECT_THAT(lines[0], ::testing::MatchesRegex("LAST SEEN +TYPE +REASON +OBJECT +MESSAGE *"));
  EXPECT_THAT(lines[1],
              ::testing::MatchesRegex(
                  "[0-9]+y[0-9]*d? +Normal +Pulled +pod/worker +Container image pulled *"));
  EXPECT_THAT(lines_of(kubectl({"get", "events", "-n", "everything"}).out),
              ::testing::Contains(::testing::MatchesRegex(
                  "[0-9]+s +Normal +Scheduled +pod/worker +Successfully assigned everything/worker "
                  "to sandbox-node-[0-9] *")));
  EXPECT_THAT(kubectl({"get", "events", "-n", "everything", "-o", "wide"}).out,
              ::testing::ContainsRegex("kubelet +Container image pulled +[0-9y]+.* 2 +worker\\.1"));
}

// kubectl auth: the sandbox authorizes every authenticated caller (kube-apiserver's AlwaysAllow)
// and says so when asked; whoami names the kubeconfig's user.
TEST_F(KubectlTest, AuthCanIAndWhoamiAnswer) {
  Output can = kubectl({"auth", "can-i", "create", "pods"});
  EXPECT_EQ(can.exit_code, 0) << can.err;
  EXPECT_EQ(can.out, "yes\n");
  Output rules = kubectl({"auth", "can-i", "--list"});
  EXPECT_EQ(rules.exit_code, 0) << rules.err;
  EXPECT_THAT(rules.out, ::testing::ContainsRegex("\n\\*\\.\\* +\\[\\] +\\[\\] +\\[\\*\\]\n"));
  Output whoami = kubectl({"auth", "whoami", "-o",
                           "jsonpath={.status.userInfo.username} "
                           "{.status.userInfo.groups}"});
  EXPECT_EQ(whoami.exit_code, 0) << whoami.err;
  EXPECT_THAT(whoami.out, ::testing::MatchesRegex("[^ ]+ .*system:authenticated.*"));
}

TEST_F(KubectlTest, ApiResourcesListsBuiltInResources) {
  Output r = kubectl({"api-resources", "-o", "name"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(lines_of(r.out),
              ::testing::IsSupersetOf({"pods", "nodes", "namespaces", "configmaps",
                                       "customresourcedefinitions.apiextensions.k8s.io",
                                       "jobs.batch", "leases.coordination.k8s.io"}));
}

TEST_F(KubectlTest, CreatingACrdServesItsResourceToKubectl) {
  Output crd = kubectl({"create", "-f", manifest("tfjob-crd.yaml", kTfJobCrd)});
  ASSERT_EQ(crd.exit_code, 0) << crd.err;
  EXPECT_EQ(crd.out, "customresourcedefinition.apiextensions.k8s.io/tfjobs.kubeflow.org created\n");
  Output established = kubectl(
      {"wait", "--for", "condition=Established", "--timeout=10s", "crd/tfjobs.kubeflow.org"});
  EXPECT_EQ(established.exit_code, 0) << established.out << established.err;

  EXPECT_THAT(lines_of(kubectl({"api-resources", "-o", "name"}).out),
              ::testing::Contains("tfjobs.kubeflow.org"));
  Output empty = kubectl({"get", "tfjobs"});
  EXPECT_EQ(empty.exit_code, 0) << empty.err;
  EXPECT_THAT(empty.err, HasSubstr("No resources found in default namespace."));

  Output job = kubectl({"create", "-f", manifest("tfjob.yaml", kTfJob)});
  ASSERT_EQ(job.exit_code, 0) << job.err;
  EXPECT_EQ(job.out, "tfjob.kubeflow.org/mnist created\n");
  EXPECT_EQ(kubectl({"get", "tfjobs", "-o", "name"}).out, "tfjob.kubeflow.org/mnist\n");
  // By its short name and its category, as discovery lists them.
  EXPECT_EQ(kubectl({"get", "tfj", "-o", "name"}).out, "tfjob.kubeflow.org/mnist\n");
  EXPECT_EQ(kubectl({"get", "kubeflow", "-o", "name"}).out, "tfjob.kubeflow.org/mnist\n");
  EXPECT_EQ(jsonpath("tfjob/mnist",
                     "{.spec.tfReplicaSpecs.Worker.replicas} "
                     "{.spec.tfReplicaSpecs.Worker.template.spec.containers[0].name}"),
            "2 tensorflow")
      << "x-kubernetes-preserve-unknown-fields must keep the whole spec";
}

// kubectl's --validate against a custom resource, as kube-apiserver v1.26 answered the same
// commands with the same CRD on the real control plane: strict (the default) refuses an unknown
// field with 400, false drops it and leaves the schema's 422, warn prints a warning per field.
TEST_F(KubectlTest, CustomResourcesAreCheckedAgainstTheirCrdSchema) {
  ASSERT_TRUE(apply_pytorchjob_crd());
  const std::string job = R"(
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: schema-checked}
spec:
  foo: 1
  runPolicy: {backoffLimit: BACKOFF}
  pytorchReplicaSpecs:
    Worker: {replicas: 1, template: {spec: {containers: [{name: pytorch, image: pt:2}]}}}
)";
  auto with_backoff = [&](const std::string& value) {
    std::string text = job;
    text.replace(text.find("BACKOFF"), 7, value);
    return manifest("schema-checked.yaml", text);
  };
  const std::string bad = with_backoff("\"string\"");
  Output strict = kubectl({"create", "-f", bad});
  EXPECT_NE(strict.exit_code, 0);
  EXPECT_THAT(strict.err,
              HasSubstr("Error from server (BadRequest): error when creating \"" + bad +
                        "\": PyTorchJob in version \"v1\" cannot be handled as a PyTorchJob: "
                        "strict decoding error: unknown field \"spec.foo\""));
  Output invalid = kubectl({"create", "-f", bad, "--validate=false"});
  EXPECT_NE(invalid.exit_code, 0);
  EXPECT_THAT(invalid.err,
              HasSubstr("The PyTorchJob \"schema-checked\" is invalid: "
                        "spec.runPolicy.backoffLimit: Invalid value: \"string\": "
                        "spec.runPolicy.backoffLimit in body must be of type integer: \"string\""));
  Output warned = kubectl({"create", "-f", with_backoff("3"), "--validate=warn"});
  ASSERT_EQ(warned.exit_code, 0) << warned.err;
  EXPECT_THAT(warned.err, HasSubstr("Warning: unknown field \"spec.foo\""));
  EXPECT_EQ(jsonpath("pytorchjob/schema-checked", "{.spec.foo}|{.spec.runPolicy.backoffLimit}"),
            "|3");
}

// The shipped PyTorchJob CRD has upstream's scale subresource, so `kubectl scale` (a PATCH of
// pytorchjobs/scale) changes the Worker replicas, as it does with the Training Operator's CRD.
TEST_F(KubectlTest, ScalePyTorchJobChangesItsWorkerReplicas) {
  ASSERT_TRUE(apply_pytorchjob_crd());
  Output job = kubectl({"create", "-f", manifest("ddp.yaml", R"(
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: ddp}
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template: {spec: {containers: [{name: pytorch, image: pt:2}]}}
)")});
  ASSERT_EQ(job.exit_code, 0) << job.err;

  Output scaled = kubectl({"scale", "pytorchjob/ddp", "--replicas=5"});
  ASSERT_EQ(scaled.exit_code, 0) << scaled.err;
  EXPECT_EQ(scaled.out, "pytorchjob.kubeflow.org/ddp scaled\n");
  EXPECT_EQ(jsonpath("pytorchjob/ddp", "{.spec.pytorchReplicaSpecs.Worker.replicas}"), "5");
  Output stale = kubectl({"scale", "pytorchjob/ddp", "--current-replicas=2", "--replicas=3"});
  EXPECT_NE(stale.exit_code, 0);
  EXPECT_THAT(stale.err, HasSubstr("Expected replicas to be 2, was 5"));

  // The controller's autoscaler for elasticPolicy.metrics is an autoscaling/v2 HPA.
  Output hpa = kubectl({"create", "-f", manifest("hpa.yaml", R"(
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: ddp}
spec:
  scaleTargetRef: {apiVersion: kubeflow.org/v1, kind: PyTorchJob, name: ddp}
  minReplicas: 1
  maxReplicas: 4
)")});
  ASSERT_EQ(hpa.exit_code, 0) << hpa.err;
  EXPECT_EQ(jsonpath("hpa/ddp", "{.spec.scaleTargetRef.kind}/{.spec.maxReplicas}"), "PyTorchJob/4");
}

// `kubectl autoscale` (Debian's kubectl 1.32) looks for the target's scale subresource in
// discovery and posts an autoscaling/v1 HPA. The sandbox stores HPAs as autoscaling/v2 and serves
// both versions, converting as the real server does (v1's targetCPUUtilizationPercentage is v2's
// CPU Utilization metric); discovery lists both, v2 preferred.
TEST_F(KubectlTest, AutoscaleCreatesAnHpaThatReadsBackInV1AndV2) {
  ASSERT_EQ(kubectl({"create", "deployment", "autoscaled", "--image=nginx:1.27"}).exit_code, 0);
  Output r =
      kubectl({"autoscale", "deployment", "autoscaled", "--min=2", "--max=5", "--cpu-percent=70"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "horizontalpodautoscaler.autoscaling/autoscaled autoscaled\n");

  EXPECT_EQ(jsonpath("hpa/autoscaled",
                     "{.apiVersion} {.spec.minReplicas}-{.spec.maxReplicas} "
                     "{.spec.metrics[0].type}/{.spec.metrics[0].resource.name} "
                     "{.spec.metrics[0].resource.target.type}="
                     "{.spec.metrics[0].resource.target.averageUtilization}"),
            "autoscaling/v2 2-5 Resource/cpu Utilization=70");
  EXPECT_EQ(jsonpath("horizontalpodautoscalers.v1.autoscaling/autoscaled",
                     "{.apiVersion} {.spec.scaleTargetRef.kind}/{.spec.scaleTargetRef.name} "
                     "{.spec.minReplicas}-{.spec.maxReplicas} "
                     "{.spec.targetCPUUtilizationPercentage}"),
            "autoscaling/v1 Deployment/autoscaled 2-5 70");

  EXPECT_THAT(lines_of(kubectl({"api-versions"}).out),
              ::testing::IsSupersetOf({"autoscaling/v1", "autoscaling/v2"}));
  Output group = kubectl({"get", "--raw", "/apis/autoscaling"});
  ASSERT_EQ(group.exit_code, 0) << group.err;
  EXPECT_THAT(group.out,
              HasSubstr(R"("preferredVersion":{"groupVersion":"autoscaling/v2","version":"v2"})"));
}

// What v1 cannot say (a memory metric) travels in the autoscaling.alpha.kubernetes.io/metrics
// annotation, so a read-modify-write through autoscaling/v1 keeps the v2 object's metrics.
TEST_F(KubectlTest, HpaWrittenBackThroughV1KeepsItsV2OnlyMetrics) {
  Output created = kubectl({"create", "-f", manifest("hpa-memory.yaml", R"(
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: memory}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 3
  metrics:
  - type: Resource
    resource: {name: memory, target: {type: AverageValue, averageValue: 1Gi}}
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}
)")});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  Output v1 = kubectl({"get", "horizontalpodautoscalers.v1.autoscaling/memory", "-o", "json"});
  ASSERT_EQ(v1.exit_code, 0) << v1.err;
  EXPECT_THAT(v1.out, HasSubstr(R"("targetCPUUtilizationPercentage": 50)"));
  EXPECT_THAT(v1.out, HasSubstr("autoscaling.alpha.kubernetes.io/metrics"));

  std::string edited = v1.out;
  const std::string max = R"("maxReplicas": 3)";
  ASSERT_NE(edited.find(max), std::string::npos) << edited;
  edited.replace(edited.find(max), max.size(), R"("maxReplicas": 6)");
  Output replaced = kubectl({"replace", "-f", manifest("hpa-memory-v1.json", edited)});
  ASSERT_EQ(replaced.exit_code, 0) << replaced.err;

  EXPECT_EQ(jsonpath("hpa/memory",
                     "{.spec.maxReplicas} {.spec.metrics[*].resource.name} "
                     "{.spec.metrics[0].resource.target.averageValue} "
                     "{.metadata.annotations}"),
            "6 memory cpu 1Gi ");
}

}  // namespace
}  // namespace trainctl
