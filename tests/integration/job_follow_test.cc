// trainctl logs, wait, why and submit --wait against a sandbox, through the real binary. There is
// no operator here: the tests play it, creating replica pods with the Kubeflow labels (the
// sandbox's kubelet runs them as their annotations script) and writing the job's status.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <sstream>
#include <string>
#include <thread>

#include "api/status.h"
#include "tests/support/api_objects.h"
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

/// How long a backgrounded trainctl may take to end once it has what it waits for.
constexpr std::chrono::seconds kCommandLimit{15};

class JobFollowTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::install_training_crds(client()); }

  kube::Client& client() { return local_.client(); }

  RunResult run(const std::string& args) {
    return testing::run_command(
        fmt::format("env -u KUBECONFIG HOME=/nonexistent {} --kubeconfig {} {}", TRAINCTL_BINARY,
                    local_.sandbox().kubeconfig_path().string(), args));
  }

  /// Runs trainctl on another thread, for verbs that block until the test changes something.
  std::future<RunResult> start(const std::string& args) {
    return std::async(std::launch::async, [this, args] { return run(args); });
  }

  static RunResult finish(std::future<RunResult>& f) {
    if (f.wait_for(kCommandLimit) != std::future_status::ready) {
      ADD_FAILURE() << "trainctl did not end";
      return {};
    }
    return f.get();
  }

  static json tfjob(const std::string& name, int workers, const std::string& queue = "") {
    json job = {
        {"apiVersion", "kubeflow.org/v1"},
        {"kind", "TFJob"},
        {"metadata", {{"name", name}, {"namespace", "default"}}},
        {"spec",
         {{"tfReplicaSpecs",
           {{"Worker",
             {{"replicas", workers},
              {"template",
               {{"spec",
                 {{"containers",
                   json::array({{{"name", "tensorflow"}, {"image", "trainer:1"}}})}}}}}}}}}}}};
    if (!queue.empty())
      job["spec"]["runPolicy"]["schedulingPolicy"]["queue"] = queue;
    return job;
  }

  json create_job(const std::string& name, int workers = 1, const std::string& queue = "") {
    return client().create(kube::resources::job(api::JobKind::TFJob), "default",
                           tfjob(name, workers, queue));
  }

  /// Writes the job's status as the operator does: Created, then `type` True with `message`.
  void set_status(const std::string& name, const std::string& type, const std::string& message = "",
                  json extra = json::object()) {
    json job = client().get(kube::resources::job(api::JobKind::TFJob), "default", name);
    const std::string now = api::format_timestamp(std::chrono::system_clock::now());
    json conditions = json::array({{{"type", "Created"},
                                    {"status", "True"},
                                    {"reason", "TFJobCreated"},
                                    {"lastTransitionTime", now}}});
    if (type != "Created") {
      conditions.push_back({{"type", type},
                            {"status", "True"},
                            {"reason", "TFJob" + type},
                            {"message", message},
                            {"lastTransitionTime", now}});
    }
    extra["conditions"] = conditions;
    job["status"] = extra;
    client().update_status(kube::resources::job(api::JobKind::TFJob), "default", job);
  }

  /// A replica pod of `job` as the operator names and labels it; its container runs for
  /// `seconds`, prints `+ python train.py <arg>` first and exits with `exit_code`.
  static json replica_pod(const std::string& job, int index, const std::string& arg,
                          const std::string& seconds = "0.2", int exit_code = 0,
                          const std::string& restart_policy = "Never") {
    json pod =
        testing::pod_manifest(fmt::format("{}-worker-{}", job, index),
                              {{"sandbox.trainctl.io/run-seconds", seconds},
                               {"sandbox.trainctl.io/exit-code", std::to_string(exit_code)}});
    pod["metadata"]["labels"] = {{"training.kubeflow.org/job-name", job},
                                 {"training.kubeflow.org/replica-type", "worker"},
                                 {"training.kubeflow.org/replica-index", std::to_string(index)}};
    pod["spec"]["containers"][0]["command"] = {"python", "train.py", arg};
    pod["spec"]["restartPolicy"] = restart_policy;
    return pod;
  }

  template <typename... Args>
  json create_replica(Args&&... args) {
    return client().create(kube::resources::pods(), "default",
                           replica_pod(std::forward<Args>(args)...));
  }

  std::string phase(const std::string& pod) {
    try {
      return client()
          .get(kube::resources::pods(), "default", pod)
          .value("status", json::object())
          .value("phase", "");
    } catch (const Error& e) {
      return "<gone>";
    }
  }

  bool finished(const std::string& pod) {
    const std::string p = phase(pod);
    return p == "Succeeded" || p == "Failed";
  }

  void delete_pod(const std::string& name) {
    client().remove(kube::resources::pods(), "default", name, {.grace_period_seconds = 0});
    ASSERT_TRUE(testing::wait_until([&] { return phase(name) == "<gone>"; })) << name;
  }

  testing::TempDir dir_;
  testing::LocalSandbox local_;
};

// ---- logs ----

TEST_F(JobFollowTest, LogsPrefixesEveryReplicaAndSelectsOneOrTheTail) {
  create_job("mnist", 2);
  create_replica("mnist", 0, "--rank=0");
  create_replica("mnist", 1, "--rank=1", "0.2", 3);
  ASSERT_TRUE(testing::wait_until([&] { return finished("mnist-worker-0"); }));
  ASSERT_TRUE(testing::wait_until([&] { return finished("mnist-worker-1"); }));

  RunResult all = run("logs mnist");
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(all.out,
            "[worker-0] + python train.py --rank=0\n[worker-0] exited with code 0\n"
            "[worker-1] + python train.py --rank=1\n[worker-1] exited with code 3\n");

  RunResult one = run("logs mnist --replica worker-1 --no-prefix");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(one.out, "+ python train.py --rank=1\nexited with code 3\n");

  RunResult tail = run("logs mnist --tail 1");
  EXPECT_EQ(tail.out, "[worker-0] exited with code 0\n[worker-1] exited with code 3\n");
  RunResult negative = run("logs mnist --tail -5");  // kubectl refuses it too
  EXPECT_EQ(negative.exit_code, 2);
  EXPECT_THAT(negative.err, HasSubstr("--tail: must be greater than or equal to -1"));

  RunResult stamped = run("logs mnist --replica worker-0 --timestamps --tail 1");
  EXPECT_THAT(stamped.out,
              ContainsRegex("^\\[worker-0\\] 20[0-9-]+T[0-9:.]+Z exited with code 0\n$"));

  RunResult missing = run("logs mnist --replica worker-7");
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_THAT(missing.err,
              HasSubstr("replica \"worker-7\" of tfjob.kubeflow.org \"mnist\" not found"));
  EXPECT_EQ(run("logs tfjob/mnist --replica worker-1 --no-prefix").out, one.out);
  EXPECT_EQ(run("logs nothere").exit_code, 3);
  EXPECT_EQ(run("logs mnist -f --previous").exit_code, 2);
}

