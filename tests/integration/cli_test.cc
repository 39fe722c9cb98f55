// The trainctl binary, run as a user runs it: flags, kubeconfig files, output and exit codes.
#include <dlfcn.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sandbox/pki.h"
#include "tests/support/exec_kubeconfig.h"
#include "tests/support/https_test_server.h"
#include "tests/support/run_command.h"
#include "tests/support/scripted_server.h"
#include "tests/support/temp_dir.h"

namespace trainctl {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

/// A server URL where nothing listens.
constexpr const char* kNoServer = "https://127.0.0.1:1";

using RunResult = testing::CommandResult;

/// Runs trainctl with no KUBECONFIG and no home; `out` holds both streams, as a user sees them.
RunResult run_cli(const std::string& args, const std::string& env = "") {
  RunResult r = testing::run_command(
      fmt::format("env -u KUBECONFIG HOME=/nonexistent {} {} {}", env, TRAINCTL_BINARY, args));
  r.out += r.err;
  return r;
}

class CliTest : public ::testing::Test {
 protected:
  /// Writes a kubeconfig whose current context "test" (namespace team-a) reaches `server_url`
  /// with a bearer `token`, trusting the test CA; a second context "other" has no namespace.
  std::string kubeconfig_for(const std::string& server_url, const std::string& token) {
    dir_.write("ca.crt", testing::TestPki::shared().ca.cert_pem);
    const std::string yaml = fmt::format(R"(apiVersion: v1
kind: Config
current-context: test
clusters:
- name: local
  cluster:
    server: {}
    certificate-authority: ca.crt
users:
- name: tester
  user:
    token: {}
contexts:
- name: test
  context: {{cluster: local, user: tester, namespace: team-a}}
- name: other
  context: {{cluster: local, user: tester}}
)",
                                         server_url, token);
    return dir_.write("config", yaml).string();
  }

  /// Starts `server` answering GET /version (v1.31.2) to anyone.
  static void serve_version(testing::HttpsTestServer& server) {
    server.routes().Get("/version", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"gitVersion":"v1.31.2"})", "application/json");
    });
    server.start();
  }

  testing::TempDir dir_;
};

TEST_F(CliTest, VersionClientPrintsTheBuildVersion) {
  RunResult r = run_cli("version --client");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("Client Version: v0."));
}

/// The libraries the dynamic loader initialised for a run with LD_DEBUG=libs (its file names).
std::vector<std::string> initialised_libraries(const RunResult& r) {
  std::vector<std::string> libraries;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (const auto at = line.find("calling init: "); at != std::string::npos)
      libraries.push_back(std::filesystem::path(line.substr(at + 14)).filename().string());
  }
  return libraries;
}

// ARCHITECTURE.md "Start-up": libcurl is loaded on first use; OpenSSL and the C++ libraries are
// linked in.
TEST_F(CliTest, OfflineVerbsAndACommandThatConnectsLoadOnlyGlibcAndLibcurlOnlyThroughAProxy) {
  for (const char* args :
       {"version --client", "completion bash", "__complete submit --",
        "render tfjob --name m --image reg/tf:1 -- python t.py",
        "submit tfjob --name m --image reg/tf:1 --dry-run=client -- python t.py"}) {
    const RunResult r = run_cli(args, "LD_DEBUG=libs");
    ASSERT_EQ(r.exit_code, 0) << args << ": " << r.out;
    const std::vector<std::string> libraries = initialised_libraries(r);
    EXPECT_THAT(libraries, ::testing::Contains(HasSubstr("libc.so"))) << args;
    for (const char* absent : {"libssl", "libcrypto", "libcurl"})
      EXPECT_THAT(libraries, Not(::testing::Contains(HasSubstr(absent)))) << args;
#ifdef TRAINCTL_STATIC_CXX_BINARY
    for (const char* absent : {"libstdc++", "libyaml-cpp", "libfmt", "libgcc_s"})
      EXPECT_THAT(libraries, Not(::testing::Contains(HasSubstr(absent)))) << args;
#endif
  }
  testing::HttpsTestServer server;
  serve_version(server);
  const std::string config = kubeconfig_for(server.url(), "cli-token");
  const RunResult version = run_cli("version --kubeconfig " + config, "LD_DEBUG=libs");
  EXPECT_EQ(version.exit_code, 0) << version.out;
  EXPECT_THAT(version.out, HasSubstr("v1.31.2"));
  // Its requests go over HTTP/1.1 connections of its own (kube/direct_transport.h), with the
  // OpenSSL linked in...
  for (const char* absent : {"libssl", "libcrypto", "libcurl"}) {
    EXPECT_THAT(initialised_libraries(version), Not(::testing::Contains(HasSubstr(absent))))
        << version.out;
  }
  // ...unless the environment names a proxy: libcurl then decides, honouring no_proxy as well.
  const RunResult proxied =
      run_cli("version --kubeconfig " + config,
              "LD_DEBUG=libs HTTPS_PROXY=http://127.0.0.1:1 NO_PROXY=127.0.0.1");
  EXPECT_EQ(proxied.exit_code, 0) << proxied.out;
  EXPECT_THAT(proxied.out, HasSubstr("v1.31.2"));
  // (libcurl's TLS is its own shared OpenSSL)
  for (const char* loaded : {"libcurl.so.4", "libssl.so.3", "libcrypto.so.3"})
    EXPECT_THAT(initialised_libraries(proxied), ::testing::Contains(loaded)) << proxied.out;
}

