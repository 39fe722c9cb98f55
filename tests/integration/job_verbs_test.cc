// trainctl list, get, delete, suspend and resume against a sandbox, through the real binary. Jobs,
// their status, pods and events are made here through the client, as the operator would.
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "tests/support/api_objects.h"
#include "tests/support/background_command.h"
#include "tests/support/run_command.h"
#include "tests/support/sandbox_fixture.h"
#include "tests/support/temp_dir.h"

namespace trainctl {
namespace {

using nlohmann::json;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

using RunResult = testing::CommandResult;

/// RFC 3339 for a time `ago` before now, as the API server writes timestamps.
std::string timestamp_ago(std::chrono::seconds ago) {
  const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now() - ago);
  return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(t));
}

json condition(const std::string& type, const std::string& status, const std::string& reason = "",
               const std::string& message = "") {
  return {{"type", type},
          {"status", status},
          {"reason", reason},
          {"message", message},
          {"lastTransitionTime", timestamp_ago(std::chrono::seconds(30))}};
}

/// What one job looks like: kind, name, namespace, labels, queue, workers and GPUs per worker.
struct JobSpec {
  std::string kind = "TFJob";
  std::string name;
  std::string ns = "default";
  json labels = json::object();
  std::string queue;
  int workers = 2;
  int gpus = 0;
};

class JobVerbsTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::install_training_crds(client()); }

  kube::Client& client() { return local_.client(); }

  /// Runs trainctl against this test's sandbox, or the one whose kubeconfig is `kubeconfig`.
  RunResult run(const std::string& args, std::string kubeconfig = "") {
    if (kubeconfig.empty())
      kubeconfig = local_.sandbox().kubeconfig_path().string();
    return testing::run_command(
        fmt::format("env -u KUBECONFIG HOME=/nonexistent {} --kubeconfig {} {}", TRAINCTL_BINARY,
                    kubeconfig, args));
  }

  static kube::Resource resource_of(const std::string& kind) {
    if (kind == "TFJob")
      return kube::resources::job(api::JobKind::TFJob);
    if (kind == "PyTorchJob")
      return kube::resources::job(api::JobKind::PyTorchJob);
    return kube::resources::job(api::JobKind::MPIJob);
  }

  /// Creates the job, then sets `status` through the status subresource as an operator does.
  json create_job(const JobSpec& spec, json status = json::object()) {
    const bool mpi = spec.kind == "MPIJob";
    const std::string field = spec.kind == "TFJob"        ? "tfReplicaSpecs"
                              : spec.kind == "PyTorchJob" ? "pytorchReplicaSpecs"
                                                          : "mpiReplicaSpecs";
    json container = {{"name", spec.kind == "TFJob" ? "tensorflow" : "pytorch"},
                      {"image", "trainer:1"}};
    if (spec.gpus > 0)
      container["resources"]["limits"]["nvidia.com/gpu"] = spec.gpus;
    json job = {{"apiVersion", mpi ? "kubeflow.org/v2beta1" : "kubeflow.org/v1"},
                {"kind", spec.kind},
                {"metadata", {{"name", spec.name}, {"labels", spec.labels}}},
                {"spec",
                 {{field,
                   {{"Worker",
                     {{"replicas", spec.workers},
                      {"template", {{"spec", {{"containers", json::array({container})}}}}}}}}}}}};
    if (!spec.queue.empty())
      job["spec"]["runPolicy"]["schedulingPolicy"]["queue"] = spec.queue;
    json created = client().create(resource_of(spec.kind), spec.ns, job);
    if (status.empty())
      return created;
    created["status"] = std::move(status);
    return client().update_status(resource_of(spec.kind), spec.ns, created);
  }

  static json running_status(int active) {
    return {{"conditions",
             {condition("Created", "True", "TFJobCreated"),
              condition("Running", "True", "TFJobRunning", "TFJob default/mnist is running.")}},
            {"replicaStatuses", {{"Worker", {{"active", active}}}}},
            {"startTime", timestamp_ago(std::chrono::seconds(90))}};
  }

  static json succeeded_status() {
    return {{"conditions",
             {condition("Created", "True"), condition("Running", "False"),
              condition("Succeeded", "True", "JobSucceeded")}},
            {"replicaStatuses", {{"Worker", {{"succeeded", 2}}}}},
            {"startTime", timestamp_ago(std::chrono::seconds(600))},
            {"completionTime", timestamp_ago(std::chrono::seconds(600 - 192))}};
  }

  /// A replica pod of `job` with the operator's labels, running for a minute.
  json create_pod(const std::string& job, const std::string& type, int index,
                  const std::string& ns = "default") {
    json pod = testing::pod_manifest(fmt::format("{}-{}-{}", job, type, index),
                                     {{"sandbox.trainctl.io/run-seconds", "60"}});
    pod["metadata"]["labels"] = {{"training.kubeflow.org/job-name", job},
                                 {"training.kubeflow.org/replica-type", type},
                                 {"training.kubeflow.org/replica-index", std::to_string(index)}};
    return client().create(kube::resources::pods(), ns, pod);
  }

  /// Waits until the pod runs on a node and returns it.
  json running_pod(const std::string& name) {
    json pod;
    EXPECT_TRUE(testing::wait_until([&] {
      pod = client().get(kube::resources::pods(), "default", name);
      return pod.value("status", json::object()).value("phase", "") == "Running" &&
             !pod["spec"].value("nodeName", "").empty();
    })) << name;
    return pod;
  }

  void create_namespace(const std::string& name) {
    client().create(kube::resources::namespaces(), "",
                    {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", name}}}});
  }

  bool exists(const kube::Resource& r, const std::string& name) {
    try {
      client().get(r, "default", name);
      return true;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::NotFound)
        throw;
      return false;
    }
  }

  testing::TempDir dir_;
  testing::LocalSandbox local_;
};