// The MPI Operator labels its pods with job-role (launcher, worker) and no replica-type; the
// launcher has no replica-index either.
TEST_F(JobFollowTest, LogsNamesMpiOperatorPodsByTheirRole) {
  create_job("pi", 2);
  json worker = replica_pod("pi", 0, "--worker");
  worker["metadata"]["labels"].erase("training.kubeflow.org/replica-type");
  worker["metadata"]["labels"]["training.kubeflow.org/job-role"] = "worker";
  json launcher = replica_pod("pi", 1, "--launcher");
  launcher["metadata"]["name"] = "pi-launcher-x7k2p";
  launcher["metadata"]["labels"] = {{"training.kubeflow.org/job-name", "pi"},
                                    {"training.kubeflow.org/job-role", "launcher"}};
  for (const json& pod : {worker, launcher})
    client().create(kube::resources::pods(), "default", pod);
  ASSERT_TRUE(testing::wait_until([&] { return finished("pi-worker-0"); }));
  ASSERT_TRUE(testing::wait_until([&] { return finished("pi-launcher-x7k2p"); }));

  RunResult all = run("logs pi");
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(all.out,
            "[launcher] + python train.py --launcher\n[launcher] exited with code 0\n"
            "[worker-0] + python train.py --worker\n[worker-0] exited with code 0\n");
}

TEST_F(JobFollowTest, LogsFollowPicksUpARecreatedPodAndEndsWhenTheJobFinishes) {
  create_job("mnist");
  set_status("mnist", "Running");
  create_replica("mnist", 0, "--attempt=1", "0.5", 1);
  const auto out_file = dir_.path() / "follow.log";
  auto follow = start(fmt::format("logs mnist -f > {}", out_file.string()));
  ASSERT_TRUE(testing::wait_until(
      [&] {
        return testing::TempDir::read(out_file).find("exited with code 1") != std::string::npos;
      },
      std::chrono::seconds(10)));
  // The operator replaces the failed pod under the same name.
  delete_pod("mnist-worker-0");
  create_replica("mnist", 0, "--attempt=2", "1.2");
  ASSERT_TRUE(testing::wait_until(
      [&] {
        return testing::TempDir::read(out_file).find("exited with code 0") != std::string::npos;
      },
      std::chrono::seconds(10)));
  EXPECT_EQ(follow.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
      << "logs -f ended before the job finished";
  set_status("mnist", "Succeeded");
  RunResult r = finish(follow);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(testing::TempDir::read(out_file),
            "[worker-0] + python train.py --attempt=1\n[worker-0] exited with code 1\n"
            "[worker-0] + python train.py --attempt=2\n[worker-0] step 1/1.2\n"
            "[worker-0] exited with code 0\n");
}

TEST_F(JobFollowTest, LogsFollowContinuesWithTheNextRunOfARestartedContainer) {
  create_job("mnist");
  set_status("mnist", "Running");
  create_replica("mnist", 0, "--crash", "0.2", 1, "OnFailure");
  const auto out_file = dir_.path() / "follow.log";
  auto follow = start(fmt::format("logs mnist -f > {}", out_file.string()));
  auto count = [&](const std::string& text) {
    const std::string s = testing::TempDir::read(out_file);
    std::size_t n = 0;
    for (std::size_t at = s.find(text); at != std::string::npos; at = s.find(text, at + 1))
      ++n;
    return n;
  };
  EXPECT_TRUE(testing::wait_until([&] { return count("exited with code 1") >= 3; },
                                  std::chrono::seconds(10)))
      << testing::TempDir::read(out_file);
  delete_pod("mnist-worker-0");
  set_status("mnist", "Failed", "TFJob mnist has failed because 1 Worker replica(s) failed.");
  RunResult r = finish(follow);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GE(count("[worker-0] + python train.py --crash\n"), 3u);
}

TEST_F(JobFollowTest, LogsFailsWithExit3WhenTheLogsCannotBeRead) {
  create_job("mnist");
  set_status("mnist", "Running");
  create_replica("mnist", 0, "--rank=0", "30");
  ASSERT_TRUE(testing::wait_until([&] { return phase("mnist-worker-0") == "Running"; }));
  // pods/log now fails as on a cluster whose API server cannot reach the kubelets.
  local_.sandbox().api().set_cluster(nullptr);
  RunResult r = run("logs mnist");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.err, HasSubstr("trainctl: no kubelet serves this sandbox (HTTP 503)\n"));
  // Following, too: at once, not when the job (still running) finishes.
  auto follow = start("logs mnist -f");
  RunResult followed = finish(follow);
  EXPECT_EQ(followed.exit_code, 3);
  EXPECT_THAT(followed.err, HasSubstr("trainctl: no kubelet serves this sandbox (HTTP 503)\n"));
}