#ifdef TRAINCTL_PRELOAD_JEMALLOC
/// /proc/PID/<file> of the server `sandbox up --detach --data-dir <data>` left running.
std::string sandbox_proc_file(const std::string& data, const std::string& file) {
  std::ifstream pid_file(data + "/sandbox.pid");
  int pid = 0;
  pid_file >> pid;
  std::ifstream in(fmt::format("/proc/{}/{}", pid, file));
  return std::string((std::istreambuf_iterator<char>(in)), {});
}
#endif

// ARCHITECTURE.md "Memory": commands allocate through glibc's malloc (set up before main,
// jemalloc cost each ~1 ms); `sandbox up` starts again on Debian's libjemalloc.so.2 with
// lib/malloc_conf.h's options, the environment's MALLOC_CONF after them, and so does the server
// it leaves running, still named trainctl.
TEST_F(CliTest, CommandsUseGlibcsMallocAndTheSandboxStartsAgainOnJemallocWithItsOptions) {
  const RunResult loaded = run_cli("version --client", "LD_DEBUG=libs");
  ASSERT_EQ(loaded.exit_code, 0) << loaded.out;
  EXPECT_THAT(initialised_libraries(loaded), Not(::testing::Contains(HasSubstr("jemalloc"))));
#ifndef TRAINCTL_PRELOAD_JEMALLOC
  GTEST_SKIP() << "built without jemalloc (-DTRAINCTL_JEMALLOC=OFF, or sanitizers)";
#else
  const std::string data = (dir_.path() / "sandbox").string();
  const RunResult up =
      run_cli("sandbox up --detach --port 0 --data-dir " + data, "MALLOC_CONF=stats_print:true");
  ASSERT_EQ(up.exit_code, 0) << up.out;
  EXPECT_THAT(up.out, HasSubstr("jemalloc statistics"));  // printed as `up` exits
  for (const char* option : {R"(opt.thp: "always")", R"(opt.metadata_thp: "disabled")",
                             "opt.narenas: 1", "opt.dirty_decay_ms: 1000", "opt.stats_print: true"})
    EXPECT_THAT(up.out, HasSubstr(option));
  EXPECT_THAT(sandbox_proc_file(data, "maps"), HasSubstr("libjemalloc.so.2"));
  EXPECT_EQ(sandbox_proc_file(data, "comm"), "trainctl\n");  // ps and pkill find it by name
  EXPECT_EQ(run_cli("sandbox down --data-dir " + data).exit_code, 0);
#endif
}

// Where libjemalloc.so.2 is not beside glibc (here: glibc copied to a directory of its own, found
// first through LD_LIBRARY_PATH), `sandbox up` says so and runs on glibc's malloc.
TEST_F(CliTest, WithoutLibjemallocTheSandboxWarnsAndRunsOnGlibcsMalloc) {
#ifndef TRAINCTL_PRELOAD_JEMALLOC
  GTEST_SKIP() << "built without jemalloc (-DTRAINCTL_JEMALLOC=OFF, or sanitizers)";
#else
  Dl_info glibc{};
  ASSERT_NE(::dladdr(reinterpret_cast<void*>(&::getpid), &glibc), 0);
  const std::filesystem::path libraries = dir_.path() / "lib";
  std::filesystem::create_directories(libraries);
  for (const char* name : {"libc.so.6", "libm.so.6"}) {
    std::filesystem::copy_file(std::filesystem::path(glibc.dli_fname).parent_path() / name,
                               libraries / name);
  }
  const std::string data = (dir_.path() / "sandbox").string();
  const RunResult up = run_cli("sandbox up --detach --port 0 --data-dir " + data,
                               "LD_LIBRARY_PATH=" + libraries.string());
  ASSERT_EQ(up.exit_code, 0) << up.out;
  EXPECT_THAT(up.out, HasSubstr("trainctl: warning: libjemalloc.so.2 is not installed (Debian's "
                                "libjemalloc2): allocating through glibc's malloc"));
  const std::string mapped = sandbox_proc_file(data, "maps");
  EXPECT_THAT(mapped, Not(HasSubstr("jemalloc")));
  EXPECT_THAT(mapped, HasSubstr(libraries.string() + "/libc.so.6"));
  EXPECT_EQ(run_cli("sandbox down --data-dir " + data).exit_code, 0);
#endif
}

