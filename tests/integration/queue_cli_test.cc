// trainctl queue create, list, get, update, open, close and delete against a sandbox with the
// Volcano CRDs, through the real binary.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/support/run_command.h"
#include "tests/support/sandbox_fixture.h"

namespace trainctl {
namespace {

using nlohmann::json;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

class QueueCliTest : public testing::SandboxTest {
 protected:
  void SetUp() override { testing::install_training_crds(client()); }

  testing::CommandResult run(const std::string& args) {
    return testing::run_command(
        fmt::format("env -u KUBECONFIG HOME=/nonexistent {} --kubeconfig {} {}", TRAINCTL_BINARY,
                    sandbox().kubeconfig_path().string(), args));
  }

  json queue(const std::string& name) { return client().get(kube::resources::queues(), "", name); }

  /// What the controller's admission writes: status through the status subresource.
  void set_status(const std::string& name, const json& status) {
    client().patch(kube::resources::queues(), "", name, kube::PatchType::Merge,
                   {{"status", status}}, {.subresource = "status"});
  }
};

TEST_F(QueueCliTest, CreateWritesAVolcanoQueueWithItsCapability) {
  const auto created =
      run("queue create team-a --cpu 64 --memory 512Gi --gpus 16 --capability amd.com/gpu=4 "
          "--weight 3 --no-reclaimable");
  ASSERT_EQ(created.exit_code, 0) << created.err;
  EXPECT_EQ(created.out, "queue.scheduling.volcano.sh/team-a created\n");
  const json q = queue("team-a");
  EXPECT_EQ(
      q["spec"]["capability"],
      json({{"cpu", "64"}, {"memory", "512Gi"}, {"nvidia.com/gpu", "16"}, {"amd.com/gpu", "4"}}));
  EXPECT_EQ(q["spec"]["weight"], 3);
  EXPECT_EQ(q["spec"]["reclaimable"], false);

  const auto again = run("queue create team-a --gpus 1");
  EXPECT_EQ(again.exit_code, 3);
  EXPECT_THAT(again.err, HasSubstr("already exists"));
}

TEST_F(QueueCliTest, CreateRejectsBadQuantitiesBeforeAnyRequest) {
  const auto bad_gpu = run("queue create team-a --gpus 1.5");
  EXPECT_EQ(bad_gpu.exit_code, 2);
  EXPECT_THAT(bad_gpu.err, HasSubstr("invalid --gpus \"1.5\": GPUs are whole"));
  const auto bad_memory = run("queue create team-a --memory 2GB");
  EXPECT_EQ(bad_memory.exit_code, 2);
  EXPECT_THAT(bad_memory.err, HasSubstr("invalid --memory \"2GB\""));
  const auto bad_capability = run("queue create team-a --capability gpu");
  EXPECT_EQ(bad_capability.exit_code, 2);
  EXPECT_THAT(bad_capability.err, HasSubstr("use RESOURCE=QUANTITY"));
  const auto wide = run("queue create team-a --gpus 2 -o wide");
  EXPECT_EQ(wide.exit_code, 2);
  EXPECT_THAT(wide.err, HasSubstr("queue create prints -o json, yaml or name"));
  const auto dry = run("queue create team-a --gpus 2 --dry-run -o json");
  EXPECT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_EQ(json::parse(dry.out)["spec"]["capability"]["nvidia.com/gpu"], "2");
  EXPECT_EQ(run("queue get team-a").exit_code, 3);  // nothing was created
}

// --gpus, as submit (and Arena) spell it; the old --gpu still works, hidden, with a warning.
TEST_F(QueueCliTest, GpuIsADeprecatedAliasOfGpus) {
  const auto old = run("queue create team-a --gpu 4 --dry-run -o json");
  EXPECT_EQ(old.exit_code, 0) << old.err;
  EXPECT_EQ(json::parse(old.out)["spec"]["capability"]["nvidia.com/gpu"], "4");
  EXPECT_EQ(old.err, "trainctl: warning: --gpu is deprecated, use --gpus\n");
  ASSERT_EQ(run("queue create team-a --gpus 4").exit_code, 0);
  const auto updated = run("queue update team-a --gpu 8");
  EXPECT_EQ(updated.exit_code, 0) << updated.err;
  EXPECT_THAT(updated.err, HasSubstr("--gpu is deprecated, use --gpus"));
  EXPECT_EQ(queue("team-a")["spec"]["capability"]["nvidia.com/gpu"], "8");
  EXPECT_THAT(run("queue create --help").out, Not(HasSubstr("--gpu ")));
}

TEST_F(QueueCliTest, ListShowsStateQuotaAndUsage) {
  EXPECT_THAT(run("queue list").err, HasSubstr("No queues found."));
  ASSERT_EQ(run("queue create team-a --gpus 16").exit_code, 0);
  ASSERT_EQ(run("queue create team-b --cpu 8").exit_code, 0);
  set_status("team-a", {{"state", "Open"},
                        {"allocated", {{"nvidia.com/gpu", "12"}}},
                        {"pending", 2},
                        {"running", 1},
                        {"inqueue", 1}});
  const auto list = run("queue list");
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_THAT(list.out, ContainsRegex("^NAME +STATE +WEIGHT +CAPABILITY +ALLOCATED +PENDING +"
                                      "RUNNING +AGE\n"));
  EXPECT_THAT(
      list.out,
      ContainsRegex("\nteam-a +Open +1 +nvidia.com/gpu=16 +nvidia.com/gpu=12 +2 +1 +[0-9]+s\n"));
  EXPECT_THAT(list.out, ContainsRegex("\nteam-b +Open +1 +cpu=8 +<none> +0 +0 +[0-9]+s\n"));

  const auto wide = run("queue list -o wide");
  EXPECT_THAT(wide.out, ContainsRegex("INQUEUE +COMPLETED +RECLAIMABLE +AGE\n"));
  EXPECT_THAT(wide.out, ContainsRegex("\nteam-a .* 1 +0 +true +[0-9]+s\n"));
  EXPECT_EQ(run("queue ls -o name").out,
            "queue.scheduling.volcano.sh/team-a\nqueue.scheduling.volcano.sh/team-b\n");
  const json items = json::parse(run("queue list -o json").out)["items"];
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0]["metadata"]["name"], "team-a");
}