TEST_F(JobFollowTest, LogsOfAJobWithoutPodsSaysSoAndExits3) {
  create_job("queued");
  set_status("queued", "Created");
  RunResult r = run("logs queued");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("trainctl: tfjob.kubeflow.org \"queued\" has no pods yet (status "
                               "Created): no log to print; `trainctl logs -f queued` waits for "
                               "them\n"));
  // Its gang waiting for admission is what the user sees in list and get: Queued.
  client().create(kube::resources::podgroups(), "default",
                  {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                   {"kind", "PodGroup"},
                   {"metadata", {{"name", "queued"}}},
                   {"spec", {{"minMember", 1}}},
                   {"status", {{"phase", "Pending"}}}});
  RunResult queued = run("logs queued");
  EXPECT_EQ(queued.exit_code, 3);
  EXPECT_THAT(queued.err, HasSubstr("has no pods yet (status Queued)"));
}

// A finished job whose cleanPodPolicy deleted its pods has no log left: logs says so (not "no
// pods yet"), with or without -f, and -f does not wait for pods that will never come.
TEST_F(JobFollowTest, LogsOfAFinishedJobWhosePodsWereDeletedSaysSoAndExits3) {
  json job = tfjob("cleaned", 1);
  job["spec"]["runPolicy"]["cleanPodPolicy"] = "All";
  client().create(kube::resources::job(api::JobKind::TFJob), "default", job);
  set_status("cleaned", "Succeeded", "TFJob default/cleaned successfully completed.");
  const std::string said =
      "trainctl: tfjob.kubeflow.org \"cleaned\" has finished (status Succeeded) and its pods were "
      "deleted by its cleanPodPolicy All: no log to print; `trainctl submit --wait --save-logs "
      "DIR` keeps the logs of a job's replicas before its pods are deleted, and `trainctl get "
      "cleaned` shows how it ended\n";
  RunResult r = run("logs cleaned");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr(said));
  auto follow = start("logs -f cleaned");
  RunResult followed = finish(follow);
  EXPECT_EQ(followed.exit_code, 3);
  EXPECT_EQ(followed.out, "");
  EXPECT_THAT(followed.err, HasSubstr(said));
}

// Suggested commands repeat -n when it was given, so they act on the same job when pasted.
TEST_F(JobFollowTest, SuggestedCommandsKeepTheNamespace) {
  create_job("queued");
  set_status("queued", "Created");
  RunResult r = run("logs queued -n default");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.err, HasSubstr("`trainctl logs -f queued -n default` waits for them\n"));
  client().patch(kube::resources::job(api::JobKind::TFJob), "default", "queued",
                 kube::PatchType::Merge, {{"spec", {{"runPolicy", {{"suspend", true}}}}}});
  RunResult why = run("why queued --namespace default");
  EXPECT_THAT(why.out + why.err, HasSubstr("`trainctl resume queued -n default` lets it run"));
}

// kubectl logs --since=0 sets no limit (its options send sinceSeconds only when not zero); so
// does logs, not "the last second".
TEST_F(JobFollowTest, LogsSinceZeroPrintsEveryLine) {
  create_job("old");
  create_replica("old", 0, "--rank=0");
  ASSERT_TRUE(testing::wait_until([&] { return finished("old-worker-0"); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));  // the lines are 2s old
  RunResult r = run("logs old --since 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[worker-0] + python train.py --rank=0\n[worker-0] exited with code 0\n");
  EXPECT_EQ(run("logs old --since 1s").out, "");  // the lines are older than that
}

TEST_F(JobFollowTest, LogsPrintsTheStartedReplicasAndExits3ForOneThatHasNotStarted) {
  create_job("half", 2);
  set_status("half", "Running");
  create_replica("half", 0, "--rank=0");
  json stuck = replica_pod("half", 1, "--rank=1", "60");
  stuck["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500";  // nodes have 32
  client().create(kube::resources::pods(), "default", stuck);
  ASSERT_TRUE(testing::wait_until([&] { return finished("half-worker-0"); }));
  RunResult r = run("logs half");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.out, HasSubstr("[worker-0] + python train.py --rank=0"));
  EXPECT_THAT(r.err, HasSubstr("trainctl: 1 of 2 replicas of tfjob.kubeflow.org \"half\" have "
                               "not started, so have no log yet; `trainctl logs -f half` waits "
                               "for them\n"));
}

// ---- wait ----

TEST_F(JobFollowTest, WaitForSucceededReturnsOnceTheJobSucceeds) {
  create_job("mnist");
  auto waiting = start("wait mnist --for=succeeded --timeout 20s");
  set_status("mnist", "Running");
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  set_status("mnist", "Succeeded");
  RunResult r = finish(waiting);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "tfjob.kubeflow.org/mnist condition met\n");
  EXPECT_EQ(run("wait mnist --for=finished -o name").out, "tfjob.kubeflow.org/mnist\n");
  EXPECT_EQ(run("wait mnist --for=created").exit_code, 0);
}

TEST_F(JobFollowTest, WaitExitsOneWhenTheJobEndedOtherwise) {
  create_job("failed");
  set_status("failed", "Failed", "TFJob failed has failed because 1 Worker replica(s) failed.");
  RunResult succeeded = run("wait failed --for=succeeded");
  EXPECT_EQ(succeeded.exit_code, 1);
  EXPECT_THAT(succeeded.err, HasSubstr("tfjob.kubeflow.org/failed failed (Failed: TFJobFailed: "
                                       "TFJob failed has failed because 1 Worker replica(s) "
                                       "failed.)"));
  EXPECT_EQ(run("wait failed --for=failed").exit_code, 0);
  EXPECT_EQ(run("wait failed --for=finished").exit_code, 1);
  EXPECT_EQ(run("wait failed --for=running").exit_code, 1);

  create_job("done");
  set_status("done", "Succeeded");
  RunResult failed = run("wait done --for=failed");
  EXPECT_EQ(failed.exit_code, 1);
  EXPECT_THAT(failed.err, HasSubstr("tfjob.kubeflow.org/done succeeded"));
  EXPECT_EQ(run("wait done --for=finished").exit_code, 0);
}

TEST_F(JobFollowTest, WaitTimesOutWithExitCodeFour) {
  create_job("mnist");
  set_status("mnist", "Running");
  const auto began = std::chrono::steady_clock::now();
  RunResult r = run("wait mnist --for=succeeded --timeout 1s");
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_THAT(r.err, HasSubstr("timed out after 1s waiting for tfjob.kubeflow.org/mnist"));
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(5));
  EXPECT_EQ(run("wait mnist --for=running --timeout 0").exit_code, 0);
  EXPECT_EQ(run("wait mnist --for=bogus").exit_code, 2);
}

