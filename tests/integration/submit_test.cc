// submit, render and template as a user runs them: the real binary against an in-process
// sandbox with the Kubeflow CRDs, checked through output, exit codes and the objects created.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "api/status.h"
#include "error.h"
#include "kube/resource.h"
#include "tests/support/background_command.h"
#include "tests/support/exec_kubeconfig.h"
#include "tests/support/expect_error.h"
#include "tests/support/run_command.h"
#include "tests/support/sandbox_fixture.h"
#include "tests/support/temp_dir.h"
#include "yaml_json.h"

namespace trainctl {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

using RunResult = testing::CommandResult;

/// Runs trainctl with `args` in a clean environment (no KUBECONFIG, no HOME, no TRAINCTL_*
/// values), optionally feeding `input` on stdin.
/// trainctl as a user with nothing configured runs it (testing::run_clean).
RunResult run_submit(const std::string& args, const std::string& input = "") {
  return testing::run_clean(TRAINCTL_BINARY, args, input);
}

json parse_json(const RunResult& r) {
  json doc = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(doc.is_discarded()) << "not JSON:\n" << r.out << r.err;
  return doc;
}

const json& container(const json& job, const std::string& specs, const std::string& type) {
  return job["spec"][specs][type]["template"]["spec"]["containers"][0];
}

// ---- render: offline, no cluster ----

TEST(RenderTest, TfJobCarriesEveryRoleAndPodSetting) {
  RunResult r = run_submit(
      "render tfjob --name mnist --image reg/tf:1 --workers 3 --ps 2 --chief 1 --gpus 2 "
      "--cpu 4 --memory 8Gi --ps-cpu 2 --ps-gpus 0 --env A=1 --env B=x=y --label team=a "
      "--toleration gpu=true:NoSchedule --toleration dedicated --volume data:/data:ro "
      "--node-selector pool=gpu --queue team-a --backoff-limit 3 -o json -- python train.py "
      "--lr 0.1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json job = parse_json(r);
  EXPECT_EQ(job["kind"], "TFJob");
  EXPECT_EQ(job["metadata"]["name"], "mnist");
  const json& specs = job["spec"]["tfReplicaSpecs"];
  EXPECT_EQ(specs["Worker"]["replicas"], 3);
  EXPECT_EQ(specs["PS"]["replicas"], 2);
  EXPECT_EQ(specs["Chief"]["replicas"], 1);
  EXPECT_FALSE(specs.contains("Evaluator"));
  const json& worker = container(job, "tfReplicaSpecs", "Worker");
  EXPECT_EQ(worker["image"], "reg/tf:1");
  EXPECT_EQ(worker["command"], json({"python", "train.py", "--lr", "0.1"}));
  EXPECT_EQ(worker["env"], json::parse(R"([{"name":"A","value":"1"},{"name":"B","value":"x=y"}])"));
  EXPECT_EQ(worker["resources"]["limits"]["nvidia.com/gpu"], 2);
  EXPECT_EQ(worker["resources"]["limits"]["memory"], "8Gi");
  EXPECT_EQ(worker["volumeMounts"][0]["mountPath"], "/data");
  EXPECT_EQ(worker["volumeMounts"][0]["readOnly"], true);
  const json& ps = container(job, "tfReplicaSpecs", "PS");
  EXPECT_EQ(ps["resources"]["limits"]["cpu"], "2");
  EXPECT_EQ(worker["resources"]["limits"]["cpu"], "4");
  const json& pod = specs["Worker"]["template"]["spec"];
  EXPECT_EQ(pod["tolerations"],
            json::parse(R"([{"key":"gpu","operator":"Equal","value":"true","effect":"NoSchedule"},
                            {"key":"dedicated","operator":"Exists"}])"));
  EXPECT_EQ(pod["nodeSelector"], json({{"pool", "gpu"}}));
  EXPECT_EQ(pod["volumes"][0]["persistentVolumeClaim"]["claimName"], "data");
  EXPECT_EQ(specs["Worker"]["template"]["metadata"]["labels"]["team"], "a");
  EXPECT_EQ(job["spec"]["runPolicy"]["schedulingPolicy"]["queue"], "team-a");
  EXPECT_EQ(job["spec"]["runPolicy"]["backoffLimit"], 3);
  const json& annotations = job["metadata"]["annotations"];
  EXPECT_EQ(annotations["trainctl.io/template"], "tfjob");
  EXPECT_THAT(annotations["trainctl.io/spec-hash"].get<std::string>(),
              MatchesRegex("[0-9a-f]{64}"));
  EXPECT_THAT(annotations["trainctl.io/version"].get<std::string>(), MatchesRegex("[0-9.]+"));
}

TEST(RenderTest, PyTorchWorkersCountTheMaster) {
  RunResult r = run_submit(
      "render pytorchjob --name ddp --image reg/pt:1 --workers 4 --nproc-per-node 8 "
      "--worker-image reg/pt:worker --master-memory 4Gi -o json -- torchrun train.py");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json job = parse_json(r);
  EXPECT_EQ(job["kind"], "PyTorchJob");
  EXPECT_EQ(job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"], 1);
  EXPECT_EQ(job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"], 3);
  EXPECT_EQ(job["spec"]["nprocPerNode"], "8");
  EXPECT_EQ(container(job, "pytorchReplicaSpecs", "Master")["image"], "reg/pt:1");
  EXPECT_EQ(container(job, "pytorchReplicaSpecs", "Worker")["image"], "reg/pt:worker");
  EXPECT_EQ(container(job, "pytorchReplicaSpecs", "Master")["resources"]["limits"]["memory"],
            "4Gi");
  EXPECT_EQ(container(job, "pytorchReplicaSpecs", "Master")["command"],
            json({"torchrun", "train.py"}));
}

TEST(RenderTest, MpiJobHasOneLauncherAndTheWorkers) {
  RunResult r = run_submit(
      "render mpijob --name hvd --image reg/hvd:1 --workers 2 --slots-per-worker 4 "
      "--mpi-implementation Intel -o json -- mpirun python train.py");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json job = parse_json(r);
  EXPECT_EQ(job["kind"], "MPIJob");
  EXPECT_EQ(job["apiVersion"], "kubeflow.org/v2beta1");
  EXPECT_EQ(job["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"], 1);
  EXPECT_EQ(job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"], 2);
  EXPECT_EQ(job["spec"]["slotsPerWorker"], 4);
  EXPECT_EQ(job["spec"]["mpiImplementation"], "Intel");
  EXPECT_EQ(container(job, "mpiReplicaSpecs", "Launcher")["command"],
            json({"mpirun", "python", "train.py"}));
}

TEST(RenderTest, IsDeterministicAndUsesGenerateNameWithoutName) {
  const std::string args = "render tfjob --image reg/tf:1 --workers 2 --env B=2 --env A=1";
  RunResult first = run_submit(args);
  RunResult second = run_submit(args);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(first.out, second.out);
  const json job = yaml_to_json(YAML::Load(first.out));
  EXPECT_EQ(job["metadata"]["generateName"], "tfjob-");
  EXPECT_FALSE(job["metadata"].contains("name"));
}

TEST(RenderTest, BadFlagValuesExit2NamingTheFlagBeforeAnythingIsRendered) {
  RunResult r = run_submit("render tfjob --name mnist --image reg/tf:1 --workers -1 --memory lots");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "trainctl: --memory: must be a quantity such as 4, 500m or 16Gi, got \"lots\"\n"
            "--workers: must be at least 0, got -1\n");
}

TEST(RenderTest, ATemplateOfYourOwnTakesAnyValueAndIsValidatedAsRendered) {
  testing::TempDir dir;
  const auto target = dir.path() / "mine";
  ASSERT_EQ(run_submit(fmt::format("template export tfjob {}", target.string())).exit_code, 0);
  const std::string tpl = (target / "tfjob.yaml.mustache").string();
  // No schema: an unknown key is the template's business; the rendered job is still validated.
  RunResult r = run_submit(
      fmt::format("render tfjob --template {} --name mnist --image reg/tf:1 --set dataset=s3://x "
                  "--set workers=-1 --set memory=lots",
                  tpl));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, MatchesRegex("(.|\n)*tfjob.yaml.mustache \\(rendered\\):[0-9]+: "
                                  "spec\\.tfReplicaSpecs\\.Worker\\.replicas: (.|\n)*"));
  EXPECT_THAT(r.err, MatchesRegex("(.|\n)*tfjob.yaml.mustache \\(rendered\\):[0-9]+: "
                                  "spec\\.tfReplicaSpecs\\.Worker\\.template\\.spec\\."
                                  "containers\\[0\\]\\.resources\\.[a-z]+\\.memory(.|\n)*"));
  EXPECT_THAT(r.err, Not(HasSubstr("dataset")));
  // The typed flags mean the same whatever the template: they are checked all the same.
  RunResult flag =
      run_submit(fmt::format("render tfjob --template {} --image i --workers -1", tpl));
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_EQ(flag.err, "trainctl: --workers: must be at least 0, got -1\n");
}

/// Each bad value of issue 14 item 3: it used to render a different job and exit 0.
TEST(RenderTest, BadValuesFromFlagsSetAndValuesFilesExit2NamingTheFlagOrKey) {
  const struct {
    const char* args;
    const char* error;
  } cases[] = {
      {"--workers -1", "--workers: must be at least 1, got -1"},
      {"--set workers=abc", "--set workers=abc: workers: must be an integer, got \"abc\""},
      {"--set workers=-1", "--set workers=-1: workers: must be at least 1, got -1"},
      {"--set workers=[1,2]", "--set workers=[1,2]: workers: must be an integer, got \"[1,2]\""},
      {"--set-string workers=3", "--set-string workers=3: workers: must be an integer, got \"3\""},
      {"--set env=notalist",
       "--set env=notalist: env: must be a list of {name, value} or a map of NAME: value, got "
       "\"notalist\""},
      {"--set imagee=foo", "--set imagee=foo: imagee: unknown value (did you mean \"image\"?)"},
      {"--set worker.imgae=foo",
       "--set worker.imgae=foo: worker.imgae: unknown value (did you mean \"worker.image\"?)"},
      {"--set ps=2",
       "--set ps=2: ps: the pytorchjob template does not read it (the tfjob "
       "template does)"},
      {"--nproc-per-node many",
       "--nproc-per-node: must be auto, cpu, gpu or a positive integer, got \"many\""},
      {"--set nprocPerNode=0",
       "--set nprocPerNode=0: nprocPerNode: must be auto, cpu, gpu or a positive integer, got 0"},
      {"--volume data:/mnt:rx", "--volume: mode \"rx\" in \"data:/mnt:rx\" is not ro or rw"},
      {"--set volumes[0]=data:/mnt:rx",
       "--set volumes[0]=data:/mnt:rx: volumes[0]: mode \"rx\" in \"data:/mnt:rx\" is not ro or "
       "rw"},
      {"--restart-policy Sometimes",
       "--restart-policy: must be one of Always, OnFailure, Never or ExitCode, got "
       "\"Sometimes\""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    RunResult r = run_submit(fmt::format(
        "render pytorchjob --name bert --image reg/pt:1 {} -- python train.py", c.args));
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_THAT(r.err, ::testing::StartsWith(fmt::format("trainctl: {}\n", c.error)));
  }
  testing::TempDir dir;
  const auto values = dir.write("values.yaml", "workers: 2\nenv: notalist\nimagee: x\n");
  RunResult file = run_submit(
      fmt::format("render pytorchjob --name bert --image reg/pt:1 --values {} -- python train.py",
                  values.string()));
  EXPECT_EQ(file.exit_code, 2);
  EXPECT_THAT(file.err, HasSubstr(fmt::format(
                            "trainctl: {0}: env: must be a list of {{name, value}} or a map of "
                            "NAME: value, got \"notalist\"\n{0}: imagee: unknown value (did you "
                            "mean \"image\"?)\n",
                            values.string())));
}

TEST(RenderTest, TrainctlEnvironmentValuesAreCheckedAndNamedByTheirVariable) {
  RunResult r =
      testing::run_command(fmt::format("env -i PATH=/usr/bin:/bin HOME=/nonexistent "
                                       "TRAINCTL_WORKERS=many TRAINCTL_SLOTS_PER_WORKER=2 "
                                       "{} render pytorchjob --name bert --image reg/pt:1",
                                       TRAINCTL_BINARY));
  EXPECT_EQ(r.exit_code, 2);
  // slotsPerWorker is an mpijob value: shared defaults may hold it. workers is checked.
  EXPECT_EQ(r.err, "trainctl: TRAINCTL_WORKERS: workers: must be an integer, got \"many\"\n");
}

TEST(RenderTest, VolumeModeIsParsedIntoReadOnly) {
  RunResult r = run_submit(
      "render tfjob --name v --image i --volume data:/mnt:ro --volume ckpt:/ckpt:rw -o json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json pod = parse_json(r)["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"];
  EXPECT_EQ(pod["containers"][0]["volumeMounts"],
            json::parse(R"([{"name":"vol-0","mountPath":"/mnt","readOnly":true},
                            {"name":"vol-1","mountPath":"/ckpt"}])"));
  EXPECT_EQ(pod["volumes"],
            json::parse(R"([{"name":"vol-0","persistentVolumeClaim":{"claimName":"data",
                                                                       "readOnly":true}},
                            {"name":"vol-1","persistentVolumeClaim":{"claimName":"ckpt"}}])"));
}

TEST(RenderTest, AMissingImageIsSaidInFlagTerms) {
  RunResult r = run_submit("render pytorchjob --name bert --workers 2 -- python train.py");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "trainctl: --image is required (the container image of every replica; per role: "
            "--master-image, --worker-image)\n");
  RunResult per_role = run_submit(
      "render pytorchjob --name bert --workers 2 --master-image a --worker-image b -o json");
  EXPECT_EQ(per_role.exit_code, 0) << per_role.err;
}

// A repeatable flag takes one value per occurrence, as kubectl's: the `--` after it still starts
// the command, whose own flags (-c) are not trainctl's.
TEST(RenderTest, ARepeatableFlagBeforeTheCommandTakesOneValue) {
  RunResult r = run_submit(
      "render tfjob --name d --image i -o json --label a=b --annotation x=y -- sh -c true");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json job = parse_json(r);
  EXPECT_EQ(job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"],
            json::array({"sh", "-c", "true"}));
  EXPECT_EQ(job["metadata"]["labels"]["a"], "b");
  RunResult extra = run_submit("render tfjob --name d --image i --label a=b c=d -- true");
  EXPECT_EQ(extra.exit_code, 2);
}

// The job's command comes after `--` alone: `render tfjob mnist --image x`, which kubectl's
// `create job NAME` reads as a name, used to run `mnist` as the job's command.
TEST(RenderTest, AWordBeforeTheSeparatorIsRefusedNotRunAsTheCommand) {
  for (const char* args :
       {"render tfjob mnist --image reg/tf:1", "render tfjob --image reg/tf:1 mnist",
        "render mpijob --image reg/hvd:1 mpirun python train.py"}) {
    RunResult r = run_submit(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_EQ(r.out, "") << args;
    const std::string word =
        std::string(args).find("mpirun") != std::string::npos ? "mpirun" : "mnist";
    EXPECT_EQ(r.err, "trainctl: unexpected argument \"" + word +
                         "\" before \"--\": the job's command comes after \"--\" alone (a job is "
                         "named with --name)\n")
        << args;
  }
  // After `--`, every word is the command, whatever it looks like.
  RunResult r = run_submit("render tfjob --image reg/tf:1 -o json -- mnist --name x");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json job = parse_json(r);
  EXPECT_EQ(job["metadata"]["generateName"], "tfjob-");
  EXPECT_EQ(job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"],
            json::array({"mnist", "--name", "x"}));
}

// Duration flags take Go durations as kubectl's do, and plain integers as seconds.
TEST(RenderTest, DurationFlagsTakeGoDurationsOrSeconds) {
  RunResult r = run_submit(
      "render tfjob --name d --image i --active-deadline 2h --ttl 15m -o json -- python t.py");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json job = parse_json(r);
  EXPECT_EQ(job["spec"]["runPolicy"]["activeDeadlineSeconds"], 7200);
  EXPECT_EQ(job["spec"]["runPolicy"]["ttlSecondsAfterFinished"], 900);
  RunResult seconds =
      run_submit("render tfjob --name d --image i --ttl 600 -o json -- python t.py");
  ASSERT_EQ(seconds.exit_code, 0) << seconds.err;
  EXPECT_EQ(parse_json(seconds)["spec"]["runPolicy"]["ttlSecondsAfterFinished"], 600);
  RunResult bad = run_submit("render tfjob --name d --image i --ttl soon -- python t.py");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--ttl"));
  EXPECT_THAT(bad.err, HasSubstr("\"soon\" is not a duration"));
  // The help names what they take: a duration, not an INT.
  RunResult help = run_submit("render tfjob --help");
  EXPECT_THAT(help.out, HasSubstr("--active-deadline DURATION"));
  EXPECT_THAT(help.out, HasSubstr("--ttl DURATION"));
  EXPECT_THAT(help.out, Not(HasSubstr("--ttl INT")));
}

// A value of the wrong type is named with its flag and what the flag takes, as the CLI's other
// flag errors are, not with CLI11's "Could not convert: --gpus = 1.5".
TEST(RenderTest, AValueOfTheWrongTypeNamesTheFlagAndWhatItTakes) {
  RunResult r = run_submit("render tfjob --name d --image i --gpus 1.5 -- python t.py");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "trainctl: --gpus: \"1.5\" is not an integer\nSee 'trainctl render tfjob --help' for "
            "usage.\n");
  RunResult workers = run_submit("render tfjob --name d --image i --workers two -- python t.py");
  EXPECT_EQ(workers.exit_code, 2);
  EXPECT_THAT(workers.err, HasSubstr("trainctl: --workers: \"two\" is not an integer\n"));
}

TEST(RenderTest, BadFlagSyntaxIsAUsageError) {
  RunResult r = run_submit("render tfjob --name a --image i --toleration k=v:Sometimes");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("Sometimes"));
  RunResult env = run_submit("render tfjob --name a --image i --env NOVALUE");
  EXPECT_EQ(env.exit_code, 2);
  EXPECT_THAT(env.err, HasSubstr("--env"));
}

// A --label, --node-selector or --annotation kube-apiserver would refuse is refused as the flag it
// is, in the server's words, once and before anything is rendered or sent (it was reported once on
// the job and once per pod template it is copied into, as lines of the rendered file).
TEST(RenderTest, ABadLabelOrAnnotationFlagNamesTheFlagOnce) {
  RunResult value =
      run_submit("render tfjob --name d --image i --ps 1 --label a=b=c -- python t.py");
  EXPECT_EQ(value.exit_code, 2);
  EXPECT_EQ(value.out, "");
  EXPECT_EQ(value.err,
            "trainctl: --label \"a=b=c\": value \"b=c\": a valid label must be an empty string or "
            "consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
            "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')\n");
  RunResult key =
      run_submit("render tfjob --name d --image i --node-selector 'bad key=x' -- python t.py");
  EXPECT_EQ(key.exit_code, 2);
  EXPECT_THAT(key.err, HasSubstr("trainctl: --node-selector \"bad key=x\": key \"bad key\": "));
  RunResult annotation =
      run_submit("render tfjob --name d --image i --annotation 'a/b/c=any value' -- python t.py");
  EXPECT_EQ(annotation.exit_code, 2);
  EXPECT_THAT(annotation.err, HasSubstr("trainctl: --annotation \"a/b/c=any value\": key "));
  // Any value is an annotation's.
  EXPECT_EQ(run_submit("render tfjob --name d --image i --annotation 'note=a b=c' -- python t.py")
                .exit_code,
            0);
}

TEST(RenderTest, ValuesFilesThenFlagsThenSetWin) {
  testing::TempDir dir;
  const auto values = dir.write("values.yaml", "image: reg/from-file:1\nworkers: 2\ncpu: \"1\"\n");
  RunResult r = run_submit(fmt::format(
      "render tfjob --name layered --values {} --cpu 3 --set workers=5 --set-string queue=007 "
      "-o json",
      values.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json job = parse_json(r);
  EXPECT_EQ(container(job, "tfReplicaSpecs", "Worker")["image"], "reg/from-file:1");
  EXPECT_EQ(container(job, "tfReplicaSpecs", "Worker")["resources"]["limits"]["cpu"], "3");
  EXPECT_EQ(job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 5);
  EXPECT_EQ(job["spec"]["runPolicy"]["schedulingPolicy"]["queue"], "007");
}

/// A TFJob of one worker running `image` (quoted: line 13, from column 28).
std::string tfjob_yaml(std::string_view name, std::string_view image) {
  return fmt::format(R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: {}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers:
          - name: tensorflow
            image: "{}"
)",
                     name, image);
}

/// A TFJob whose image (line 13, from column 28) holds bytes that are not UTF-8.
const std::string kNotUtf8Job = tfjob_yaml("bytes", "reg/tf:\xff\xfe");

TEST(RenderTest, BytesThatAreNotUtf8AreAnErrorWithExit2NotACrash) {
  testing::TempDir dir;
  const auto tpl = dir.write("bytes.yaml.mustache", kNotUtf8Job);
  for (const char* output : {"yaml", "json"}) {
    RunResult r = run_submit(
        fmt::format("render tfjob --name c --image i --template {} -o {}", tpl.string(), output));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(
        r.err,
        "trainctl: bytes.yaml.mustache (rendered):13: invalid UTF-8 byte 0xff at column 28\n");
    EXPECT_EQ(r.out, "");
  }
  const auto values = dir.write("values.yaml", "image: \"reg/tf:\xff\"\n");
  RunResult v = run_submit(fmt::format("render tfjob --values {} -o json", values.string()));
  EXPECT_EQ(v.exit_code, 2) << v.err;
  EXPECT_EQ(v.err, "trainctl: value image: invalid UTF-8 byte 0xff at offset 7\n");
}

TEST(SubmitFileTest, BytesThatAreNotUtf8AreAValidationErrorAtTheirLineNotACrash) {
  testing::TempDir dir;
  const std::string file = dir.write("job.yaml", kNotUtf8Job).string();
  const std::string message =
      fmt::format("trainctl: {}:13: invalid UTF-8 byte 0xff at column 28\n", file);
  // Checked as the file is read: no server is needed to refuse it.
  for (const std::string& args : {fmt::format("submit -f {} --dry-run=client", file),
                                  fmt::format("submit -f {} --dry-run=client -o json", file),
                                  fmt::format("submit -f {} -s https://127.0.0.1:1", file)}) {
    RunResult r = run_submit(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_EQ(r.err, message) << args;
    EXPECT_EQ(r.out, "") << args;
  }
  RunResult piped = run_submit("submit -f - --dry-run=client -o json", kNotUtf8Job);
  EXPECT_EQ(piped.exit_code, 2) << piped.err;
  EXPECT_EQ(piped.err, "trainctl: -:13: invalid UTF-8 byte 0xff at column 28\n");
}

// Found by tests/fuzz/manifest_fuzz.cc: `kind:` with no value read as a string threw a JSON
// type error, which the CLI reported as exit 3 with nlohmann's message.
TEST(SubmitFileTest, AnEmptyOrNonStringKindIsAValidationErrorAtItsLine) {
  testing::TempDir dir;
  for (const char* kind : {"", " 5", " [TFJob]"}) {
    const std::string file =
        dir.write("job.yaml", fmt::format("apiVersion: kubeflow.org/v1\nkind:{}\n", kind)).string();
    RunResult r = run_submit(fmt::format("submit -f {} --dry-run=client", file));
    EXPECT_EQ(r.exit_code, 2) << kind << "\n" << r.err;
    EXPECT_EQ(r.err, fmt::format(
                         "trainctl: {}:2: kind: \"\" is not a TFJob, PyTorchJob or MPIJob\n", file))
        << kind;
  }
}

// ---- template ----

TEST(TemplateTest, ListShowsTheShippedTemplates) {
  RunResult r = run_submit("template list");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, MatchesRegex("NAME +SOURCE +PATH\n(.|\n)*"));
  for (const char* name : {"tfjob", "pytorchjob", "mpijob"})
    EXPECT_THAT(r.out, HasSubstr(fmt::format("{}.yaml.mustache", name)));
}

TEST(TemplateTest, ShowPrintsTheTemplateText) {
  RunResult r = run_submit("template show mpijob");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("kind: MPIJob"));
  RunResult missing = run_submit("template show nosuch");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("nosuch"));
}