TEST_F(QueueCliTest, GetPrintsOneQueueInEveryFormat) {
  ASSERT_EQ(run("queue create team-a --gpus 16").exit_code, 0);
  const auto table = run("queue get team-a");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, ContainsRegex("\nteam-a +Open +1 +nvidia.com/gpu=16 "));
  const auto yaml = run("queue get team-a -o yaml");
  EXPECT_THAT(yaml.out, HasSubstr("kind: Queue\n"));
  EXPECT_THAT(yaml.out, HasSubstr("nvidia.com/gpu: \"16\""));
  EXPECT_EQ(json::parse(run("queue get team-a -o json").out)["spec"]["weight"], 1);

  const auto missing = run("queue get nope");
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_THAT(missing.err, HasSubstr("not found"));
  EXPECT_EQ(run("queue get team-a -o table2").exit_code, 2);
}

TEST_F(QueueCliTest, UpdateChangesOnlyWhatItIsGiven) {
  ASSERT_EQ(run("queue create team-a --cpu 64 --gpus 16 --weight 2").exit_code, 0);
  const auto updated = run("queue update team-a --gpus 32 --capability cpu- --reclaimable");
  ASSERT_EQ(updated.exit_code, 0) << updated.err;
  EXPECT_EQ(updated.out, "queue.scheduling.volcano.sh/team-a configured\n");
  const json q = queue("team-a");
  EXPECT_EQ(q["spec"]["capability"], json({{"nvidia.com/gpu", "32"}}));
  EXPECT_EQ(q["spec"]["weight"], 2);
  EXPECT_EQ(q["spec"]["reclaimable"], true);

  ASSERT_EQ(run("queue update team-a --weight 5 --no-reclaimable").exit_code, 0);
  EXPECT_EQ(queue("team-a")["spec"]["weight"], 5);
  EXPECT_EQ(queue("team-a")["spec"]["reclaimable"], false);

  const auto nothing = run("queue update team-a");
  EXPECT_EQ(nothing.exit_code, 2);
  EXPECT_THAT(nothing.err, HasSubstr("update needs at least one of"));
  EXPECT_EQ(run("queue update team-a --weight 0").exit_code, 2);
  EXPECT_EQ(run("queue update nope --gpus 1").exit_code, 3);
}