TEST_F(JobFollowTest, WaitForCreatedAndDeleted) {
  auto created = start("wait later --for=created --kind tfjob --timeout 20s");
  EXPECT_EQ(created.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  create_job("later");
  RunResult c = finish(created);
  EXPECT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(c.out, "tfjob.kubeflow.org/later condition met\n");

  // The job is deleted once the command has had time to find it (a second, for a slowly
  // starting command under sanitizers): one it never saw prints nothing, as kubectl.
  auto deleted = start("wait later --for=deleted --kind tfjob --timeout 20s");
  EXPECT_EQ(deleted.wait_for(std::chrono::seconds(1)), std::future_status::timeout);
  client().remove(kube::resources::job(api::JobKind::TFJob), "default", "later");
  RunResult d = finish(deleted);
  EXPECT_EQ(d.exit_code, 0) << d.err;
  EXPECT_EQ(d.out, "tfjob.kubeflow.org/later condition met\n");

  // A job that never existed: kubectl wait --for=delete prints nothing and exits 0; so does
  // wait, and it does not claim "condition met" for it.
  for (const char* args : {"wait nosuch --for=deleted", "wait tfjob/nosuch --for=delete -o name"}) {
    RunResult never = run(args);
    EXPECT_EQ(never.exit_code, 0) << args << never.err;
    EXPECT_EQ(never.out, "") << args;
    EXPECT_EQ(never.err, "") << args;
  }

  RunResult missing = run("wait later --for=succeeded --kind tfjob");
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_THAT(missing.err, HasSubstr("tfjobs.kubeflow.org \"later\" not found"));
  EXPECT_EQ(run("wait later --for=created").exit_code, 2);  // no --kind for a job not there
}

// kubectl's spellings of --for, and the job given as TYPE/NAME, which also stands for --kind when
// the job does not exist yet.
TEST_F(JobFollowTest, WaitTakesKubectlsConditionSpellingsAndTypeSlashName) {
  create_job("mnist");
  set_status("mnist", "Succeeded");
  RunResult met = run("wait tfjob.kubeflow.org/mnist --for=condition=Succeeded");
  EXPECT_EQ(met.exit_code, 0) << met.err;
  EXPECT_EQ(met.out, "tfjob.kubeflow.org/mnist condition met\n");
  RunResult other = run("wait tfjobs/mnist --for=condition=Failed");
  EXPECT_EQ(other.exit_code, 1) << other.err;
  EXPECT_THAT(other.err, HasSubstr("tfjob.kubeflow.org/mnist succeeded"));
  EXPECT_EQ(run("wait TFJob/mnist --for=condition=succeeded=true").exit_code, 0);

  auto created = start("wait tfjob/later --for=created --timeout 20s");  // no --kind needed
  EXPECT_EQ(created.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  create_job("later");
  RunResult c = finish(created);
  EXPECT_EQ(c.exit_code, 0) << c.err;

  auto deleted = start("wait tfjob/later --for=delete --timeout 20s");
  EXPECT_EQ(deleted.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  client().remove(kube::resources::job(api::JobKind::TFJob), "default", "later");
  RunResult d = finish(deleted);
  EXPECT_EQ(d.exit_code, 0) << d.err;
  EXPECT_EQ(d.out, "tfjob.kubeflow.org/later condition met\n");

  RunResult bogus = run("wait mnist --for=condition=Exploded");
  EXPECT_EQ(bogus.exit_code, 2);
  EXPECT_THAT(bogus.err, HasSubstr("condition=Exploded"));
}

// ---- submit --wait ----

class SubmitWaitTest : public JobFollowTest {
 protected:
  /// Whether the TFJob `name` exists within the usual wait (submit, started on another thread,
  /// has created it).
  bool submitted(const std::string& name) {
    return testing::wait_until([&] {
      try {
        client().get(kube::resources::job(api::JobKind::TFJob), "default", name);
        return true;
      } catch (const Error&) {
        return false;
      }
    });
  }

  /// Plays the operator for a job submit created: two workers that run and exit with
  /// `worker1_exit`, the final status, then (with `clean_pods`) cleanPodPolicy All deleting the
  /// pods at once.
  void operate(const std::string& name, int worker1_exit, bool clean_pods = true) {
    ASSERT_TRUE(submitted(name));
    set_status(name, "Running", "", {{"replicaStatuses", {{"Worker", {{"active", 2}}}}}});
    create_replica(name, 0, "--rank=0", "1.1");
    create_replica(name, 1, "--rank=1", "0.2", worker1_exit);
    ASSERT_TRUE(testing::wait_until([&] { return finished(name + "-worker-0"); }));
    ASSERT_TRUE(testing::wait_until([&] { return finished(name + "-worker-1"); }));
    const std::string start =
        api::format_timestamp(std::chrono::system_clock::now() - std::chrono::seconds(42));
    const std::string end = api::format_timestamp(std::chrono::system_clock::now());
    const bool ok = worker1_exit == 0;
    if (!ok) {
      client().create(
          kube::resources::events(), "default",
          {{"apiVersion", "v1"},
           {"kind", "Event"},
           {"metadata", {{"name", name + ".failed"}}},
           {"involvedObject", {{"kind", "TFJob"}, {"name", name}, {"namespace", "default"}}},
           {"type", "Warning"},
           {"reason", "TFJobFailed"},
           {"message", "worker-1 exited with code 3"},
           {"lastTimestamp", end}});
    }
    set_status(
        name, ok ? "Succeeded" : "Failed", "",
        {{"replicaStatuses", {{"Worker", {{"succeeded", ok ? 2 : 1}, {"failed", ok ? 0 : 1}}}}},
         {"startTime", start},
         {"completionTime", end}});
    if (!clean_pods)
      return;
    client().remove(kube::resources::pods(), "default", name + "-worker-0");
    client().remove(kube::resources::pods(), "default", name + "-worker-1");
  }

  std::string job_file(const std::string& name) {
    return dir_.write(name + ".json", tfjob(name, 2).dump()).string();
  }
};

TEST_F(SubmitWaitTest, WaitsStreamsLogsSavesThemAndWritesTheReport) {
  const auto report = dir_.path() / "run.json";
  const auto logs = dir_.path() / "logs";
  auto submit =
      start(fmt::format("submit -f {} --wait --logs --timeout 30s --report {} "
                        "--save-logs {}",
                        job_file("mnist"), report.string(), logs.string()));
  // The pods stay: a final log is read from the pod (for one deleted before the client reads it,
  // see the next test).
  operate("mnist", 0, /*clean_pods=*/false);
  RunResult r = finish(submit);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("tfjob.kubeflow.org/mnist created\n"));
  EXPECT_THAT(r.out, HasSubstr("tfjob.kubeflow.org/mnist Running   worker 2/2 running"));
  EXPECT_THAT(r.out, HasSubstr("[worker-1] + python train.py --rank=1\n"));
  EXPECT_THAT(r.out, ContainsRegex("tfjob.kubeflow.org/mnist Succeeded after [0-9]+s\n"));

  const json rep = json::parse(testing::TempDir::read(report));
  EXPECT_EQ(rep["job"], "mnist");
  EXPECT_EQ(rep["namespace"], "default");
  EXPECT_EQ(rep["kind"], "TFJob");
  EXPECT_EQ(rep["status"], "Succeeded");
  EXPECT_EQ(rep["durationSeconds"], 42);
  EXPECT_EQ(rep["replicas"]["Worker"], (json{{"active", 0}, {"succeeded", 2}, {"failed", 0}}));
  EXPECT_EQ(rep["exitCodes"], (json{{"worker-0", 0}, {"worker-1", 0}}));
  EXPECT_THAT(rep["submittedBy"].get<std::string>(), HasSubstr("trainctl "));

  EXPECT_EQ(testing::TempDir::read(logs / "mnist" / "worker-0.log"),
            "+ python train.py --rank=0\nstep 1/1.1\nexited with code 0\n");
  EXPECT_EQ(testing::TempDir::read(logs / "mnist" / "worker-1.log"),
            "+ python train.py --rank=1\nexited with code 0\n");
}

// A pod deleted before the client has seen it end (a forced delete here; cleanPodPolicy racing
// the client does the same) has no final log to read: --save-logs keeps the lines --logs followed
// while it ran, and says so.
TEST_F(SubmitWaitTest, SaveLogsKeepsTheFollowedLinesOfAPodDeletedBeforeItsEndWasSeen) {
  const auto logs = dir_.path() / "logs";
  auto submit = start(
      fmt::format("submit -f {} --wait --logs --save-logs {}", job_file("lost"), logs.string()));
  ASSERT_TRUE(submitted("lost"));
  set_status("lost", "Running", "", {{"replicaStatuses", {{"Worker", {{"active", 2}}}}}});
  create_replica("lost", 0, "--rank=0", "0.2");
  create_replica("lost", 1, "--rank=1", "forever");
  ASSERT_TRUE(testing::wait_until([&] { return finished("lost-worker-0"); }));
  // Time for the follower to stream worker-1's first line (asserted below).
  std::this_thread::sleep_for(std::chrono::seconds(3));
  client().remove(kube::resources::pods(), "default", "lost-worker-1", {.grace_period_seconds = 0});
  set_status("lost", "Succeeded", "",
             {{"replicaStatuses", {{"Worker", {{"succeeded", 2}}}}},
              {"completionTime", api::format_timestamp(std::chrono::system_clock::now())}});
  RunResult r = finish(submit);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_THAT(r.out, HasSubstr("[worker-1] + python train.py --rank=1\n"));
  std::string followed;  // what --logs printed of worker-1 (it prints a step each second)
  std::istringstream out(r.out);
  for (std::string line; std::getline(out, line);) {
    if (line.starts_with("[worker-1] "))
      followed += line.substr(std::string_view("[worker-1] ").size()) + "\n";
  }
  EXPECT_EQ(testing::TempDir::read(logs / "lost" / "worker-1.log"), followed);
  EXPECT_THAT(r.err, ContainsRegex("trainctl: warning: logs of worker-1 unavailable: .+; saved "
                                   "the lines followed while it ran\n"));
  EXPECT_EQ(testing::TempDir::read(logs / "lost" / "worker-0.log"),
            "+ python train.py --rank=0\nexited with code 0\n")
      << "a final log read from the pod wins over the lines followed";
  EXPECT_THAT(r.err, Not(HasSubstr("logs of worker-0")));
}

TEST_F(SubmitWaitTest, AFailedJobExitsOneWithTheFailedReplicasLastLinesAndWarnings) {
  const auto report = dir_.path() / "run.json";
  auto submit =
      start(fmt::format("submit -f {} --wait --report {}", job_file("bert"), report.string()));
  operate("bert", 3);
  RunResult r = finish(submit);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("worker-1 failed with exit code 3; its last lines:\n"
                               "[worker-1] + python train.py --rank=1\n"
                               "[worker-1] exited with code 3\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("worker-0 failed")));
  EXPECT_THAT(r.out, HasSubstr("Warning TFJobFailed: worker-1 exited with code 3\n"));
  EXPECT_THAT(r.err, HasSubstr("tfjob.kubeflow.org/bert failed"));
  const json rep = json::parse(testing::TempDir::read(report));
  EXPECT_EQ(rep["status"], "Failed");
  EXPECT_EQ(rep["exitCodes"]["worker-1"], 3);
}

TEST_F(SubmitWaitTest, AJobFailedByItsDeadlineSaysWhy) {
  constexpr const char* kWhy =
      "TFJobFailed: TFJob default/late has failed because it was active longer than specified "
      "deadline";
  auto submit = start(fmt::format("submit -f {} --wait", job_file("late")));
  ASSERT_TRUE(submitted("late"));
  set_status("late", "Failed",
             "TFJob default/late has failed because it was active longer than specified deadline");
  RunResult r = finish(submit);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out + r.err, ContainsRegex(fmt::format("tfjob.kubeflow.org/late Failed after "
                                                       "[0-9]+s: {}\n",
                                                       kWhy)));
  RunResult waited = run("wait late --for=succeeded");
  EXPECT_EQ(waited.exit_code, 1);
  EXPECT_THAT(waited.err, HasSubstr(kWhy));
}

TEST_F(SubmitWaitTest, LogsThatCannotBeReadAreAWarningAndTheExitCodeStaysTheJobs) {
  // pods/log now fails as on a cluster whose API server cannot reach the kubelets; the pods stay,
  // so every read of their logs gets that answer.
  local_.sandbox().api().set_cluster(nullptr);
  const std::string why = "no kubelet serves this sandbox (HTTP 503)";
  const auto logs = dir_.path() / "logs";
  auto submit = start(
      fmt::format("submit -f {} --wait --logs --save-logs {}", job_file("mnist"), logs.string()));
  operate("mnist", 0, /*clean_pods=*/false);
  RunResult r = finish(submit);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ContainsRegex("tfjob.kubeflow.org/mnist Succeeded after [0-9]+s\n"));
  for (const char* replica : {"worker-0", "worker-1"}) {
    const std::string warning =
        fmt::format("trainctl: warning: logs of {} unavailable: {}\n", replica, why);
    // Once, though both the stream (--logs) and the saved copy (--save-logs) missed it.
    EXPECT_THAT(r.err, HasSubstr(warning));
    EXPECT_EQ(r.err.find(warning), r.err.rfind(warning)) << r.err;
    EXPECT_FALSE(std::filesystem::exists(logs / "mnist" / (std::string(replica) + ".log")));
  }

  auto failing = start(fmt::format("submit -f {} --wait", job_file("bert")));
  operate("bert", 3, /*clean_pods=*/false);
  RunResult failed = finish(failing);
  EXPECT_EQ(failed.exit_code, 1) << failed.out << failed.err;
  EXPECT_THAT(failed.out, HasSubstr("worker-1 failed with exit code 3\n"));
  EXPECT_THAT(failed.out, HasSubstr("Warning TFJobFailed: worker-1 exited with code 3\n"));
  EXPECT_THAT(failed.err,
              HasSubstr(fmt::format("trainctl: warning: logs of worker-1 unavailable: {}\n", why)));
  EXPECT_THAT(failed.err, Not(HasSubstr("logs of worker-0")));  // it succeeded: not needed
  EXPECT_THAT(failed.err, HasSubstr("tfjob.kubeflow.org/bert failed"));
}

TEST_F(SubmitWaitTest, TimeoutExitsFourAndFlagsNeedWait) {
  RunResult r = run(fmt::format("submit -f {} --wait --timeout 1s -o name", job_file("slow")));
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_EQ(r.out, "tfjob.kubeflow.org/slow\n");  // progress went to stderr with -o
  EXPECT_THAT(r.err, HasSubstr("timed out after 1s waiting for tfjob.kubeflow.org/slow"));
  EXPECT_EQ(run(fmt::format("submit -f {} --logs", job_file("other"))).exit_code, 2);
  EXPECT_EQ(run(fmt::format("submit -f {} --wait --dry-run", job_file("other"))).exit_code, 2);
}

// ---- why ----

TEST_F(JobFollowTest, WhyNamesAnUnschedulablePod) {
  create_job("big");
  set_status("big", "Created");
  json pod = replica_pod("big", 0, "--big", "60");
  pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500";  // nodes have 32
  client().create(kube::resources::pods(), "default", pod);
  ASSERT_TRUE(testing::wait_until([&] {
    const json p = client().get(kube::resources::pods(), "default", "big-worker-0");
    return p.value("status", json::object())
               .value("conditions", json::array())
               .dump()
               .find("Unschedulable") != std::string::npos;
  }));
  RunResult r = run("why big");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("tfjob.kubeflow.org/big is Created (TFJobCreated)\n"));
  EXPECT_THAT(r.out, ContainsRegex("Most likely blocker: worker-0 \\(pod big-worker-0\\) cannot be "
                                   "scheduled: 0/4 nodes are available: [^\n]*cpu"));
}