// Every flag that takes a duration says so in its help (CLI11's default for a string is TEXT).
TEST_F(CliTest, DurationFlagsShowDurationInTheirHelp) {
  for (const auto& [command, flag] :
       std::vector<std::pair<std::string, std::string>>{{"--help", "--request-timeout"},
                                                        {"delete --help", "--timeout"},
                                                        {"wait --help", "--timeout"},
                                                        {"logs --help", "--since"},
                                                        {"install --help", "--timeout"},
                                                        {"submit tfjob --help", "--timeout"}}) {
    const RunResult r = run_cli(command);
    ASSERT_EQ(r.exit_code, 0) << command << ": " << r.err;
    EXPECT_THAT(r.out, HasSubstr(flag + " DURATION")) << command;
    EXPECT_THAT(r.out, Not(HasSubstr(flag + " TEXT"))) << command;
  }
}

TEST_F(CliTest, UnknownFlagIsAUsageErrorWithExitCode2) {
  RunResult r = run_cli("version --no-such-flag");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("no-such-flag"));
}

TEST_F(CliTest, AMistypedVerbOrFlagSaysWhatWasMeant) {
  const struct {
    const char* args;
    const char* message;
  } cases[] = {
      {"sumbit", "trainctl: unknown command \"sumbit\"; did you mean \"submit\"?\n"},
      // kubectl's verb, as cobra's SuggestFor does
      {"describe mnist", "trainctl: unknown command \"describe\"; did you mean \"get\"?\n"},
      {"queue craete team-a",
       "trainctl: unknown command \"craete\" for \"trainctl queue\"; did you mean "
       "\"create\"?\n"},
      {"frobnicate", "trainctl: unknown command \"frobnicate\"\n"},
      {"submit pytorchjob --imag x -- true",
       "trainctl: unknown flag \"--imag\" for \"trainctl submit pytorchjob\"; did you mean "
       "\"--image\"?\n"},
      // a name before "--" as kubectl create job takes it: not the command's first word
      {"submit tfjob mnist --image x -- python train.py",
       "trainctl: unexpected argument \"mnist\" before \"--\": the job's command comes after "
       "\"--\" alone (a job is named with --name)\n"},
      {"render pytorchjob mnist --image x -- sh -c 'echo hi'",
       "trainctl: unexpected argument \"mnist\" before \"--\": the job's command comes after "
       "\"--\" alone (a job is named with --name)\n"},
      // the global flags are the verb's, too
      {"list --namespce=x",
       "trainctl: unknown flag \"--namespce\" for \"trainctl list\"; did you mean "
       "\"--namespace\"?\n"},
  };
  for (const auto& c : cases) {
    RunResult r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.args;
  }
}