TEST(TemplateTest, ExportRefusesToOverwriteWithoutForce) {
  testing::TempDir dir;
  const auto target = dir.path() / "mine";
  RunResult r = run_submit(fmt::format("template export tfjob {}", target.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto file = target / "tfjob.yaml.mustache";
  EXPECT_THAT(testing::TempDir::read(file), HasSubstr("kind: TFJob"));
  dir.write("mine/tfjob.yaml.mustache", "edited");
  RunResult again = run_submit(fmt::format("template export tfjob {}", target.string()));
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_EQ(testing::TempDir::read(file), "edited");
  RunResult forced = run_submit(fmt::format("template export tfjob {} --force", target.string()));
  EXPECT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_THAT(testing::TempDir::read(file), HasSubstr("kind: TFJob"));
}

TEST(TemplateTest, AnExportedTemplateRendersWithTemplateFlag) {
  testing::TempDir dir;
  dir.write("custom.yaml.mustache", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: {{name}}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 7
      template:
        spec:
          containers:
          - name: tensorflow
            image: {{image}}
)");
  RunResult r = run_submit(fmt::format("render tfjob --name c --image i --template {} -o json",
                                       (dir.path() / "custom.yaml.mustache").string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json job = parse_json(r);
  EXPECT_EQ(job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 7);
  EXPECT_EQ(job["metadata"]["annotations"]["trainctl.io/template"], "custom.yaml.mustache");
}

// ---- submit against the sandbox ----

class SubmitTest : public ::testing::Test {
 protected:
  SubmitTest() = default;
  explicit SubmitTest(const testing::LocalSandbox::Customize& customize) : local_(customize) {}

  void SetUp() override { testing::install_training_crds(local_.client()); }

  RunResult trainctl(const std::string& args, const std::string& input = "") {
    // Before the verb: whatever follows `--` is the job's command.
    return run_submit(
        fmt::format("--kubeconfig {} {}", local_.sandbox().kubeconfig_path().string(), args),
        input);
  }
  kube::Client& client() { return local_.client(); }

  bool exists(const kube::Resource& r, const std::string& name) {
    try {
      client().get(r, "default", name);
      return true;
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::NotFound)
        return false;
      throw;
    }
  }

  testing::LocalSandbox local_;
  testing::TempDir dir_;
};

constexpr const char* kTwoJobs = R"(apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: first
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
          - name: pytorch
            image: reg/pt:1
---
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: second
spec:
  tfReplicaSpecs:
    Worker:
      replicas: {}
      template:
        spec:
          containers:
          - name: tensorflow
            image: reg/tf:1
)";

TEST_F(SubmitTest, CreatesTheRenderedJob) {
  const std::string flags =
      "--name train --image reg/pt:1 --workers 3 --env EPOCHS=3 --gpus 1 -- python train.py";
  RunResult r = trainctl("submit pytorchjob " + flags);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "pytorchjob.kubeflow.org/train created\n");
  const json job = client().get(kube::resources::job(api::JobKind::PyTorchJob), "default", "train");
  EXPECT_EQ(job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"], 1);
  EXPECT_EQ(job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"], 2);
  const json& worker = container(job, "pytorchReplicaSpecs", "Worker");
  EXPECT_EQ(worker["image"], "reg/pt:1");
  EXPECT_EQ(worker["command"], json({"python", "train.py"}));
  EXPECT_EQ(worker["env"][0], json({{"name", "EPOCHS"}, {"value", "3"}}));
  // The recorded hash is the one `render` computes for the same flags.
  const json rendered = parse_json(run_submit("render pytorchjob -o json " + flags));
  const json& annotations = job["metadata"]["annotations"];
  EXPECT_EQ(annotations["trainctl.io/template"], "pytorchjob");
  EXPECT_EQ(annotations["trainctl.io/spec-hash"],
            rendered["metadata"]["annotations"]["trainctl.io/spec-hash"]);
  EXPECT_THAT(annotations["trainctl.io/spec-hash"].get<std::string>(),
              MatchesRegex("[0-9a-f]{64}"));
}

TEST_F(SubmitTest, AWordBeforeTheSeparatorCreatesNothing) {
  RunResult r = trainctl("submit tfjob mnist --image reg/tf:1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unexpected argument \"mnist\" before \"--\""));
  EXPECT_TRUE(client().list(kube::resources::job(api::JobKind::TFJob), "default")["items"].empty());
}

TEST_F(SubmitTest, WithoutANameTheServerGeneratesOne) {
  RunResult r = trainctl("submit tfjob --image reg/tf:1 -o name -- python train.py");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, MatchesRegex("tfjob\\.kubeflow\\.org/tfjob-[a-z0-9]{5}\n"));
}

// One command resolves its kubeconfig once and keeps one client: the exec credential plugin runs
// once for the whole of submit --wait (it ran twice when --wait made a second client).
TEST_F(SubmitTest, AnExecCredentialPluginRunsOnceForSubmitWait) {
  const auto runs = dir_.path() / "plugin-runs";
  const auto plugin =
      dir_.write("plugin.sh",
                 fmt::format("#!/bin/sh\necho run >> {}\nprintf '{{\"apiVersion\": "
                             "\"client.authentication.k8s.io/v1\", \"kind\": \"ExecCredential\", "
                             "\"status\": {{\"token\": \"{}\"}}}}'\n",
                             runs.string(), local_.sandbox().admin_token()),
                 true);
  const auto ca = dir_.write("ca.crt", local_.sandbox().admin_config().tls.ca_pem);
  const auto config = dir_.write(
      "exec-config",
      testing::exec_plugin_kubeconfig(local_.sandbox().server_url(), plugin.string(), ca.string()));
  // No operator runs the job, so --wait gives up after 1s: create, then watch job and pods.
  RunResult r =
      run_submit(fmt::format("--kubeconfig {} submit tfjob --name once --image reg/tf:1 "
                             "--wait --timeout 1s -- python train.py",
                             config.string()));
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("tfjob.kubeflow.org/once created\n"));
  EXPECT_EQ(testing::TempDir::read(runs), "run\n");
}