// ---- list ----

TEST_F(JobVerbsTest, ListShowsOneRowPerJobWithStatusReplicasQueueAndDuration) {
  create_job({.name = "mnist", .queue = "team-a"}, running_status(2));
  create_job({.kind = "PyTorchJob", .name = "bert"}, succeeded_status());
  create_job({.kind = "MPIJob", .name = "horovod", .workers = 3});
  RunResult r = run("list");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::istringstream lines(r.out);
  std::string header, first, second, third;
  std::getline(lines, header);
  std::getline(lines, first);
  std::getline(lines, second);
  std::getline(lines, third);
  EXPECT_THAT(header, ContainsRegex("^NAME +KIND +STATUS +REPLICAS +QUEUE +AGE +DURATION$"));
  // Sorted by name.
  EXPECT_THAT(
      first,
      ContainsRegex("^bert +PyTorchJob +Succeeded +Worker:2 succeeded +<none> +[0-9]+s +3m12s$"));
  EXPECT_THAT(second,
              ContainsRegex("^horovod +MPIJob +Pending +Worker:0/3 +<none> +[0-9]+s +<none>$"));
  EXPECT_THAT(third,
              ContainsRegex("^mnist +TFJob +Running +Worker:2/2 +team-a +[0-9]+s +(89|9[0-9])s$"));
}

// list -w, as kubectl get -w: the table, then a row each time a job changes, until Ctrl-C.
TEST_F(JobVerbsTest, ListWatchPrintsARowEachTimeAJobChanges) {
  json job = create_job({.name = "mnist"});
  testing::BackgroundCommand watch(
      {TRAINCTL_BINARY, "--kubeconfig", local_.sandbox().kubeconfig_path().string(), "list", "-w"});
  ASSERT_TRUE(watch.wait_for("Pending", std::chrono::seconds(10))) << watch.output();
  job["status"] = running_status(2);
  client().update_status(resource_of("TFJob"), "default", job);
  ASSERT_TRUE(watch.wait_for("Running", std::chrono::seconds(10))) << watch.output();
  // A gang waiting for admission shows Queued, read from the watched PodGroups; its admission
  // prints the job's row again, though the job itself did not change.
  json gang = client().create(kube::resources::podgroups(), "default",
                              {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                               {"kind", "PodGroup"},
                               {"metadata", {{"name", "bert"}}},
                               {"spec", {{"minMember", 1}}},
                               {"status", {{"phase", "Pending"}}}});
  create_job({.kind = "PyTorchJob", .name = "bert"});
  ASSERT_TRUE(watch.wait_for("Queued", std::chrono::seconds(10))) << watch.output();
  gang["status"]["phase"] = "Inqueue";
  client().update(kube::resources::podgroups(), "default", gang);
  ASSERT_TRUE(testing::wait_until(
      [&] { return std::regex_search(watch.output(), std::regex("\nbert +PyTorchJob +Pending")); },
      std::chrono::seconds(10)))
      << watch.output();
  const int status = watch.stop(SIGINT);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << status;
  const std::string out = watch.output();
  EXPECT_THAT(out, ContainsRegex("^NAME +KIND +STATUS +REPLICAS +QUEUE +AGE +DURATION\n"
                                 "mnist +TFJob +Pending +"));
  EXPECT_THAT(out, ContainsRegex("\nmnist +TFJob +Running +"));
  EXPECT_THAT(out, ContainsRegex("\nbert +PyTorchJob +Queued +"));
  EXPECT_EQ(out.find("NAME"), out.rfind("NAME"));  // the headers once

  RunResult filtered = run("list -w --kind mpijob --status Bogus");
  EXPECT_EQ(filtered.exit_code, 2);  // validated before watching
}