// A command line that starts with a verb is parsed with that verb's commands only; what it prints
// on a mistake or for --help is still the whole tree's.
TEST_F(CliTest, AVerbBuiltAloneReportsMistakesAndHelpAsTheWholeTree) {
  RunResult help = run_cli("submit tfjob --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_EQ(help.out, run_cli("help submit tfjob").out);
  EXPECT_THAT(help.out, HasSubstr("--ps"));
  EXPECT_THAT(help.out, HasSubstr("--worker-image"));
  const struct {
    const char* args;
    const char* err;
  } cases[] = {
      {"render pytorchjob --image x --bogus -- true",
       "trainctl: unknown flag \"--bogus\" for \"trainctl render pytorchjob\"\n"
       "See 'trainctl render pytorchjob --help' for usage.\n"},
      {"render tfjob --workers abc --image x",
       "trainctl: --workers: \"abc\" is not an integer\n"
       "See 'trainctl render tfjob --help' for usage.\n"},
      {"submit tfjobb",
       "trainctl: unknown command \"tfjobb\" for \"trainctl submit\"; did you mean "
       "\"tfjob\"?\nSee 'trainctl submit --help' for usage.\n"},
      {"completion tcsh", "trainctl: completion: unknown shell \"tcsh\": use bash, zsh or fish\n"},
  };
  for (const auto& c : cases) {
    RunResult r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args;
    EXPECT_EQ(r.err, c.err) << c.args;
  }
  RunResult group = run_cli("render");  // a verb that needs a subcommand shows its help
  EXPECT_EQ(group.exit_code, 0);
  EXPECT_EQ(group.out, run_cli("help render").out);
}

TEST_F(CliTest, BareTrainctlAndHelpPrintHelp) {
  RunResult bare = run_cli("");
  EXPECT_EQ(bare.exit_code, 0);  // as bare kubectl
  EXPECT_THAT(bare.out, HasSubstr("Usage: trainctl [OPTIONS] SUBCOMMAND"));
  EXPECT_THAT(bare.out, HasSubstr("submit"));
  RunResult help = run_cli("help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_EQ(help.out, bare.out);
  RunResult verb = run_cli("help queue create");
  EXPECT_EQ(verb.exit_code, 0);
  EXPECT_THAT(verb.out, HasSubstr("Usage: trainctl queue create [OPTIONS] name"));
  EXPECT_EQ(verb.out, run_cli("queue create --help").out);
  RunResult group = run_cli("queue");
  EXPECT_EQ(group.exit_code, 0);
  EXPECT_THAT(group.out, HasSubstr("Usage: trainctl queue [OPTIONS] SUBCOMMAND"));
  RunResult unknown = run_cli("help sumbit");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("trainctl: unknown command \"sumbit\"; did you mean "
                                     "\"submit\"?"));
}

// -o wide is offered where it changes or equals a table, and refused where there is no table.
TEST_F(CliTest, OutputFormatsAreTheOnesTheHelpNames) {
  EXPECT_THAT(run_cli("get --help").out, HasSubstr("json, yaml, name, or wide (the same as the"));
  for (const char* args : {"version --client -o wide", "version --client -o name"}) {
    RunResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_EQ(r.err, "trainctl: version prints -o json or yaml\n") << args;
  }
  EXPECT_EQ(run_cli("version --client -o yaml").exit_code, 0);
}

TEST_F(CliTest, EveryUsageErrorStartsWithTrainctl) {
  for (const char* args : {"get a b", "list --queue", "version --no-such-flag", "list --kind x"}) {
    RunResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_TRUE(r.err.starts_with("trainctl: ")) << args << ": " << r.err;
  }
}

TEST_F(CliTest, VersionReportsTheServerThroughKubeconfigWithABearerToken) {
  testing::HttpsTestServer server;
  server.routes().Get("/version", [](const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Authorization") != "Bearer cli-token") {
      res.status = 401;
      return;
    }
    res.set_content(R"({"gitVersion":"v1.31.2"})", "application/json");
  });
  server.start();
  const std::string config = kubeconfig_for(server.url(), "cli-token");
  RunResult r = run_cli("version --kubeconfig " + config);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Server Version: v1.31.2"));

  RunResult json = run_cli("version -o json", "KUBECONFIG=" + config);
  EXPECT_THAT(json.out, HasSubstr("\"gitVersion\": \"v1.31.2\""));
}

// The second command resumes the TLS session the first was given, kept under --cache-dir (or
// KUBECACHEDIR); `--cache-dir=` keeps none, as the controller does unless told.
TEST_F(CliTest, ACommandResumesTheTlsSessionThePreviousOneKeptInTheCacheDirectory) {
  testing::HttpsTestServer server;
  serve_version(server);
  const std::string config = kubeconfig_for(server.url(), "cli-token");
  const std::filesystem::path cache = dir_.path() / "cache";
  const std::filesystem::path sessions = cache / "trainctl" / "tls-sessions";
  const auto resumed = [&](const std::string& args, const std::string& env = "") {
    RunResult r = run_cli("version --kubeconfig " + config + " " + args, env);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return server.requests().back().tls_resumed;
  };
  EXPECT_FALSE(resumed("--cache-dir " + cache.string()));
  ASSERT_TRUE(std::filesystem::is_directory(sessions));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(sessions), {}), 1);
  EXPECT_TRUE(resumed("--cache-dir " + cache.string()));
  EXPECT_TRUE(resumed("", "KUBECACHEDIR=" + cache.string()));
  EXPECT_FALSE(resumed("--cache-dir=", "KUBECACHEDIR=" + cache.string()));
  EXPECT_FALSE(resumed(""));  // no KUBECACHEDIR and no home: nothing kept, nothing resumed
}