TEST_F(SubmitTest, DryRunClientSendsNoRequestAndPrintsJson) {
  // Against a server where nothing listens: it must not need one.
  RunResult r = run_submit(
      "submit tfjob --name dry --image reg/tf:1 --dry-run=client -o json -s https://127.0.0.1:1 "
      "-- python train.py");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json job = parse_json(r);
  EXPECT_EQ(job["metadata"]["name"], "dry");
  RunResult sandboxed = trainctl("submit tfjob --name dry --image reg/tf:1 --dry-run=client");
  ASSERT_EQ(sandboxed.exit_code, 0) << sandboxed.err;
  EXPECT_THAT(sandboxed.out, HasSubstr("kind: TFJob"));
  EXPECT_FALSE(exists(kube::resources::job(api::JobKind::TFJob), "dry"));
}

TEST_F(SubmitTest, DryRunServerCreatesNothing) {
  RunResult r = trainctl("submit mpijob --name srv --image reg/hvd:1 --dry-run=server -- mpirun x");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json job = yaml_to_json(YAML::Load(r.out));
  EXPECT_EQ(job["metadata"]["name"], "srv");
  EXPECT_EQ(job["metadata"]["namespace"], "default");
  EXPECT_FALSE(exists(kube::resources::job(api::JobKind::MPIJob), "srv"));
}