TEST_F(JobVerbsTest, ListAllNamespacesAddsTheNamespaceColumn) {
  create_namespace("team-b");
  create_job({.name = "here"});
  create_job({.name = "there", .ns = "team-b"});
  RunResult local = run("list");
  EXPECT_THAT(local.out, HasSubstr("here"));
  EXPECT_THAT(local.out, Not(HasSubstr("there")));
  RunResult other = run("list -n team-b -o name");
  EXPECT_EQ(other.out, "tfjob.kubeflow.org/there\n");
  RunResult all = run("list -A");
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_THAT(all.out, ContainsRegex("^NAMESPACE +NAME +KIND"));
  EXPECT_THAT(all.out, ContainsRegex("\ndefault +here +TFJob"));
  EXPECT_THAT(all.out, ContainsRegex("\nteam-b +there +TFJob"));
}

TEST_F(JobVerbsTest, ListFiltersBySelectorKindStatusAndQueue) {
  create_job({.name = "a", .labels = {{"team", "x"}}, .queue = "q1"}, running_status(2));
  create_job({.kind = "PyTorchJob", .name = "b", .labels = {{"team", "x"}}, .queue = "q2"},
             succeeded_status());
  create_job({.name = "c", .labels = {{"team", "y"}}, .queue = "q1"}, succeeded_status());
  EXPECT_EQ(run("list -l team=x -o name").out, "tfjob.kubeflow.org/a\npytorchjob.kubeflow.org/b\n");
  EXPECT_EQ(run("list --kind pytorchjob -o name").out, "pytorchjob.kubeflow.org/b\n");
  EXPECT_EQ(run("list --kind TFJob -o name").out, "tfjob.kubeflow.org/a\ntfjob.kubeflow.org/c\n");
  EXPECT_EQ(run("list --status succeeded -o name").out,
            "pytorchjob.kubeflow.org/b\ntfjob.kubeflow.org/c\n");
  EXPECT_EQ(run("list --queue q1 -o name").out, "tfjob.kubeflow.org/a\ntfjob.kubeflow.org/c\n");
  EXPECT_EQ(run("list --queue q1 --status Running -o name").out, "tfjob.kubeflow.org/a\n");
  RunResult bad = run("list --status Dancing");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("unknown --status"));
  EXPECT_EQ(run("list --kind jaxjob").exit_code, 2);
}

TEST_F(JobVerbsTest, ListJsonIsAV1ListOfTheJobs) {
  create_job({.name = "mnist"}, running_status(1));
  create_job({.kind = "MPIJob", .name = "hvd"});
  RunResult r = run("list -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json list = json::parse(r.out);
  EXPECT_EQ(list["apiVersion"], "v1");
  EXPECT_EQ(list["kind"], "List");
  ASSERT_EQ(list["items"].size(), 2u);
  EXPECT_EQ(list["items"][0]["kind"], "MPIJob");
  EXPECT_EQ(list["items"][0]["apiVersion"], "kubeflow.org/v2beta1");
  EXPECT_EQ(list["items"][1]["metadata"]["name"], "mnist");
  EXPECT_EQ(list["items"][1]["status"]["conditions"][1]["type"], "Running");
  RunResult yaml = run("list -o yaml");
  EXPECT_THAT(yaml.out, HasSubstr("kind: List"));
  EXPECT_THAT(yaml.out, HasSubstr("name: hvd"));
}

TEST_F(JobVerbsTest, ListWithNoJobsSaysSoOnStderr) {
  RunResult r = run("list");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "No jobs found in default namespace.\n");
  create_job({.name = "done"}, succeeded_status());
  RunResult filtered = run("list --status Failed");
  EXPECT_EQ(filtered.out, "");
  EXPECT_EQ(filtered.err, "No jobs found in default namespace.\n");
}

TEST_F(JobVerbsTest, ListWideAddsGpusAndTheNodesOfTheJobsPods) {
  create_job({.name = "mnist", .workers = 2, .gpus = 4}, running_status(2));
  create_pod("mnist", "worker", 0);
  create_pod("mnist", "worker", 1);
  const std::string node0 = running_pod("mnist-worker-0")["spec"]["nodeName"];
  const std::string node1 = running_pod("mnist-worker-1")["spec"]["nodeName"];
  RunResult r = run("list -o wide");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("DURATION +GPUS +NODES\n"));
  const std::string nodes =
      node0 == node1 ? node0 : fmt::format("{},{}", std::min(node0, node1), std::max(node0, node1));
  EXPECT_THAT(r.out, ContainsRegex("mnist +TFJob .* 8 +" + nodes + "\n"));
}