TEST_F(CliTest, VerbosityLogsEachRequestAndNeverTheToken) {
  testing::HttpsTestServer server;
  serve_version(server);
  const std::string config = kubeconfig_for(server.url(), "very-secret-token");
  RunResult quiet = run_cli("version --kubeconfig " + config);
  EXPECT_THAT(quiet.out, Not(HasSubstr("GET ")));
  for (const char* level : {"-v 6", "-v=6", "--v=6"}) {
    RunResult r = run_cli(fmt::format("version {} --kubeconfig {}", level, config));
    EXPECT_EQ(r.exit_code, 0) << level << r.out;
    EXPECT_THAT(r.err, ContainsRegex(fmt::format("(^|\n)GET {}/version 200 OK in [0-9]+ "
                                                 "milliseconds\n",
                                                 server.url())))
        << level;
    EXPECT_THAT(r.err, Not(HasSubstr("Request Headers"))) << level;
  }
  RunResult loud = run_cli("version -v 9 --kubeconfig " + config);
  EXPECT_EQ(loud.exit_code, 0) << loud.out;
  EXPECT_THAT(loud.err, HasSubstr("Request Headers:\n"));
  EXPECT_THAT(loud.err, HasSubstr("    Authorization: Bearer <masked>\n"));
  EXPECT_THAT(loud.err, HasSubstr("Response Headers:\n"));
  EXPECT_THAT(loud.out, Not(HasSubstr("very-secret-token")));  // out holds stderr too

  RunResult down = run_cli(fmt::format("version -v 6 -s {} --token very-secret-token", kNoServer));
  EXPECT_THAT(down.err,
              ContainsRegex("GET https://127.0.0.1:1/version failed in [0-9]+ milliseconds: "));
  EXPECT_THAT(down.out, Not(HasSubstr("very-secret-token")));
}

// The three job kinds are asked for at once, not one after another: pipelined on one connection
// (streams of one HTTP/2 connection where the server speaks it), so the server here has read all
// three requests before it answers the first. One connection per command.
TEST_F(CliTest, ListAndGetAskForTheThreeJobKindsAtOnce) {
  const std::string empty = testing::ScriptedServer::json_response(
      200, R"({"kind":"List","metadata":{"resourceVersion":"1"},"items":[]})");
  const std::string missing = testing::ScriptedServer::json_response(
      404,
      R"({"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404})");
  testing::ScriptedServer server({{"<read>", "<read>", "<read>", empty, empty, empty},
                                  {"<read>", "<read>", "<read>", missing, missing, missing}});
  const std::string config = kubeconfig_for(server.url(), "cli-token");

  RunResult list = run_cli("list -n default --request-timeout 5s --kubeconfig " + config);
  EXPECT_EQ(list.exit_code, 0) << list.out;
  EXPECT_THAT(list.out, HasSubstr("No jobs found in default namespace."));
  RunResult get = run_cli("get a -n default --request-timeout 5s --kubeconfig " + config);
  EXPECT_EQ(get.exit_code, 3) << get.out;
  EXPECT_THAT(get.out, HasSubstr("job \"a\" not found in namespace \"default\""));
  EXPECT_THAT(server.requests(),
              ::testing::UnorderedElementsAre(
                  "0 GET /apis/kubeflow.org/v1/namespaces/default/tfjobs HTTP/1.1",
                  "0 GET /apis/kubeflow.org/v1/namespaces/default/pytorchjobs HTTP/1.1",
                  "0 GET /apis/kubeflow.org/v2beta1/namespaces/default/mpijobs HTTP/1.1",
                  "1 GET /apis/kubeflow.org/v1/namespaces/default/tfjobs/a HTTP/1.1",
                  "1 GET /apis/kubeflow.org/v1/namespaces/default/pytorchjobs/a HTTP/1.1",
                  "1 GET /apis/kubeflow.org/v2beta1/namespaces/default/mpijobs/a HTTP/1.1"));
}

// With jobs to show, list then asks for both PodGroup types at once (their queues and phases):
// the server here has read both requests, on the same connection, before it answers either.
TEST_F(CliTest, ListAsksForBothPodGroupTypesAtOnce) {
  testing::ScriptedServer server(
      {{"<read>", "<read>", "<read>", "RESPOND", "RESPOND", "RESPOND", "<read>", "<read>",
        "RESPOND", "RESPOND"}},
      [](const std::string&, const std::string& target, const std::string&) {
        const bool tfjobs = target.find("/tfjobs") != std::string::npos;
        return testing::ScriptedServer::json_response(
            200,
            fmt::format(R"({{"kind":"List","metadata":{{"resourceVersion":"1"}},"items":[{}]}})",
                        tfjobs ? R"({"apiVersion":"kubeflow.org/v1","kind":"TFJob",)"
                                 R"("metadata":{"name":"a","namespace":"default"}})"
                               : ""));
      });
  const std::string config = kubeconfig_for(server.url(), "cli-token");
  RunResult list = run_cli("list -n default --request-timeout 5s --kubeconfig " + config);
  EXPECT_EQ(list.exit_code, 0) << list.out;
  EXPECT_THAT(list.out, HasSubstr("a "));
  const std::vector<std::string> requests = server.requests();
  ASSERT_EQ(requests.size(), 5u);
  EXPECT_THAT(std::vector(requests.begin() + 3, requests.end()),
              ::testing::UnorderedElementsAre(
                  "0 GET /apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups "
                  "HTTP/1.1",
                  "0 GET /apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups "
                  "HTTP/1.1"));
}