TEST_F(SubmitTest, FileWithOneBadDocumentCreatesNothing) {
  const auto file = dir_.write("jobs.yaml", fmt::format(kTwoJobs, -2));
  RunResult r = trainctl("submit -f " + file.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, MatchesRegex(fmt::format("(.|\n)*{}:2[0-9]: spec\\.tfReplicaSpecs\\.Worker\\."
                                              "replicas: (.|\n)*",
                                              file.string())));
  EXPECT_FALSE(exists(kube::resources::job(api::JobKind::PyTorchJob), "first"));
  EXPECT_FALSE(exists(kube::resources::job(api::JobKind::TFJob), "second"));
}

TEST_F(SubmitTest, FileFromStdinCreatesEveryDocument) {
  RunResult r = trainctl("submit -f -", fmt::format(kTwoJobs, 2));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "pytorchjob.kubeflow.org/first created\ntfjob.kubeflow.org/second created\n");
  const json second = client().get(kube::resources::job(api::JobKind::TFJob), "default", "second");
  EXPECT_EQ(second["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 2);
  EXPECT_THAT(second["metadata"]["annotations"]["trainctl.io/spec-hash"].get<std::string>(),
              MatchesRegex("[0-9a-f]{64}"));
}

// What `list -o yaml` and `get -o yaml` print goes back in as kubectl create takes it: a List's
// items are jobs, a resourceVersion is dropped (the server refuses a create carrying one). Two
// documents of one job are refused before anything is sent (created concurrently, which one
// the server kept was chance).
TEST_F(SubmitTest, ListsAndGetOutputGoBackInAndAJobTwiceIsRefused) {
  ASSERT_EQ(trainctl("submit -f -", fmt::format(kTwoJobs, 2)).exit_code, 0);
  RunResult listed = trainctl("list -o yaml");
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  ASSERT_THAT(listed.out, HasSubstr("kind: List"));
  ASSERT_THAT(listed.out, HasSubstr("resourceVersion:"));
  RunResult got = trainctl("get second -o yaml");
  ASSERT_EQ(got.exit_code, 0) << got.err;
  ASSERT_EQ(trainctl("delete --all --wait").exit_code, 0);
  RunResult again = trainctl("submit -f -", listed.out);
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out,
            "pytorchjob.kubeflow.org/first created\ntfjob.kubeflow.org/second created\n");
  ASSERT_EQ(trainctl("delete second --wait").exit_code, 0);
  RunResult one = trainctl("submit -f -", got.out);
  EXPECT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(one.out, "tfjob.kubeflow.org/second created\n");

  const auto file = dir_.write(
      "twice.yaml", fmt::format(kTwoJobs, 2) + "---\n" + tfjob_yaml("second", "reg/tf:2"));
  RunResult twice = trainctl("submit -f " + file.string() + " --if-exists skip");
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_THAT(twice.err, MatchesRegex(fmt::format("trainctl: {0}:[0-9]+: TFJob \"second\" is "
                                                  "also at {0}:[0-9]+: each job once\n",
                                                  file.string())));
  const json second = client().get(kube::resources::job(api::JobKind::TFJob), "default", "second");
  EXPECT_EQ(
      second["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"],
      "reg/tf:1");  // nothing was sent
}