TEST_F(QueueCliTest, CloseAndOpenSetTheStateTheAdmitterReads) {
  ASSERT_EQ(run("queue create idle").exit_code, 0);
  const auto closed = run("queue close idle");
  ASSERT_EQ(closed.exit_code, 0) << closed.err;
  EXPECT_EQ(closed.out, "queue.scheduling.volcano.sh/idle closed\n");
  EXPECT_EQ(queue("idle")["status"]["state"], "Closed");
  EXPECT_THAT(run("queue get idle").out, ContainsRegex("\nidle +Closed "));

  const auto opened = run("queue open idle");
  EXPECT_EQ(opened.out, "queue.scheduling.volcano.sh/idle opened\n");
  EXPECT_EQ(queue("idle")["status"]["state"], "Open");

  // A queue PodGroups still name, running or waiting, closes gradually, as Volcano's does.
  for (const char* phase : {"running", "pending"}) {
    ASSERT_EQ(run(fmt::format("queue create busy-{}", phase)).exit_code, 0);
    set_status(fmt::format("busy-{}", phase), {{"state", "Open"}, {phase, 1}});
    EXPECT_EQ(run(fmt::format("queue close busy-{}", phase)).out,
              fmt::format("queue.scheduling.volcano.sh/busy-{} closing\n", phase));
    EXPECT_EQ(queue(fmt::format("busy-{}", phase))["status"]["state"], "Closing");
  }
  EXPECT_EQ(run("queue close nope").exit_code, 3);
}

TEST_F(QueueCliTest, DeleteTakesOnlyClosedQueues) {
  ASSERT_EQ(run("queue create team-a").exit_code, 0);
  const auto open = run("queue delete team-a");
  EXPECT_EQ(open.exit_code, 2);
  EXPECT_THAT(open.err, HasSubstr("queue \"team-a\" is Open: only Closed queues can be deleted"));
  ASSERT_EQ(run("queue close team-a").exit_code, 0);
  const auto deleted = run("queue delete team-a");
  ASSERT_EQ(deleted.exit_code, 0) << deleted.err;
  EXPECT_EQ(deleted.out, "queue.scheduling.volcano.sh \"team-a\" deleted\n");
  EXPECT_EQ(run("queue get team-a").exit_code, 3);

  const auto missing = run("queue delete team-a");
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_THAT(missing.err, HasSubstr("not found"));
  const auto ignored = run("queue delete team-a --ignore-not-found");
  EXPECT_EQ(ignored.exit_code, 0) << ignored.err;
  EXPECT_THAT(ignored.out, IsEmpty());
  EXPECT_EQ(run("queue delete default").exit_code, 2);
}

// As Volcano, whose queue controller leaves a queue Closing while any PodGroup names it: a job
// that still waits in a queue would wait for ever once the queue is gone.
TEST_F(QueueCliTest, DeleteRefusesAQueueJobsAreStillIn) {
  ASSERT_EQ(run("queue create team-a").exit_code, 0);
  ASSERT_EQ(run("queue close team-a").exit_code, 0);
  const auto group = [](const std::string& name, const std::string& queue) {
    return json{{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                {"kind", "PodGroup"},
                {"metadata", {{"name", name}, {"namespace", "default"}}},
                {"spec", {{"minMember", 2}, {"queue", queue}}}};
  };
  client().create(kube::resources::podgroups(), "default", group("mnist", "team-a"));
  client().create(kube::resources::podgroups(), "default", group("bert", "team-a"));
  client().create(kube::resources::podgroups(), "default", group("other", "team-b"));

  const auto refused = run("queue delete team-a");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_EQ(refused.err,
            "trainctl: queue \"team-a\" still has jobs in it, which would wait for ever without "
            "it: default/bert, default/mnist; delete them first (or `trainctl queue open team-a` "
            "to run them)\n");
  EXPECT_EQ(queue("team-a")["status"]["state"], "Closed");

  for (const char* name : {"mnist", "bert"})
    client().remove(kube::resources::podgroups(), "default", name);
  const auto deleted = run("queue delete team-a");
  EXPECT_EQ(deleted.exit_code, 0) << deleted.err;
}

}  // namespace
}  // namespace trainctl

