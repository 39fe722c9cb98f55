// Man pages and shell completion, through the built binary: the checked-in copies are what the
// binary generates, the pages render cleanly, and bash completes verbs, flags, values and names
// from a sandbox and from kubeconfig files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/run_command.h"
#include "tests/support/sandbox_fixture.h"
#include "tests/support/temp_dir.h"

namespace trainctl::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Not;

const std::string kBinary = TRAINCTL_BINARY;
const fs::path kSourceDir = TRAINCTL_SOURCE_DIR;
constexpr const char* kRefresh =
    "build/cli/trainctl __docs --man-dir man --completion-dir completions";

std::string quote(const std::string& s) {
  std::string out = "'";
  for (const char c : s)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    out.push_back(line);
  return out;
}

/// The generated files of a man or completions directory, by name.
std::map<std::string, std::string> read_generated(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("trainctl") || name == "_trainctl")
      files[name] = TempDir::read(entry.path());
  }
  return files;
}

void expect_same_files(const fs::path& generated_dir, const fs::path& checked_in_dir) {
  const auto generated = read_generated(generated_dir);
  const auto checked_in = read_generated(checked_in_dir);
  for (const auto& [name, content] : generated) {
    const auto it = checked_in.find(name);
    EXPECT_TRUE(it != checked_in.end() && it->second == content)
        << checked_in_dir.filename().string() << "/" << name
        << " is missing or out of date; refresh the checked-in copies with: " << kRefresh;
  }
  for (const auto& [name, content] : checked_in) {
    EXPECT_TRUE(generated.contains(name))
        << checked_in_dir.filename().string() << "/" << name
        << " is no longer generated; refresh the checked-in copies with: " << kRefresh;
  }
}

/// A kubeconfig with contexts alpha and beta on a server nobody listens on.
constexpr const char* kOfflineKubeconfig = R"(apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: u
  user: {token: t}
contexts:
- name: alpha
  context: {cluster: c, user: u}
- name: beta
  context: {cluster: c, user: u, namespace: team-a}
current-context: alpha
)";

/// Runs the completion function of the bash script in a fresh bash, as bash would on TAB with
/// `words` typed (the last one under the cursor), and returns COMPREPLY.
class BashCompletion {
 public:
  explicit BashCompletion(std::string kubeconfig = "")
      : kubeconfig_(kubeconfig.empty() ? (home_.path() / "none").string() : kubeconfig) {}

  std::vector<std::string> complete(const std::vector<std::string>& words) const {
    std::string script = "source <(" + quote(kBinary) + " completion bash) || exit 9\n";
    script += "COMP_WORDS=(" + quote(kBinary);
    for (const auto& w : words)
      script += " " + quote(w);
    script += ")\nCOMP_CWORD=" + std::to_string(words.size()) + "\n";
    script +=
        "__trainctl_complete\nif (( ${#COMPREPLY[@]} )); then printf '%s\\n' \"${COMPREPLY[@]}\"; "
        "fi\n";
    const fs::path file = home_.write("complete.sh", script);
    const CommandResult r =
        run_command("env HOME=" + quote(home_.path().string()) +
                    " KUBECONFIG=" + quote(kubeconfig_) + " bash " + quote(file.string()));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    return lines(r.out);
  }

  const TempDir& home() const { return home_; }

 private:
  TempDir home_;
  std::string kubeconfig_;
};

TEST(DocsTest, CheckedInManPagesAndScriptsAreWhatTheBinaryGenerates) {
  TempDir dir;
  const CommandResult r =
      run_command(quote(kBinary) + " __docs --man-dir " + quote((dir.path() / "man").string()) +
                  " --completion-dir " + quote((dir.path() / "completions").string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir.path() / "man" / "trainctl-submit-tfjob.1"));
  expect_same_files(dir.path() / "man", kSourceDir / "man");
  expect_same_files(dir.path() / "completions", kSourceDir / "completions");
}