// -f DIR reads the directory's manifests as kubectl does (.yaml, .yml, .json; by name; not its
// subdirectories or other files); a file that cannot be read says why.
TEST_F(SubmitTest, AFileFlagNamingADirectoryReadsItsManifests) {
  dir_.write("jobs/b.yml", tfjob_yaml("second", "reg/tf:1"));
  dir_.write("jobs/a.yaml", tfjob_yaml("first", "reg/tf:1"));
  dir_.write("jobs/notes.txt", "not a manifest");
  dir_.write("jobs/old/c.yaml", tfjob_yaml("nested", "reg/tf:1"));
  RunResult r = trainctl("submit --dry-run=client -o name -f " + (dir_.path() / "jobs").string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "tfjob.kubeflow.org/first\ntfjob.kubeflow.org/second\n");

  const std::string missing = (dir_.path() / "missing.yaml").string();
  RunResult gone = trainctl("submit -f " + missing);
  EXPECT_EQ(gone.exit_code, 2);
  EXPECT_EQ(gone.err,
            "trainctl: " + missing + ": cannot read the file: No such file or directory\n");
}

// The server's warnings (here: fields its schema prunes, a typo among them) reach the user as
// kubectl prints them, each once, and the job is created as before.
TEST_F(SubmitTest, TheServersWarningsArePrintedOnceEach) {
  std::string job = tfjob_yaml("warned", "reg/tf:1");
  job.replace(job.find("spec:\n"), 6,
              "spec:\n  bogus: 1\n  runPolicy:\n    cleanPodPolicyy: All\n");
  RunResult r = trainctl("submit -f -", job);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "tfjob.kubeflow.org/warned created\n");
  EXPECT_EQ(r.err,
            "Warning: unknown field \"spec.bogus\"\n"
            "Warning: unknown field \"spec.runPolicy.cleanPodPolicyy\"\n");
}