TEST_F(JobVerbsTest, KindNotServedIsSkippedUnlessAskedFor) {
  testing::LocalSandbox bare;  // no CRDs installed
  const std::string config = bare.sandbox().kubeconfig_path().string();
  RunResult asked = run("list --kind tfjob", config);
  EXPECT_EQ(asked.exit_code, 3);
  EXPECT_THAT(asked.err, HasSubstr("not served by this cluster: run `trainctl install`"));
  // No kind served at all: not "No jobs found", which would say the jobs are gone.
  RunResult all = run("list", config);
  EXPECT_EQ(all.exit_code, 3) << all.err;
  EXPECT_EQ(all.err,
            "trainctl: the Kubeflow CRDs are not installed in this cluster (it serves no tfjobs, "
            "pytorchjobs or mpijobs.kubeflow.org): run `trainctl install`\n");
  RunResult queues = run("queue list", config);
  EXPECT_EQ(queues.exit_code, 3) << queues.err;
  EXPECT_EQ(queues.err,
            "trainctl: scheduling.volcano.sh/v1beta1 queues is not served by this cluster: run "
            "`trainctl install`\n");
  RunResult get = run("get mnist --kind mpijob", config);
  EXPECT_EQ(get.exit_code, 3);
  EXPECT_THAT(get.err, HasSubstr("run `trainctl install`"));
}

TEST_F(JobVerbsTest, AJobWhoseGangWaitsForAdmissionIsQueuedAndAFinishedOneShowsItsOutcome) {
  create_job({.name = "waiting", .queue = "team-a"},
             {{"conditions", {condition("Created", "True", "TFJobCreated")}}});
  create_job({.name = "admitted"}, {{"conditions", {condition("Created", "True")}}});
  create_job({.kind = "PyTorchJob", .name = "broken"},
             {{"conditions", {condition("Created", "True"), condition("Failed", "True")}},
              {"replicaStatuses", {{"Worker", {{"succeeded", 1}, {"failed", 1}}}}}});
  auto podgroup = [&](const std::string& name, const std::string& phase) {
    client().create(kube::resources::podgroups(), "default",
                    {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                     {"kind", "PodGroup"},
                     {"metadata", {{"name", name}}},
                     {"spec", {{"minMember", 2}, {"queue", "team-a"}}},
                     {"status", {{"phase", phase}}}});  // Volcano's CRD has no status subresource
  };
  podgroup("waiting", "Pending");
  podgroup("admitted", "Inqueue");
  RunResult r = run("list");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("\nwaiting +TFJob +Queued +Worker:0/2 +team-a "));
  // The queue its PodGroup was put in, when the job names none.
  EXPECT_THAT(r.out, ContainsRegex("\nadmitted +TFJob +Created +Worker:0/2 +team-a "));
  EXPECT_THAT(r.out,
              ContainsRegex("\nbroken +PyTorchJob +Failed +Worker:1 succeeded 1 failed +<none> "));
  RunResult queued = run("list --status queued -o name");
  EXPECT_EQ(queued.out, "tfjob.kubeflow.org/waiting\n");

  RunResult get = run("get waiting");
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_THAT(get.out, ContainsRegex("Status: +Queued\n"));
  EXPECT_THAT(get.out, ContainsRegex("Queue: +team-a\n"));
  EXPECT_THAT(run("get broken").out, ContainsRegex("Replicas: +Worker:1 succeeded 1 failed\n"));
}