TEST_F(JobFollowTest, WhyPutsAClosedOrFullQueueFirst) {
  auto queue = [&](const std::string& name, json status) {
    json q = client().create(kube::resources::queues(), "",
                             {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                              {"kind", "Queue"},
                              {"metadata", {{"name", name}}},
                              {"spec", {{"capability", {{"cpu", "8"}}}}}});
    q["status"] = std::move(status);
    client().update_status(kube::resources::queues(), "", q);
  };
  queue("closed", {{"state", "Closed"}});
  queue("full", {{"state", "Open"}, {"allocated", {{"cpu", "8"}}}});
  for (const std::string name : {"closed", "full"}) {
    create_job("job-" + name, 2, name);
    client().create(kube::resources::podgroups(), "default",
                    {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                     {"kind", "PodGroup"},
                     {"metadata", {{"name", "job-" + name}}},
                     {"spec", {{"minMember", 2}, {"queue", name}}},
                     {"status", {{"phase", "Pending"}}}});
  }
  RunResult closed = run("why job-closed");
  ASSERT_EQ(closed.exit_code, 0) << closed.err;
  EXPECT_THAT(closed.out, HasSubstr("tfjob.kubeflow.org/job-closed is Queued\n"
                                    "Most likely blocker: queue \"closed\" is Closed: it admits no "
                                    "new jobs"));
  EXPECT_THAT(closed.out, HasSubstr("podgroup job-closed is Pending: its gang of 2 pods is not "
                                    "admitted yet"));
  // The controller has acted (there is a PodGroup): no question whether it runs, and no missing
  // pods, which are not due before the gang is admitted.
  EXPECT_THAT(closed.out, Not(HasSubstr("trainctl controller")));
  EXPECT_THAT(closed.out, Not(HasSubstr("pods do not exist")));

  RunResult full = run("why job-full");
  EXPECT_THAT(full.out,
              HasSubstr("Most likely blocker: queue \"full\" is full: cpu 8 of 8 allocated\n"));
}