TEST_F(SubmitTest, IfExistsFailSkipReplace) {
  const auto v1 = dir_.write("v1.yaml", fmt::format(kTwoJobs, 1));
  const auto v2 = dir_.write("v2.yaml", fmt::format(kTwoJobs, 4));
  ASSERT_EQ(trainctl("submit -f " + v1.string()).exit_code, 0);

  RunResult fail = trainctl("submit -f " + v2.string());
  EXPECT_EQ(fail.exit_code, 3);
  EXPECT_THAT(fail.err, HasSubstr("already exists"));

  RunResult skip = trainctl("submit --if-exists skip -f " + v2.string());
  EXPECT_EQ(skip.exit_code, 0) << skip.err;
  // The existing job differs from the file: it is kept, and not called "unchanged".
  EXPECT_THAT(skip.out,
              HasSubstr("tfjob.kubeflow.org/second skipped (already exists; kept as it is, not "
                        "compared)\n"));
  EXPECT_THAT(skip.out, Not(HasSubstr("unchanged")));
  EXPECT_EQ(client().get(kube::resources::job(api::JobKind::TFJob), "default",
                         "second")["spec"]["tfReplicaSpecs"]["Worker"]["replicas"],
            1);

  RunResult replace = trainctl("submit --if-exists replace -f " + v2.string());
  EXPECT_EQ(replace.exit_code, 0) << replace.err;
  EXPECT_THAT(replace.out, HasSubstr("tfjob.kubeflow.org/second replaced"));
  EXPECT_EQ(client().get(kube::resources::job(api::JobKind::TFJob), "default",
                         "second")["spec"]["tfReplicaSpecs"]["Worker"]["replicas"],
            4);
}