// --gang-scheduler scheduler-plugins gives jobs scheduler-plugins' PodGroup type
// (scheduling.x-k8s.io/v1alpha1), which has no queue: list finds it with one LIST per type, shows
// Queued while it is Pending, and list -w follows its phase; get shows its pod counts and
// schedule timeout.
TEST_F(JobVerbsTest, ListAndGetShowASchedulerPluginsGang) {
  const json created = {{"conditions", {condition("Created", "True", "TFJobCreated")}}};
  create_job({.name = "waiting"}, created);
  create_job({.name = "placed"}, created);
  json waiting = testing::create_scheduler_plugins_podgroup(client(), "waiting", {{"minMember", 2}},
                                                            {{"phase", "Pending"}});
  testing::create_scheduler_plugins_podgroup(
      client(), "placed", {{"minMember", 2}, {"scheduleTimeoutSeconds", 90}},
      {{"phase", "Running"}, {"running", 2}, {"succeeded", 0}});
  RunResult r = run("list");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("\nwaiting +TFJob +Queued +Worker:0/2 +<none> "));
  EXPECT_THAT(r.out, ContainsRegex("\nplaced +TFJob +Created +Worker:0/2 +<none> "));
  EXPECT_EQ(run("list --status queued -o name").out, "tfjob.kubeflow.org/waiting\n");

  RunResult get = run("get waiting placed");
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_THAT(get.out, ContainsRegex("Status: +Queued\n"));
  EXPECT_THAT(get.out,
              ContainsRegex("PodGroup:\nNAME +PHASE +MIN-MEMBER +RUNNING +SUCCEEDED +FAILED "
                            "+SCHEDULE-TIMEOUT\nwaiting +Pending +2 +0 +0 +0 +<none>\n"));
  EXPECT_THAT(get.out, ContainsRegex("\nplaced +Running +2 +2 +0 +0 +90s\n"));

  testing::BackgroundCommand watch(
      {TRAINCTL_BINARY, "--kubeconfig", local_.sandbox().kubeconfig_path().string(), "list", "-w"});
  ASSERT_TRUE(watch.wait_for("Queued", std::chrono::seconds(10))) << watch.output();
  // Its pods are all bound: the scheduler-plugins controller moves it on; the job did not change.
  waiting["status"]["phase"] = "Scheduling";
  client().update_status(kube::resources::scheduler_plugins_podgroups(), "default", waiting);
  ASSERT_TRUE(testing::wait_until(
      [&] { return std::regex_search(watch.output(), std::regex("\nwaiting +TFJob +Created")); },
      std::chrono::seconds(10)))
      << watch.output();
  watch.stop(SIGINT);
}

// ---- get ----

TEST_F(JobVerbsTest, GetShowsStatusConditionsReplicasPodGroupAndEvents) {
  create_job({.name = "mnist", .queue = "team-a"}, running_status(2));
  create_pod("mnist", "worker", 1);
  create_pod("mnist", "worker", 0);
  const std::string node0 = running_pod("mnist-worker-0")["spec"]["nodeName"];
  const std::string node1 = running_pod("mnist-worker-1")["spec"]["nodeName"];
  client().create(kube::resources::podgroups(), "default",
                  {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                   {"kind", "PodGroup"},
                   {"metadata", {{"name", "mnist"}}},
                   {"spec", {{"minMember", 2}, {"queue", "team-a"}}}});
  auto event = [&](const std::string& name, const std::string& kind, const std::string& object,
                   const std::string& reason, const std::string& message) {
    client().create(
        kube::resources::events(), "default",
        {{"apiVersion", "v1"},
         {"kind", "Event"},
         {"metadata", {{"name", name}}},
         {"involvedObject", {{"kind", kind}, {"name", object}, {"namespace", "default"}}},
         {"reason", reason},
         {"message", message},
         {"type", "Normal"},
         {"lastTimestamp", timestamp_ago(std::chrono::seconds(20))}});
  };
  event("mnist.1", "TFJob", "mnist", "SuccessfulCreatePod", "Created pod: mnist-worker-0");
  event("mnist-worker-0.1", "Pod", "mnist-worker-0", "Started", "Started container tensorflow");
  event("other.1", "TFJob", "other", "Unrelated", "not about mnist");

  RunResult r = run("get mnist");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("Name: +mnist\n"));
  EXPECT_THAT(r.out, ContainsRegex("Kind: +TFJob\n"));
  EXPECT_THAT(r.out, ContainsRegex("Status: +Running\n"));
  EXPECT_THAT(r.out, ContainsRegex("Queue: +team-a\n"));
  EXPECT_THAT(r.out, ContainsRegex("Duration: +(89|9[0-9])s\n"));
  EXPECT_THAT(r.out, ContainsRegex("TYPE +STATUS +REASON +MESSAGE +LAST-TRANSITION\n"));
  EXPECT_THAT(r.out, ContainsRegex(
                         "Running +True +TFJobRunning +TFJob default/mnist is running. +3[0-9]s"));
  EXPECT_THAT(r.out, ContainsRegex("REPLICA +POD +PHASE +NODE +RESTARTS +EXIT-CODE +AGE\n"));
  // In replica order although worker-1 was created first.
  EXPECT_THAT(r.out,
              ContainsRegex("worker-0 +mnist-worker-0 +Running +" + node0 +
                            " +0 +<none> +[0-9]+s\nworker-1 +mnist-worker-1 +Running +" + node1));
  EXPECT_THAT(r.out, ContainsRegex(
                         "PodGroup:\nNAME +PHASE +MIN-MEMBER +QUEUE\nmnist +<none> +2 +team-a\n"));
  EXPECT_THAT(r.out,
              ContainsRegex("Normal +SuccessfulCreatePod +tfjob/mnist +2[0-9]s +Created pod"));
  EXPECT_THAT(r.out, ContainsRegex("Normal +Started +pod/mnist-worker-0"));
  EXPECT_THAT(r.out, Not(HasSubstr("Unrelated")));
}