// submit reads the job's queue (for its "will not run" warning) while the job is being created,
// not after: the server here has read both requests, on one connection, before it answers either.
TEST_F(CliTest, SubmitReadsTheQueueWhileTheJobIsCreated) {
  testing::ScriptedServer server(
      {{"<read>", "<read>", "RESPOND", "RESPOND"}},
      [](const std::string& method, const std::string&, const std::string& body) {
        if (method == "POST")
          return testing::ScriptedServer::json_response(201, body);
        return testing::ScriptedServer::json_response(
            200,
            R"({"kind":"Queue","metadata":{"name":"small"},"spec":{"capability":{"cpu":"1"}}})");
      });
  const std::string config = kubeconfig_for(server.url(), "cli-token");
  const std::string job = dir_.write("job.yaml", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: big
  namespace: default
spec:
  runPolicy:
    schedulingPolicy:
      queue: small
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: tensorflow
            image: tf:2
            resources:
              requests:
                cpu: "1"
)")
                              .string();
  RunResult r = run_cli("submit -f " + job + " --request-timeout 5s --kubeconfig " + config);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("tfjob.kubeflow.org/big created"));
  EXPECT_THAT(r.err, HasSubstr("trainctl: warning: tfjob.kubeflow.org/big will not run: queue "
                               "\"small\" can never admit it: it needs cpu 2"));
  EXPECT_THAT(server.requests(),
              ::testing::UnorderedElementsAre(
                  "0 GET /apis/scheduling.volcano.sh/v1beta1/queues/small HTTP/1.1",
                  ::testing::StartsWith("0 POST /apis/kubeflow.org/v1/namespaces/default/tfjobs")));
}

// TLS is verified unless the kubeconfig or a flag turns it off: a server whose certificate another
// CA signed is refused with what to fix, and skipping the check works but warns on every command.
TEST_F(CliTest, AServerCertificateFromAnUnknownCaIsRefusedAndSkippingTheCheckWarns) {
  testing::HttpsTestServer server;
  serve_version(server);
  const std::string config = kubeconfig_for(server.url(), "cli-token");
  const std::string other_ca =
      dir_.write("other-ca.crt", sandbox::make_certificate_authority("some other CA").cert_pem)
          .string();

  RunResult refused =
      run_cli("version --kubeconfig " + config + " --certificate-authority " + other_ca);
  EXPECT_EQ(refused.exit_code, 3) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("the server's certificate is not trusted"));
  EXPECT_THAT(refused.out, HasSubstr("certificate-authority"));
  EXPECT_THAT(refused.out, Not(HasSubstr("v1.31.2")));
  EXPECT_THAT(refused.out, Not(HasSubstr("insecure-skip-tls-verify is set")));

  RunResult skipped = run_cli("version --insecure-skip-tls-verify -s " + server.url());
  EXPECT_EQ(skipped.exit_code, 0) << skipped.out;
  EXPECT_THAT(skipped.out, HasSubstr("Server Version: v1.31.2"));
  EXPECT_THAT(skipped.err, HasSubstr("trainctl: warning: insecure-skip-tls-verify is set: the "
                                     "server's certificate is not checked"));
}

// As kubectl ("specifying a root certificates file with the insecure flag is not allowed"): a CA
// and insecure-skip-tls-verify together are refused (exit 2, a config error) before any request,
// whether both are flags or both are in the kubeconfig. --insecure-skip-tls-verify alone replaces
// the kubeconfig's CA, as client-go's overrides do, so that works (with its warning).
TEST_F(CliTest, ACertificateAuthorityWithInsecureSkipTlsVerifyIsRefusedAsKubectlDoes) {
  testing::HttpsTestServer server;
  serve_version(server);
  const std::string config = kubeconfig_for(server.url(), "cli-token");
  const std::string ca = (dir_.path() / "ca.crt").string();
  const std::string refused =
      "insecure-skip-tls-verify cannot be combined with a certificate "
      "authority";

  RunResult flags = run_cli("list --insecure-skip-tls-verify --certificate-authority " + ca +
                            " -s " + server.url() + " --token t");
  EXPECT_EQ(flags.exit_code, 2) << flags.out;
  // Both flags: named as the flags (it named the kubeconfig's cluster, where neither was set).
  EXPECT_THAT(flags.out, HasSubstr("trainctl: --insecure-skip-tls-verify cannot be combined with "
                                   "--certificate-authority; drop one of them"));

  std::string yaml = testing::TempDir::read(config);
  yaml.replace(yaml.find("    certificate-authority: ca.crt\n"),
               std::string_view("    certificate-authority: ca.crt\n").size(),
               "    certificate-authority: ca.crt\n    insecure-skip-tls-verify: true\n");
  const std::string both = dir_.write("both", yaml).string();
  RunResult in_file = run_cli("list --kubeconfig " + both);
  EXPECT_EQ(in_file.exit_code, 2) << in_file.out;
  EXPECT_THAT(in_file.out, HasSubstr(refused));

  RunResult replaced = run_cli("version --insecure-skip-tls-verify --kubeconfig " + config);
  EXPECT_EQ(replaced.exit_code, 0) << replaced.out;
  EXPECT_THAT(replaced.out, HasSubstr("Server Version: v1.31.2"));
}