/// A Volcano Queue `name` with `capability`, its status `allocated`.
void create_queue(kube::Client& client, const std::string& name, json capability,
                  json allocated = json::object()) {
  json q = client.create(kube::resources::queues(), "",
                         {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                          {"kind", "Queue"},
                          {"metadata", {{"name", name}}},
                          {"spec", {{"capability", std::move(capability)}}}});
  q["status"] = {{"state", "Open"}, {"allocated", std::move(allocated)}};
  client.update_status(kube::resources::queues(), "", q);
}

/// The PodGroup of job `name` in `queue`, in `phase`, needing `min_resources`.
void create_podgroup(kube::Client& client, const std::string& name, const std::string& queue,
                     const std::string& phase, json min_resources = json::object()) {
  client.create(kube::resources::podgroups(), "default",
                {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                 {"kind", "PodGroup"},
                 {"metadata", {{"name", name}}},
                 {"spec", {{"minMember", 1}, {"queue", queue}, {"minResources", min_resources}}},
                 {"status", {{"phase", phase}}}});
}

TEST_F(JobFollowTest, WhyAsksWhetherTheControllerRunsOnlyWhenNothingShowsItActed) {
  create_job("untouched");
  RunResult untouched = run("why untouched");
  EXPECT_THAT(untouched.out,
              HasSubstr("Most likely blocker: no pods exist for the job: no operator "
                        "has created them (is `trainctl controller` running"));
  create_job("admitted", 2);
  set_status("admitted", "Created");
  create_podgroup(client(), "admitted", "default", "Inqueue");
  RunResult admitted = run("why admitted");
  EXPECT_THAT(admitted.out, Not(HasSubstr("trainctl controller")));
  EXPECT_THAT(admitted.out, HasSubstr("Most likely blocker: 2 of 2 replica pods do not exist yet: "
                                      "worker-0, worker-1\n"));
  // The API server refuses its pods (the controller's FailedCreate event): that is why.
  client().create(kube::resources::events(), "default",
                  {{"apiVersion", "v1"},
                   {"kind", "Event"},
                   {"metadata", {{"name", "admitted.refused"}}},
                   {"involvedObject",
                    {{"apiVersion", "kubeflow.org/v1"}, {"kind", "TFJob"}, {"name", "admitted"}}},
                   {"type", "Warning"},
                   {"reason", "FailedCreate"},
                   {"message",
                    "Error creating: Pod \"admitted-worker-0\" is invalid: "
                    "spec.containers[0].env[0].name: Invalid value: \"1BAD\""}});
  RunResult refused = run("why admitted");
  EXPECT_THAT(refused.out, HasSubstr("Most likely blocker: event FailedCreate on tfjob/admitted: "
                                     "Error creating: Pod \"admitted-worker-0\" is invalid"));
  EXPECT_THAT(refused.out, HasSubstr("2. 2 of 2 replica pods do not exist yet"));
}