TEST_F(JobVerbsTest, GetAmbiguousNameIsAUsageErrorAndMissingIsNotFound) {
  create_job({.name = "dup"});
  create_job({.kind = "PyTorchJob", .name = "dup"});
  RunResult ambiguous = run("get dup");
  EXPECT_EQ(ambiguous.exit_code, 2);
  EXPECT_THAT(ambiguous.err, HasSubstr("ambiguous"));
  EXPECT_THAT(ambiguous.err, HasSubstr("tfjob, pytorchjob"));
  RunResult narrowed = run("get dup --kind pytorchjob -o name");
  EXPECT_EQ(narrowed.exit_code, 0) << narrowed.err;
  EXPECT_EQ(narrowed.out, "pytorchjob.kubeflow.org/dup\n");
  RunResult missing = run("get nope");
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_THAT(missing.err, HasSubstr("\"nope\" not found"));
}

TEST_F(JobVerbsTest, GetJsonPrintsTheJobObject) {
  create_job({.name = "mnist", .queue = "team-a"}, running_status(2));
  RunResult r = run("get mnist -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json job = json::parse(r.out);
  EXPECT_EQ(job["kind"], "TFJob");
  EXPECT_EQ(job["spec"]["runPolicy"]["schedulingPolicy"]["queue"], "team-a");
  EXPECT_EQ(job["status"]["replicaStatuses"]["Worker"]["active"], 2);
  EXPECT_THAT(run("get mnist -o yaml").out, HasSubstr("kind: TFJob"));
}

TEST_F(JobVerbsTest, GetWithoutPodsOrEventsSaysNone) {
  create_job({.name = "fresh"});
  RunResult r = run("get fresh");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("Status: +Pending\n"));
  EXPECT_THAT(r.out, HasSubstr("Pods: <none>\n"));
  EXPECT_THAT(r.out, HasSubstr("Events: <none>\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("PodGroup")));
}

// kubectl's TYPE/NAME: the kind in any case, singular or plural, with or without its group, as
// `-o name` prints it, so that output can be piped back in.
TEST_F(JobVerbsTest, GetTakesTypeSlashNameInEveryForm) {
  create_job({.name = "dup"});
  create_job({.kind = "PyTorchJob", .name = "dup"});
  for (const char* arg : {"pytorchjob/dup", "pytorchjobs/dup", "PyTorchJob/dup",
                          "pytorchjob.kubeflow.org/dup", "pytorchjobs.kubeflow.org/dup"}) {
    RunResult r = run(fmt::format("get {} -o name", arg));
    EXPECT_EQ(r.exit_code, 0) << arg << ": " << r.err;
    EXPECT_EQ(r.out, "pytorchjob.kubeflow.org/dup\n") << arg;
  }
  RunResult round_trip =
      run("get $(" + std::string(TRAINCTL_BINARY) + " --kubeconfig " +
          local_.sandbox().kubeconfig_path().string() + " get tfjob/dup -o name)");
  EXPECT_EQ(round_trip.exit_code, 0) << round_trip.err;
  EXPECT_THAT(round_trip.out, ContainsRegex("Kind: +TFJob\n"));
}

TEST_F(JobVerbsTest, TypeSlashNameThatContradictsKindOrNamesNoJobTypeIsAUsageError) {
  create_job({.kind = "PyTorchJob", .name = "x"});
  for (const char* verb :
       {"get", "delete", "suspend", "resume", "logs", "wait --for=created", "why"}) {
    RunResult r = run(fmt::format("{} --kind tfjob pytorchjob/x", verb));
    EXPECT_EQ(r.exit_code, 2) << verb << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("\"pytorchjob/x\" names a PyTorchJob but --kind is tfjob"))
        << verb;
  }
  RunResult pod = run("get pod/x");
  EXPECT_EQ(pod.exit_code, 2);
  EXPECT_THAT(pod.err, HasSubstr("\"pod\" is not a job type"));
  EXPECT_EQ(run("get tfjob.example.com/x").exit_code, 2);  // another group's tfjob
  EXPECT_EQ(run("get pytorchjob/").exit_code, 2);
  EXPECT_TRUE(exists(kube::resources::job(api::JobKind::PyTorchJob), "x"));  // nothing deleted
  // why takes the same forms (found on a real control plane: it refused kind.group/NAME).
  RunResult why = run("why pytorchjob.kubeflow.org/x");
  EXPECT_EQ(why.exit_code, 0) << why.err;
  EXPECT_THAT(why.out, HasSubstr("pytorchjob.kubeflow.org/x is "));
}

TEST_F(JobVerbsTest, GetShowsSeveralJobsAndReportsAMissingOneAfterThem) {
  create_job({.name = "a"});
  create_job({.kind = "MPIJob", .name = "b"});
  RunResult names = run("get a mpijob/b -o name");
  EXPECT_EQ(names.exit_code, 0) << names.err;
  EXPECT_EQ(names.out, "tfjob.kubeflow.org/a\nmpijob.kubeflow.org/b\n");
  RunResult described = run("get a b");
  EXPECT_EQ(described.exit_code, 0) << described.err;
  EXPECT_THAT(described.out, ContainsRegex("Name: +a\n(.|\n)*\n\nName: +b\n"));
  RunResult list = run("get a b -o json");
  ASSERT_EQ(list.exit_code, 0) << list.err;
  const json doc = json::parse(list.out);
  EXPECT_EQ(doc["kind"], "List");
  ASSERT_EQ(doc["items"].size(), 2u);
  EXPECT_EQ(doc["items"][1]["kind"], "MPIJob");
  RunResult missing = run("get a ghost b -o name");
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_EQ(missing.out, "tfjob.kubeflow.org/a\nmpijob.kubeflow.org/b\n");
  EXPECT_THAT(missing.err, HasSubstr("\"ghost\" not found"));
}

// ---- delete, suspend, resume ----

TEST_F(JobVerbsTest, DeleteByNameAndIgnoreNotFound) {
  create_job({.name = "mnist"});
  create_job({.kind = "PyTorchJob", .name = "bert"});
  RunResult r = run("delete mnist bert");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "tfjob.kubeflow.org \"mnist\" deleted\npytorchjob.kubeflow.org \"bert\" deleted\n");
  EXPECT_TRUE(testing::wait_until(
      [&] { return !exists(kube::resources::job(api::JobKind::TFJob), "mnist"); }));
  EXPECT_TRUE(testing::wait_until(
      [&] { return !exists(kube::resources::job(api::JobKind::PyTorchJob), "bert"); }));
  RunResult again = run("delete mnist");
  EXPECT_EQ(again.exit_code, 3);
  EXPECT_THAT(again.err, HasSubstr("\"mnist\" not found"));
  create_job({.name = "typed"});
  RunResult typed = run("delete TFJob/typed");
  EXPECT_EQ(typed.exit_code, 0) << typed.err;
  EXPECT_EQ(typed.out, "tfjob.kubeflow.org \"typed\" deleted\n");
  RunResult ignored = run("delete mnist --ignore-not-found");
  EXPECT_EQ(ignored.exit_code, 0) << ignored.err;
  EXPECT_EQ(ignored.out, "");
}