TEST_F(CliTest, ConfigViewRedactsTokens) {
  const std::string config = kubeconfig_for(kNoServer, "very-secret-token");
  RunResult r = run_cli("config view --kubeconfig " + config);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr("very-secret-token")));
  EXPECT_THAT(r.out, HasSubstr("REDACTED"));
  RunResult raw = run_cli("config view --raw --kubeconfig " + config);
  EXPECT_THAT(raw.out, HasSubstr("very-secret-token"));
}

TEST_F(CliTest, ConfigViewResolvedShowsNamespaceAndSource) {
  const std::string config = kubeconfig_for(kNoServer, "t");
  RunResult r = run_cli("config view --resolved --kubeconfig " + config);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("namespace: team-a"));
  EXPECT_THAT(r.out, HasSubstr("auth: bearer token"));
  EXPECT_THAT(r.out, HasSubstr(config));
  RunResult flag = run_cli("config view --resolved -n other-ns --kubeconfig " + config);
  EXPECT_THAT(flag.out, HasSubstr("namespace: other-ns"));
}

TEST_F(CliTest, GetContextsAndUseContextWriteTheRightFile) {
  const std::string config = kubeconfig_for(kNoServer, "t");
  RunResult list = run_cli("config get-contexts --kubeconfig " + config);
  EXPECT_EQ(list.exit_code, 0) << list.out;
  EXPECT_THAT(list.out, HasSubstr("*         test"));
  RunResult use = run_cli("config use-context other --kubeconfig " + config);
  EXPECT_EQ(use.exit_code, 0) << use.out;
  EXPECT_THAT(run_cli("config current-context --kubeconfig " + config).out, HasSubstr("other"));
  RunResult missing = run_cli("config use-context nope --kubeconfig " + config);
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.out, HasSubstr("nope"));
}

TEST_F(CliTest, MissingKubeconfigIsAConfigErrorNamingThePath) {
  RunResult r = run_cli("config view --resolved --kubeconfig /nonexistent/kubeconfig");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("/nonexistent/kubeconfig"));
}

TEST_F(CliTest, VersionSaysWhyTheServerIsUnreachable) {
  const std::string config = kubeconfig_for(kNoServer, "t");
  RunResult r = run_cli("version --kubeconfig " + config);
  // The client's version is printed, then why not the server's: a connection error, exit 3.
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.out, HasSubstr("Client Version: v"));
  EXPECT_THAT(r.out, HasSubstr("trainctl: server version unavailable: "));
}

// A credential plugin that fails is an authentication failure: exit code 3 (API or connection
// error), as for any server the user cannot reach; the kubeconfig itself was valid.
TEST_F(CliTest, FailingExecCredentialPluginExitsThree) {
  const std::string plugin =
      dir_.write("plugin.sh", "#!/bin/sh\necho 'no login' >&2\nexit 1\n", true).string();
  const std::string config =
      dir_.write("exec-config", testing::exec_plugin_kubeconfig(kNoServer, plugin)).string();
  RunResult r = run_cli("list --kubeconfig " + config);
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_THAT(r.out, HasSubstr("exec plugin " + plugin + ": failed with exit code 1"));
}

// ---- wait and submit --wait follow the job they started with (its uid) ----