TEST_F(SubmitTest, IfExistsReplaceGivesUpWhenTheOldJobIsNotDeletedInTime) {
  ASSERT_EQ(trainctl("submit -f -", fmt::format(kTwoJobs, 1)).exit_code, 0);
  // A finalizer nobody removes keeps the existing job Terminating.
  json job = client().get(kube::resources::job(api::JobKind::TFJob), "default", "second");
  job["metadata"]["finalizers"] = {"example.com/hold"};
  client().update(kube::resources::job(api::JobKind::TFJob), "default", job);
  const auto file = dir_.write("v2.yaml", fmt::format(kTwoJobs, 4));
  RunResult r = trainctl("submit --if-exists replace --wait --timeout 1s -f " + file.string());
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("tfjob.kubeflow.org \"second\" deleted\n"));
  EXPECT_THAT(r.err, HasSubstr("--if-exists replace: timed out after 1s waiting for the existing "
                               "tfjob.kubeflow.org \"second\" and its pods to be deleted"));
  // Each job is written on its own: the other one was replaced, this one was not.
  EXPECT_THAT(r.out, HasSubstr("pytorchjob.kubeflow.org/first replaced\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("tfjob.kubeflow.org/second replaced")));
  EXPECT_THAT(r.err, HasSubstr("and its pods to be deleted; it was not created again"));
  const json live = client().get(kube::resources::job(api::JobKind::TFJob), "default", "second");
  EXPECT_EQ(live["metadata"]["uid"], job["metadata"]["uid"]);  // the old one, still Terminating
  EXPECT_TRUE(live["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ(live["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 1);
}

/// submit --if-exists replace --wait as a CI pipeline re-runs it, with `trainctl controller`
/// running the jobs on the sandbox's simulated nodes.
class SubmitReplaceRunTest : public SubmitTest {
 protected:
  void SetUp() override {
    SubmitTest::SetUp();
    controller_ = std::make_unique<testing::BackgroundCommand>(std::vector<std::string>{
        TRAINCTL_BINARY, "controller", "--kubeconfig", local_.sandbox().kubeconfig_path().string(),
        "--gang-scheduler", "none"});
  }

  /// The replica pods of job `name`, by pod name -> uid.
  std::map<std::string, std::string> pod_uids(const std::string& name) {
    const json pods =
        client().list_all(kube::resources::pods(), "default",
                          {.label_selector = "training.kubeflow.org/job-name=" + name});
    std::map<std::string, std::string> uids;
    for (const auto& pod : pods["items"])
      uids[pod["metadata"]["name"]] = pod["metadata"]["uid"];
    return uids;
  }

  std::unique_ptr<testing::BackgroundCommand> controller_;
};

constexpr const char* kCiJob = R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: ci
spec:
  runPolicy: {cleanPodPolicy: None}  # keep the pods, to compare them across runs
  tfReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: Never
      template:
        metadata:
          annotations: {"sandbox.trainctl.io/run-seconds": "1.2"}
        spec:
          containers:
          - name: tensorflow
            image: reg/tf:1
            command: [python, train.py]
)";

TEST_F(SubmitReplaceRunTest, ReplaceWithWaitRunsTheJobAgainAndReportsTheNewRun) {
  const auto file = dir_.write("ci.yaml", kCiJob);
  const auto report1 = dir_.path() / "run1.json";
  RunResult first = trainctl(fmt::format("submit -f {} --wait --timeout 60s --report {}",
                                         file.string(), report1.string()));
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err << controller_->output();
  const json old_job = client().get(kube::resources::job(api::JobKind::TFJob), "default", "ci");
  const auto old_pods = pod_uids("ci");
  ASSERT_EQ(old_pods.size(), 2u);

  const auto report2 = dir_.path() / "run2.json";
  const auto logs = dir_.path() / "logs";
  RunResult again =
      trainctl(fmt::format("submit -f {} --if-exists replace --wait --timeout 60s --report {} "
                           "--save-logs {}",
                           file.string(), report2.string(), logs.string()));
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err << controller_->output();
  EXPECT_THAT(again.out, HasSubstr("tfjob.kubeflow.org \"ci\" deleted\n"
                                   "tfjob.kubeflow.org/ci replaced\n"));
  EXPECT_THAT(again.out, MatchesRegex("(.|\n)*tfjob.kubeflow.org/ci Succeeded after [1-9][0-9]*s\n"
                                      "(.|\n)*"));

  // A new job, whose pods ran again.
  const json new_job = client().get(kube::resources::job(api::JobKind::TFJob), "default", "ci");
  EXPECT_NE(new_job["metadata"]["uid"], old_job["metadata"]["uid"]);
  const auto new_pods = pod_uids("ci");
  ASSERT_EQ(new_pods.size(), 2u);
  for (const auto& [pod, uid] : new_pods) {
    ASSERT_TRUE(old_pods.count(pod)) << pod;  // the same deterministic names ...
    EXPECT_NE(uid, old_pods.at(pod)) << pod;  // ... for new pods
  }
  EXPECT_EQ(testing::TempDir::read(logs / "ci" / "worker-0.log"),
            "+ python train.py\nstep 1/1.2\nexited with code 0\n");

  // The report is the new run's.
  const json r1 = json::parse(testing::TempDir::read(report1));
  const json r2 = json::parse(testing::TempDir::read(report2));
  EXPECT_EQ(r1["uid"], old_job["metadata"]["uid"]);
  EXPECT_EQ(r2["uid"], new_job["metadata"]["uid"]);
  EXPECT_EQ(r2["status"], "Succeeded");
  EXPECT_EQ(r2["completionTime"], new_job["status"]["completionTime"]);
  const auto end1 = api::parse_timestamp(r1["completionTime"].get<std::string>());
  const auto start2 = api::parse_timestamp(r2["startTime"].get<std::string>());
  const auto end2 = api::parse_timestamp(r2["completionTime"].get<std::string>());
  ASSERT_TRUE(end1 && start2 && end2) << r1 << r2;
  EXPECT_GE(*start2, *end1);
  EXPECT_GT(*end2, *end1);
}

/// A sandbox that records every request on jobs and queues, as an audit log would, and holds
/// each one for a moment so that requests sent together are seen together.
class SubmitRequestsTest : public SubmitTest {
 protected:
  SubmitRequestsTest()
      : SubmitTest([this](sandbox::SandboxOptions& options) {
          options.audit = [this](const sandbox::RequestAttributes& r) { record(r); };
        }) {}

  void record(const sandbox::RequestAttributes& r) {
    if (r.api_group != "kubeflow.org" && r.resource != "queues")
      return;
    const bool on_jobs = r.api_group == "kubeflow.org";  // the queue read goes beside them
    {
      std::lock_guard lock(mu_);
      requests_.push_back(r.verb + " " + r.resource + "/" + r.name);
      if (on_jobs)
        most_in_flight_ = std::max(most_in_flight_, ++in_flight_);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms_));
    std::lock_guard lock(mu_);
    if (on_jobs)
      --in_flight_;
  }

  /// The requests on jobs and queues, each "verb resource/name" (no name for a create).
  std::multiset<std::string> requests() {
    std::lock_guard lock(mu_);
    return {requests_.begin(), requests_.end()};
  }
  void clear() {
    std::lock_guard lock(mu_);
    requests_.clear();
  }

  std::mutex mu_;
  std::vector<std::string> requests_;
  int in_flight_ = 0;  // requests on jobs
  int most_in_flight_ = 0;
  int hold_ms_ = 0;
};