namespace trainctl {
namespace {

class TopCliTest : public QueueCliTest {
 protected:
  /// A PodGroup in "default" of queue team-a asking for `gpus` GPUs in one pod.
  void create_group(const std::string& name, int gpus, const json& status = json(),
                    const json& reservations = json()) {
    json group = {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                  {"kind", "PodGroup"},
                  {"metadata", {{"name", name}}},
                  {"spec",
                   {{"minMember", 1},
                    {"queue", "team-a"},
                    {"minResources", {{"nvidia.com/gpu", std::to_string(gpus)}}}}}};
    if (!status.is_null())
      group["status"] = status;
    if (!reservations.is_null())
      group["metadata"]["annotations"]["trainctl.io/node-reservations"] = reservations.dump();
    client().create(kube::resources::podgroups(), "default", group);
  }
};

// top nodes: what admission has reserved on a node (the node-reservations annotation of an
// admitted gang) and whose it is; top queues and queue get: the head of line and why it waits.
TEST_F(TopCliTest, TopAndQueueGetShowReservationsSharesAndWhyTheHeadWaits) {
  ASSERT_EQ(run("queue create team-a --gpus 32").exit_code, 0);
  create_group("admitted", 4, {{"phase", "Inqueue"}},
               {{"sandbox-node-0", {{"nvidia.com/gpu", "4"}, {"pods", "1"}}}});
  create_group("huge", 16);

  const auto nodes = run("top nodes");
  ASSERT_EQ(nodes.exit_code, 0) << nodes.err;
  EXPECT_THAT(nodes.out,
              ContainsRegex("\nsandbox-node-0 +Ready +4/8 +0/32 +0/256Gi +4 +default/admitted\n"));
  EXPECT_THAT(nodes.out, ContainsRegex("\nsandbox-node-1 +Ready +0/8 .* <none>\n"));
  EXPECT_THAT(nodes.out, HasSubstr("Used/Allocatable GPUs on schedulable nodes: 4/32 (12%)\n"));
  const json node_list = json::parse(run("top nodes -o json").out)["nodes"];
  ASSERT_EQ(node_list.size(), 4u);
  EXPECT_EQ(node_list[0]["reserved"], json({{"nvidia.com/gpu", "4"}, {"pods", "1"}}));
  EXPECT_EQ(node_list[0]["free"]["nvidia.com/gpu"], "4");
  EXPECT_EQ(node_list[0]["jobs"], json({"default/admitted"}));
  EXPECT_THAT(run("top nodes -o wide").out, ContainsRegex("PODS +REQUESTED +RESERVED +FREE +JOBS"));

  const std::string why =
      "no node fits pod huge-0: needs 16 nvidia.com/gpu, largest free on one node is 8 "
      "(sandbox-node-1)";
  const auto queues = run("top queues");
  ASSERT_EQ(queues.exit_code, 0) << queues.err;
  EXPECT_THAT(queues.out, ContainsRegex("\nteam-a +Open +1 +nvidia.com/gpu=32 +nvidia.com/gpu=20 "
                                        "+nvidia.com/gpu=4 +1 +default/huge: no node fits"));
  EXPECT_THAT(queues.out, HasSubstr("default/huge: " + why + "\n"));
  const json queue_list = json::parse(run("top queues -o json").out)["queues"];
  ASSERT_EQ(queue_list.size(), 1u);
  EXPECT_EQ(queue_list[0]["allocated"], json({{"nvidia.com/gpu", "4"}}));
  EXPECT_EQ(queue_list[0]["deserved"]["nvidia.com/gpu"], "20");  // 4 held + 16 asked
  EXPECT_EQ(queue_list[0]["pending"][0]["podGroup"], "default/huge");
  EXPECT_EQ(queue_list[0]["pending"][0]["reason"], "NotEnoughResources");
  EXPECT_EQ(queue_list[0]["pending"][0]["message"], why);

  const auto get = run("queue get team-a");
  ASSERT_EQ(get.exit_code, 0) << get.err;
  // The resources it asks none of are left out, as in top queues (the gang asks no cpu).
  EXPECT_THAT(get.out, HasSubstr("\nDeserved share: nvidia.com/gpu=20\n"));
  EXPECT_THAT(get.out, HasSubstr("Pending gangs, in the order admission tries them:\n  1. "
                                 "default/huge (priority 0): " +
                                 why + "\n"));
  EXPECT_THAT(run("queue get team-a -o json").out, Not(HasSubstr("Pending gangs")));

  const auto yaml = run("top nodes -o yaml");
  EXPECT_EQ(yaml.exit_code, 2);
  EXPECT_THAT(yaml.err, HasSubstr("wide or json"));
  EXPECT_THAT(run("top").out, HasSubstr("Subcommands:\n  nodes"));  // a group alone: its help
}

}  // namespace
}  // namespace trainctl