/// A scripted API server with one TFJob "mnist" in namespace team-a that is deleted and created
/// again (another uid) under the waiting client: every watch ends at once with 410 Gone, so the
/// client learns of the job only by listing it, and the second LIST already shows the new job,
/// Succeeded. A client that does not compare uids takes the new job's status for the old one's.
class RecreatedJobServer {
 public:
  /// `exists`: the job is there from the start (for wait), else submit creates it.
  explicit RecreatedJobServer(bool exists) : created_(exists) {
    auto& routes = server_.routes();
    routes.Get("/apis/kubeflow.org/v1", [](const httplib::Request&, httplib::Response& res) {
      const nlohmann::json list = {
          {"kind", "APIResourceList"},
          {"groupVersion", "kubeflow.org/v1"},
          {"resources",
           {{{"name", "tfjobs"}, {"namespaced", true}, {"kind", "TFJob"}, {"verbs", {"get"}}}}}};
      res.set_content(list.dump(), "application/json");
    });
    routes.Get("/apis/kubeflow.org/v1/namespaces/team-a/tfjobs/mnist",
               [this](const httplib::Request&, httplib::Response& res) {
                 if (!created_) {
                   res.status = 404;
                   res.set_content(
                       status(404, "NotFound", "tfjobs.kubeflow.org \"mnist\" not found"),
                       "application/json");
                   return;
                 }
                 res.set_content(job("uid-old", "Running").dump(), "application/json");
               });
    routes.Post("/apis/kubeflow.org/v1/namespaces/team-a/tfjobs",
                [this](const httplib::Request&, httplib::Response& res) {
                  created_ = true;
                  res.status = 201;
                  res.set_content(job("uid-old", "Created").dump(), "application/json");
                });
    routes.Get("/apis/kubeflow.org/v1/namespaces/team-a/tfjobs", [this](const httplib::Request& req,
                                                                        httplib::Response& res) {
      if (req.has_param("watch")) {
        res.status = 410;
        res.set_content(status(410, "Expired", "too old resource version"), "application/json");
        return;
      }
      const bool first = lists_++ == 0;
      const nlohmann::json items =
          nlohmann::json::array({first ? job("uid-old", "Running") : job("uid-new", "Succeeded")});
      res.set_content(nlohmann::json{{"kind", "TFJobList"},
                                     {"apiVersion", "kubeflow.org/v1"},
                                     {"metadata", {{"resourceVersion", "7"}}},
                                     {"items", items}}
                          .dump(),
                      "application/json");
    });
    routes.Get("/api/v1/namespaces/team-a/pods", [](const httplib::Request& req,
                                                    httplib::Response& res) {
      if (req.has_param("watch"))  // no pods ever: the watch just ends
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      res.set_content(
          R"({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]})",
          "application/json");
    });
    server_.start();
  }

  std::string url() const { return server_.url(); }

 private:
  static std::string status(int code, const char* reason, const char* message) {
    return nlohmann::json{{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Failure"},
                          {"reason", reason}, {"message", message}, {"code", code}}
        .dump();
  }

  static nlohmann::json job(const std::string& uid, const std::string& condition) {
    return {{"apiVersion", "kubeflow.org/v1"},
            {"kind", "TFJob"},
            {"metadata",
             {{"name", "mnist"}, {"namespace", "team-a"}, {"uid", uid}, {"resourceVersion", "7"}}},
            {"spec", {{"tfReplicaSpecs", {{"Worker", {{"replicas", 1}}}}}}},
            {"status",
             {{"conditions",
               {{{"type", condition}, {"status", "True"}, {"reason", "TFJob" + condition}}}}}}};
  }

  std::atomic<bool> created_;
  std::atomic<int> lists_{0};
  testing::HttpsTestServer server_;  // last: stopped before what its handlers use goes
};

TEST_F(CliTest, WaitDoesNotTakeTheStatusOfAJobCreatedAgainUnderTheSameName) {
  RecreatedJobServer server(/*exists=*/true);
  const std::string config = kubeconfig_for(server.url(), "t");
  RunResult r =
      run_cli("wait mnist --kind tfjob --for=succeeded --timeout 10s --kubeconfig " + config);
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_THAT(r.out, HasSubstr("tfjob.kubeflow.org/mnist was deleted and created again (uid "
                               "uid-new, not uid-old)"));
  EXPECT_THAT(r.out, Not(HasSubstr("condition met")));
}

TEST_F(CliTest, SubmitWaitDoesNotTakeTheStatusOfAJobCreatedAgainUnderTheSameName) {
  RecreatedJobServer server(/*exists=*/false);
  const std::string config = kubeconfig_for(server.url(), "t");
  const std::string manifest = dir_.write("mnist.yaml", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: mnist}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec: {containers: [{name: tensorflow, image: tf:2}]}
)")
                                   .string();
  RunResult r =
      run_cli(fmt::format("submit -f {} --wait --timeout 10s --kubeconfig {}", manifest, config));
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_THAT(r.out, HasSubstr("tfjob.kubeflow.org/mnist created\n"));
  EXPECT_THAT(r.out, HasSubstr("tfjob.kubeflow.org/mnist was deleted before it finished, and a "
                               "job of that name was created again (uid uid-new, the submitted "
                               "one was uid-old)"));
  EXPECT_THAT(r.out, Not(HasSubstr("Succeeded")));
}

}  // namespace
}  // namespace trainctl