// As kubectl, each verb's help and man page show examples.
TEST(DocsTest, VerbsHaveExamplesInHelpAndManPage) {
  const CommandResult help = run_command(quote(kBinary) + " wait --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, ::testing::HasSubstr(
                            "Examples:\n  # Wait up to an hour for a job to succeed (exit 1 if it "
                            "fails, 4 on timeout)\n  trainctl wait mnist --for=succeeded"));
  // and the connection flags, which CLI11 would show only in `trainctl --help`
  EXPECT_THAT(help.out, ::testing::HasSubstr("Connection flags (as kubectl; see trainctl --help): "
                                             "--kubeconfig, --context, --cluster, --user, "
                                             "-n,--namespace, -s,--server"));
  // Every command that runs something; only the groups (and `help`) have no examples.
  const std::set<std::string> groups = {"trainctl.1",          "trainctl-config.1",
                                        "trainctl-queue.1",    "trainctl-sandbox.1",
                                        "trainctl-template.1", "trainctl-help.1"};
  int pages = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kSourceDir / "man")) {
    const std::string page = entry.path().filename().string();
    if (groups.contains(page))
      continue;
    ++pages;
    const std::string text = TempDir::read(entry.path());
    EXPECT_THAT(text, ::testing::HasSubstr(".SH EXAMPLES\n.nf\n")) << page;
    EXPECT_THAT(text, ::testing::HasSubstr(".SH GLOBAL FLAGS\n\\-\\-kubeconfig")) << page;
  }
  EXPECT_GT(pages, 25);
}