TEST_F(JobVerbsTest, DeleteDeletesTheOthersAndStillReportsAMissingName) {
  create_job({.name = "keep-going"});
  RunResult r = run("delete ghost keep-going");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "tfjob.kubeflow.org \"keep-going\" deleted\n");
  EXPECT_THAT(r.err, HasSubstr("\"ghost\" not found"));
}

TEST_F(JobVerbsTest, DeleteBySelectorAndAll) {
  create_job({.name = "a", .labels = {{"team", "x"}}});
  create_job({.kind = "MPIJob", .name = "b", .labels = {{"team", "x"}}});
  create_job({.name = "c", .labels = {{"team", "y"}}});
  RunResult r = run("delete -l team=x --wait --timeout 20s");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "tfjob.kubeflow.org \"a\" deleted\nmpijob.kubeflow.org \"b\" deleted\n");
  EXPECT_FALSE(exists(kube::resources::job(api::JobKind::TFJob), "a"));
  EXPECT_FALSE(exists(kube::resources::job(api::JobKind::MPIJob), "b"));
  EXPECT_TRUE(exists(kube::resources::job(api::JobKind::TFJob), "c"));
  EXPECT_EQ(run("delete --all --wait").out, "tfjob.kubeflow.org \"c\" deleted\n");
  EXPECT_FALSE(exists(kube::resources::job(api::JobKind::TFJob), "c"));
  RunResult none = run("delete --all");
  EXPECT_EQ(none.exit_code, 0);
  EXPECT_EQ(none.err, "No jobs found in default namespace.\n");
  EXPECT_EQ(run("delete").exit_code, 2);
  EXPECT_EQ(run("delete a --all").exit_code, 2);
}