TEST_F(JobFollowTest, WhyRanksTheSchedulersReasonAboveAGangNotAdmitted) {
  create_job("picky");
  set_status("picky", "Created");
  create_queue(client(), "default", {{"cpu", "1000"}});
  create_podgroup(client(), "picky", "default", "Pending");
  json pod = replica_pod("picky", 0, "--x", "60");
  pod["spec"]["nodeSelector"] = {{"gpu-model", "h100"}};  // no node has it
  client().create(kube::resources::pods(), "default", pod);
  ASSERT_TRUE(testing::wait_until([&] {
    return client()
               .get(kube::resources::pods(), "default", "picky-worker-0")
               .dump()
               .find("Unschedulable") != std::string::npos;
  }));
  RunResult r = run("why picky");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("Most likely blocker: worker-0 \\(pod picky-worker-0\\) cannot "
                                   "be scheduled: 0/4 nodes are available: [^\n]*didn't match "
                                   "Pod's node affinity/selector"));
  EXPECT_THAT(r.out, HasSubstr("2. podgroup picky is Pending: its gang of 1 pods is not admitted"));
}

TEST_F(JobFollowTest, WhySaysAJobBiggerThanItsQueueCanNeverRunAndSubmitWarns) {
  create_queue(client(), "small", {{"nvidia.com/gpu", 8}});
  const std::string never =
      "the job can never run: queue \"small\" can never admit it: it needs nvidia.com/gpu 16, "
      "the queue's capability is 8";
  // Before the controller has made a PodGroup: the gang it will make.
  RunResult submitted =
      run("submit tfjob --name huge --workers 2 --gpus 8 --queue small --image trainer:1 -- true");
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  EXPECT_EQ(submitted.err,
            "trainctl: warning: tfjob.kubeflow.org/huge will not run: queue \"small\" can never "
            "admit it: it needs nvidia.com/gpu 16, the queue's capability is 8\n");
  EXPECT_THAT(run("why huge").out, HasSubstr("Most likely blocker: " + never));
  // With the PodGroup the controller made, and ahead of the gang that is not admitted.
  create_podgroup(client(), "huge", "small", "Pending", {{"nvidia.com/gpu", 16}});
  RunResult r = run("why huge");
  EXPECT_THAT(r.out, HasSubstr("Most likely blocker: " + never));
  EXPECT_THAT(r.out, Not(HasSubstr("allocated + 16 needed")));
  // A gang that fits gets no warning.
  RunResult fits =
      run("submit tfjob --name fits --workers 1 --gpus 8 --queue small --image trainer:1 -- true");
  EXPECT_EQ(fits.err, "");
  // Unless its queue is closed: it admits nothing until opened.
  ASSERT_EQ(run("queue close small").exit_code, 0);
  RunResult closed =
      run("submit tfjob --name shut --workers 1 --gpus 8 --queue small --image trainer:1 -- true");
  ASSERT_EQ(closed.exit_code, 0) << closed.err;
  EXPECT_EQ(closed.err,
            "trainctl: warning: tfjob.kubeflow.org/shut waits: queue \"small\" is Closed: it "
            "admits no gang until it is opened (trainctl queue open small)\n");
  // Or missing; but `default`, which the controller makes on its first pass.
  RunResult missing =
      run("submit tfjob --name lost --workers 1 --queue nosuchq --image trainer:1 -- true");
  ASSERT_EQ(missing.exit_code, 0) << missing.err;
  EXPECT_EQ(missing.err,
            "trainctl: warning: tfjob.kubeflow.org/lost waits: queue \"nosuchq\" does not exist "
            "(trainctl queue create nosuchq)\n");
  ASSERT_THROW(client().get(kube::resources::queues(), "", "default"), Error);  // not made yet
  RunResult in_default = run("submit tfjob --name plain --workers 1 --image trainer:1 -- true");
  ASSERT_EQ(in_default.exit_code, 0) << in_default.err;
  EXPECT_EQ(in_default.err, "");
}