// An example's flags come before `--`: after it they are the job's command (`submit tfjob ...
// -- python train.py --dry-run=client` submitted the job, its command ending in the flag).
TEST(DocsTest, ExamplesPutTheCommandsFlagsBeforeTheDoubleDash) {
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kSourceDir / "man")) {
    const std::string text = TempDir::read(entry.path());
    const std::size_t examples = text.find(".SH EXAMPLES\n");
    if (examples == std::string::npos)
      continue;
    const std::string options = text.substr(0, examples);  // the page's own flags
    std::istringstream lines(text.substr(examples));
    for (std::string line; std::getline(lines, line);) {
      const std::size_t dashes = line.find(" \\-\\- ");
      if (!line.starts_with("trainctl ") || dashes == std::string::npos)
        continue;
      std::istringstream after(line.substr(dashes + 6));
      for (std::string word; after >> word;) {
        const std::string flag = word.substr(0, word.find('='));
        if (flag.starts_with("\\-")) {
          EXPECT_EQ(options.find("\\fB" + flag + "\\fR"), std::string::npos)
              << entry.path().filename() << ": " << line;
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 10);
}

TEST(DocsTest, ManPagesRenderWithoutWarnings) {
  if (run_command("command -v groff").exit_code != 0)
    GTEST_SKIP() << "groff is not installed";
  TempDir dir;
  ASSERT_EQ(
      run_command(quote(kBinary) + " __docs --man-dir " + quote(dir.path().string())).exit_code, 0);
  const CommandResult r = run_command("for f in " + quote(dir.path().string()) +
                                      "/*.1; do groff -man -Tutf8 -ww -z \"$f\" || echo \"$f\" "
                                      ">&2; done");
  EXPECT_EQ(r.err, "");
  const CommandResult page =
      run_command("groff -man -Tutf8 " + quote((dir.path() / "trainctl.1").string()));
  EXPECT_NE(page.out.find("Timeout while waiting"), std::string::npos);
}

TEST(DocsTest, BashAcceptsTheScript) {
  const CommandResult checked_in =
      run_command("bash -n " + quote((kSourceDir / "completions" / "trainctl.bash").string()));
  EXPECT_EQ(checked_in.exit_code, 0) << checked_in.err;
  const CommandResult generated = run_command(quote(kBinary) + " completion bash | bash -n");
  EXPECT_EQ(generated.exit_code, 0) << generated.err;
  EXPECT_EQ(run_command(quote(kBinary) + " completion tcsh").exit_code, 2);
}

TEST(DocsTest, BashCompletesVerbsFlagsAndValues) {
  const BashCompletion bash;
  const auto verbs = bash.complete({""});
  EXPECT_THAT(verbs, Contains("submit"));
  EXPECT_THAT(verbs, Contains("completion"));
  EXPECT_THAT(verbs, Not(Contains("__complete")));
  EXPECT_THAT(bash.complete({"sub"}), ElementsAre("submit"));
  EXPECT_THAT(bash.complete({"submit", ""}), ElementsAre("tfjob", "pytorchjob", "mpijob"));
  EXPECT_THAT(bash.complete({"list", "--all"}), ElementsAre("--all-namespaces"));
  EXPECT_THAT(bash.complete({"get", "--kube"}),
              ElementsAre("--kubeconfig", "--kube-api-qps", "--kube-api-burst"));
  EXPECT_THAT(bash.complete({"list", "-o", ""}), ElementsAre("wide", "json", "yaml", "name"));
  EXPECT_THAT(bash.complete({"get", "--output=y"}), ElementsAre("yaml"));
  EXPECT_THAT(bash.complete({"completion", ""}), ElementsAre("bash", "zsh", "fish"));
  EXPECT_THAT(bash.complete({"template", "show", ""}), Contains("pytorchjob"));
  // A file flag falls back to file names.
  bash.home().write("job.yaml", "");
  EXPECT_THAT(bash.complete({"submit", "-f", (bash.home().path() / "jo").string()}),
              ElementsAre((bash.home().path() / "job.yaml").string()));
}

TEST(DocsTest, BashCompletesJobQueueAndNamespaceNamesFromTheCluster) {
  LocalSandbox local;
  install_training_crds(local.client());
  local.client().create(
      kube::resources::namespaces(), "",
      {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "team-a"}}}});
  auto tfjob = [](const std::string& name) {
    nlohmann::json job = nlohmann::json::parse(R"({"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec":
        {"containers": [{"name": "tensorflow", "image": "busybox"}]}}}}}})");
    job["metadata"]["name"] = name;
    return job;
  };
  local.client().create(kube::resources::job(api::JobKind::TFJob), "default", tfjob("mnist"));
  local.client().create(kube::resources::job(api::JobKind::TFJob), "team-a", tfjob("bert"));
  local.client().create(kube::resources::queues(), "",
                        {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                         {"kind", "Queue"},
                         {"metadata", {{"name", "gpu-queue"}}},
                         {"spec", {{"weight", 1}}}});

  const std::string kubeconfig = local.sandbox().kubeconfig_path().string();
  const BashCompletion bash(kubeconfig);
  EXPECT_THAT(bash.complete({"get", ""}), ElementsAre("mnist"));
  EXPECT_THAT(bash.complete({"-n", "team-a", "delete", ""}), ElementsAre("bert"));
  EXPECT_THAT(bash.complete({"suspend", "--namespace", "team-a", "b"}), ElementsAre("bert"));
  EXPECT_THAT(bash.complete({"-n", "team"}), ElementsAre("team-a"));
  EXPECT_THAT(bash.complete({"list", "--queue", ""}), ElementsAre("gpu-queue"));

  // Without $KUBECONFIG, a --kubeconfig typed on the command line is honoured.
  const BashCompletion elsewhere;
  EXPECT_THAT(elsewhere.complete({"get", ""}), IsEmpty());
  EXPECT_THAT(elsewhere.complete({"--kubeconfig", kubeconfig, "get", ""}), ElementsAre("mnist"));
}

TEST(DocsTest, UnreachableClusterMeansNoCandidatesAndExitZero) {
  TempDir dir;
  const fs::path kubeconfig = dir.write("kubeconfig", kOfflineKubeconfig);
  const auto start = std::chrono::steady_clock::now();
  const CommandResult r = run_command(quote(kBinary) + " __complete -- --kubeconfig " +
                                      quote(kubeconfig.string()) + " get ''");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, ":4\n");
  EXPECT_EQ(r.err, "");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

TEST(DocsTest, BashCompletesContextsFromKubeconfigOffline) {
  TempDir dir;
  const std::string kubeconfig = dir.write("kubeconfig", kOfflineKubeconfig).string();
  const BashCompletion bash(kubeconfig);
  EXPECT_THAT(bash.complete({"--context", ""}), ElementsAre("alpha", "beta"));
  EXPECT_THAT(bash.complete({"config", "use-context", "b"}), ElementsAre("beta"));
  const BashCompletion flag;
  EXPECT_THAT(flag.complete({"get", "--kubeconfig", kubeconfig, "--context", "a"}),
              ElementsAre("alpha"));
}

}  // namespace
}  // namespace trainctl::testing