TEST_F(JobVerbsTest, DeleteWaitReturnsOnlyOnceTheJobsPodsAreGone) {
  const json job = create_job({.name = "owner"});
  json pod = testing::pod_manifest("owner-worker-0", {{"sandbox.trainctl.io/run-seconds", "60"}});
  pod["metadata"]["finalizers"] = {"test.trainctl.io/hold"};  // keeps the pod until removed
  pod["metadata"]["ownerReferences"] = {{{"apiVersion", "kubeflow.org/v1"},
                                         {"kind", "TFJob"},
                                         {"name", "owner"},
                                         {"uid", job["metadata"]["uid"]},
                                         {"controller", true},
                                         {"blockOwnerDeletion", true}}};
  client().create(kube::resources::pods(), "default", pod);
  // Foreground propagation: while a pod remains the job remains, so --wait times out (exit 4).
  RunResult held = run("delete owner --wait --timeout 1s");
  EXPECT_EQ(held.exit_code, 4) << held.err;
  EXPECT_THAT(held.err, HasSubstr("waiting for tfjob.kubeflow.org \"owner\" to be deleted"));
  EXPECT_TRUE(exists(kube::resources::job(api::JobKind::TFJob), "owner"));
  client().patch(kube::resources::pods(), "default", "owner-worker-0", kube::PatchType::Merge,
                 {{"metadata", {{"finalizers", nullptr}}}});
  RunResult r = run("delete owner --wait --timeout 20s --ignore-not-found");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(exists(kube::resources::pods(), "owner-worker-0"));
  EXPECT_FALSE(exists(kube::resources::job(api::JobKind::TFJob), "owner"));
}

TEST_F(JobVerbsTest, SuspendAndResumePatchRunPolicySuspend) {
  create_job({.kind = "PyTorchJob", .name = "bert"}, running_status(2));
  RunResult s = run("suspend bert");
  EXPECT_EQ(s.exit_code, 0) << s.err;
  EXPECT_EQ(s.out, "pytorchjob.kubeflow.org/bert suspended\n");
  json job = client().get(kube::resources::job(api::JobKind::PyTorchJob), "default", "bert");
  EXPECT_EQ(job["spec"]["runPolicy"]["suspend"], true);
  EXPECT_EQ(job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"], 2);  // merge, not replace
  RunResult r = run("resume bert");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "pytorchjob.kubeflow.org/bert resumed\n");
  job = client().get(kube::resources::job(api::JobKind::PyTorchJob), "default", "bert");
  EXPECT_EQ(job["spec"]["runPolicy"]["suspend"], false);
  RunResult missing = run("suspend ghost");
  EXPECT_EQ(missing.exit_code, 3);
  RunResult typed = run("suspend pytorchjobs/bert");
  EXPECT_EQ(typed.exit_code, 0) << typed.err;
  EXPECT_EQ(typed.out, "pytorchjob.kubeflow.org/bert suspended\n");
}

// A suggested command names the namespace the job is in when it is not "default", though it came
// from the kubeconfig's context and not from -n, so it acts on that job when pasted.
TEST_F(JobVerbsTest, SuggestedCommandsNameTheContextsNamespace) {
  create_namespace("team-b");
  create_job({.name = "held", .ns = "team-b"});
  client().patch(kube::resources::job(api::JobKind::TFJob), "team-b", "held",
                 kube::PatchType::Merge, {{"spec", {{"runPolicy", {{"suspend", true}}}}}});
  std::string yaml = testing::TempDir::read(local_.sandbox().kubeconfig_path());
  const std::string ns_line = "namespace: default";
  ASSERT_NE(yaml.find(ns_line), std::string::npos) << yaml;
  yaml.replace(yaml.find(ns_line), ns_line.size(), "namespace: team-b");
  RunResult why = run("why held", dir_.write("team-b.kubeconfig", yaml).string());
  EXPECT_THAT(why.out + why.err, HasSubstr("`trainctl resume held -n team-b` lets it run"));
}

// A finished job cannot be suspended: suspend says so and exits 2, writing to no job it names.
TEST_F(JobVerbsTest, SuspendRefusesAFinishedJobAndWritesNothing) {
  create_job({.name = "done"}, succeeded_status());
  create_job({.name = "busy"}, running_status(2));
  RunResult r = run("suspend busy done");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("trainctl: tfjob.kubeflow.org \"done\" has finished (Succeeded): a "
                               "finished job cannot be suspended\n"));
  for (const char* name : {"done", "busy"}) {
    const json job = client().get(kube::resources::job(api::JobKind::TFJob), "default", name);
    EXPECT_FALSE(job["spec"].value("runPolicy", json::object()).contains("suspend")) << name;
  }
}

}  // namespace
}  // namespace trainctl