TEST_F(JobFollowTest, WhyOnAnAdmittedRunningJobSeesNoQueueBlocker) {
  // The queue is full with the job's own allocation.
  create_queue(client(), "team", {{"cpu", "1"}}, {{"cpu", "1"}});
  create_job("busy", 1, "team");
  set_status("busy", "Running");
  create_podgroup(client(), "busy", "team", "Running", {{"cpu", "1"}});
  create_replica("busy", 0, "--x", "60");
  ASSERT_TRUE(testing::wait_until([&] { return phase("busy-worker-0") == "Running"; }));
  RunResult r = run("why busy");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Nothing keeps it from running.\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("queue")));
}

// --gang-scheduler scheduler-plugins: the gang is scheduler-plugins' PodGroup
// (scheduling.x-k8s.io/v1alpha1), which the coscheduling plugin places when minMember pods exist
// and fit at once; no Queue admits it. Its pods are created at once, for the coscheduling
// scheduler (which the sandbox does not run: they stay unbound).
TEST_F(JobFollowTest, WhySaysWhatKeepsASchedulerPluginsGangFromBeingPlaced) {
  create_job("sp", 2, "nowhere");
  set_status("sp", "Created");
  const auto pod_for_coscheduling = [&](const std::string& job, int index) {
    json pod = replica_pod(job, index, "--x", "60");
    pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = job;
    pod["spec"]["schedulerName"] = "scheduler-plugins-scheduler";
    client().create(kube::resources::pods(), "default", pod);
  };
  pod_for_coscheduling("sp", 0);
  json group =
      testing::create_scheduler_plugins_podgroup(client(), "sp",
                                                 {{"minMember", 2},
                                                  {"minResources", {{"nvidia.com/gpu", 16}}},
                                                  {"scheduleTimeoutSeconds", 30}},
                                                 {{"phase", "Pending"}});
  RunResult missing = run("why sp");
  ASSERT_EQ(missing.exit_code, 0) << missing.err;
  EXPECT_THAT(
      missing.out,
      HasSubstr("tfjob.kubeflow.org/sp is Queued (TFJobCreated)\nMost likely blocker: podgroup sp "
                "(scheduling.x-k8s.io) is Pending: 1 of its minMember 2 pods exist; "
                "coscheduling binds none of them before all 2 do\n"));
  // Its pods are due at once, unlike a Volcano gang's; the queue the job names admits nothing.
  EXPECT_THAT(missing.out, HasSubstr("1 of 2 replica pods do not exist yet: worker-1\n"));
  EXPECT_THAT(missing.out, Not(HasSubstr("nowhere")));

  pod_for_coscheduling("sp", 1);
  group["status"] = {{"phase", "Scheduling"},
                     {"scheduleStartTime", api::format_timestamp(std::chrono::system_clock::now() -
                                                                 std::chrono::minutes(3))}};
  client().update_status(kube::resources::scheduler_plugins_podgroups(), "default", group);
  RunResult waiting = run("why sp");
  EXPECT_THAT(
      waiting.out,
      ContainsRegex("Most likely blocker: podgroup sp \\(scheduling.x-k8s.io\\) is "
                    "Scheduling: 0 of its minMember 2 pods bound, 0 running, waiting 3m[0-9]*s? "
                    "since scheduleStartTime, past its schedule timeout of 30s "
                    "\\(spec.scheduleTimeoutSeconds\\): the pods waiting at Permit were "
                    "rejected and are retried; coscheduling binds the gang only when all 2 "
                    "pods fit at once: free nvidia.com/gpu=16 for it, or lower minMember "
                    "\\(spec.runPolicy.schedulingPolicy.minAvailable\\)\n"));

  // No schedule timeout of its own and no scheduleStartTime: coscheduling's default, from its
  // creation.
  create_job("fresh", 1);
  set_status("fresh", "Created");
  pod_for_coscheduling("fresh", 0);
  testing::create_scheduler_plugins_podgroup(client(), "fresh", {{"minMember", 1}},
                                             {{"phase", "Scheduling"}});
  EXPECT_THAT(run("why fresh").out,
              ContainsRegex("Most likely blocker: podgroup fresh \\(scheduling.x-k8s.io\\) is "
                            "Scheduling: 0 of its minMember 1 pods bound, 0 running, waiting "
                            "[0-9]+s since its creation, within its schedule timeout of 60s "
                            "\\(coscheduling's default\\); coscheduling binds"));

  // Placed: minMember pods run, nothing to say of the gang.
  group = client().get(kube::resources::scheduler_plugins_podgroups(), "default", "sp");
  group["status"] = {{"phase", "Running"}, {"running", 2}};
  client().update_status(kube::resources::scheduler_plugins_podgroups(), "default", group);
  EXPECT_THAT(run("why sp").out, Not(HasSubstr("podgroup")));
}

TEST_F(JobFollowTest, WhyOnAFinishedJobSaysHowItFinished) {
  create_job("done");
  set_status("done", "Failed", "TFJob done has failed because 1 Worker replica(s) failed.",
             {{"completionTime", "2026-01-02T03:04:05Z"}});
  RunResult r = run("why done");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "tfjob.kubeflow.org/done has finished: Failed (TFJobFailed: TFJob done has failed "
            "because 1 Worker replica(s) failed.) at 2026-01-02T03:04:05Z\n");
}

}  // namespace
}  // namespace trainctl