/// `count` TFJobs named job-00, job-01, ... as one YAML stream.
std::string tfjobs(int count) {
  std::string stream;
  for (int i = 0; i < count; ++i)
    stream += "---\n" + tfjob_yaml(fmt::format("job-{:02}", i), "reg/tf:1");
  return stream;
}

// Issue 17: one request per job (no GET before a create), at most 16 in flight, printed in the
// order of the input however the answers arrive.
TEST_F(SubmitRequestsTest, ManyJobsTakeOneCreateEachSentConcurrentlyAndPrintInInputOrder) {
  hold_ms_ = 50;
  RunResult r = trainctl("submit -f -", tfjobs(40));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string expected;
  for (int i = 0; i < 40; ++i)
    expected += fmt::format("tfjob.kubeflow.org/job-{:02} created\n", i);
  EXPECT_EQ(r.out, expected);
  // Nothing but the 40 creates, and one read of the queue they share (for its warning).
  std::multiset<std::string> expected_requests{"get queues/default"};
  for (int i = 0; i < 40; ++i)
    expected_requests.insert("create tfjobs/");
  EXPECT_EQ(requests(), expected_requests);
  EXPECT_GT(most_in_flight_, 1);
  EXPECT_LE(most_in_flight_, 16);
}

TEST_F(SubmitRequestsTest, IfExistsIsDecidedByTheCreatesAnswer) {
  ASSERT_EQ(trainctl("submit -f -", tfjobs(1)).exit_code, 0);
  clear();
  // skip: the existing job is read after its create's 409 (to print it and follow it); the new
  // one is only created.
  RunResult skip = trainctl("submit --if-exists skip -f -", tfjobs(2));
  ASSERT_EQ(skip.exit_code, 0) << skip.err;
  EXPECT_EQ(skip.out,
            "tfjob.kubeflow.org/job-00 skipped (already exists; kept as it is, not compared)\n"
            "tfjob.kubeflow.org/job-01 created\n");
  EXPECT_EQ(requests(), (std::multiset<std::string>{"create tfjobs/", "create tfjobs/",
                                                    "get tfjobs/job-00", "get queues/default"}));
  clear();
  // fail: every job is tried; the one that exists is the error (exit 3), the others are created.
  RunResult fail = trainctl("submit -f -", tfjobs(3));
  EXPECT_EQ(fail.exit_code, 3);
  EXPECT_EQ(fail.out, "tfjob.kubeflow.org/job-02 created\n");
  EXPECT_THAT(fail.err,
              HasSubstr("2 of 3 jobs failed:\n  tfjobs.kubeflow.org/v1 \"job-00\" already exists "
                        "in namespace default (use --if-exists skip or replace)\n  "
                        "tfjobs.kubeflow.org/v1 \"job-01\" already exists"));
  EXPECT_EQ(requests(), (std::multiset<std::string>{"create tfjobs/", "create tfjobs/",
                                                    "create tfjobs/", "get queues/default"}));
  EXPECT_TRUE(exists(kube::resources::job(api::JobKind::TFJob), "job-02"));
}

// A few jobs go over HTTP/1.1 connections of the command's own, without loading libcurl; more than
// 8 go as HTTP/2 streams of one connection (16 TLS handshakes cost more than loading libcurl).
TEST(SubmitTransportTest, AFewJobsSkipLibcurlAndManyLoadIt) {
  testing::LocalSandbox local;
  testing::install_training_crds(local.client());
  testing::TempDir dir;
  const auto jobs_file = [&](int n) {
    std::string text;
    for (int i = 0; i < n; ++i)
      text += fmt::format("---\n{}", tfjob_yaml(fmt::format("job-{}-{}", n, i), "reg/tf:2"));
    return dir.write(fmt::format("jobs-{}.yaml", n), text).string();
  };
  for (const int n : {1, 8, 9}) {
    const RunResult r = testing::run_clean(std::string("LD_DEBUG=libs ") + TRAINCTL_BINARY,
                                           fmt::format("submit -f {} --kubeconfig {}", jobs_file(n),
                                                       local.sandbox().kubeconfig_path().string()));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (n <= 8) {
      EXPECT_THAT(r.err, Not(HasSubstr("libcurl"))) << n;
      EXPECT_THAT(r.err, Not(HasSubstr("libssl"))) << n;  // OpenSSL is linked in
    } else {
      EXPECT_THAT(r.err, HasSubstr("calling init: /lib/x86_64-linux-gnu/libcurl.so.4"));
    }
    EXPECT_EQ(
        local.client().list(kube::resources::job(api::JobKind::TFJob), "default")["items"].size(),
        n == 1   ? 1u
        : n == 8 ? 9u
                 : 18u);
  }
}

TEST(SubmitWithoutCrdsTest, TellsToInstallWithExit3) {
  testing::LocalSandbox local;
  RunResult r =
      run_submit(fmt::format("submit tfjob --name x --image i --kubeconfig {} -- python t.py",
                             local.sandbox().kubeconfig_path().string()));
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.err, HasSubstr("run `trainctl install`"));
  EXPECT_THAT(r.err, HasSubstr("tfjobs"));
}

}  // namespace
}  // namespace trainctl
