#include "completer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace trainctl::cli {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Not;

/// A tree shaped like trainctl's: global connection flags, a verb with a job argument and
/// enumerated -o, a verb with subverbs and a trailing command, a hidden verb.
class CompleteTest : public ::testing::Test {
 protected:
  CompleteTest() {
    app_.add_option("--kubeconfig", s_, "Kubeconfig file");
    app_.add_option("--context", s_, "Context")->check(completes(ValueSource::Contexts));
    app_.add_option("-n,--namespace", s_, "Namespace")->check(completes(ValueSource::Namespaces));
    auto* get = app_.add_subcommand("get", "Show a job");
    get->add_option("job", s_, "The job")->check(completes(ValueSource::Jobs));
    get->add_option("-o,--output", s_, "Output format")->check(one_of({"json", "yaml", "wide"}));
    get->add_flag("--watch", b_, "Watch");
    get->add_option("--replica", s_, "Replica")->check(completes(ValueSource::Replicas));
    auto* submit = app_.add_subcommand("submit", "Submit a job");
    submit->add_option("-f,--filename", v_, "Manifest");
    auto* tf = submit->add_subcommand("tfjob", "A TFJob");
    tf->add_option("--queue", s_, "Queue")->check(completes(ValueSource::Queues));
    tf->add_option("command", v_, "Command");
    auto* tpl = app_.add_subcommand("template", "Templates");
    tpl->require_subcommand(1);
    tpl->add_subcommand("show", "Show one")
        ->add_option("NAME", s_, "Name")
        ->check(completes(ValueSource::Templates));
    app_.add_subcommand("__complete", "Hidden")->group("");
    root_ = describe(app_);
  }

  Completion run(const std::vector<std::string>& words) {
    return complete(root_, words,
                    [this](ValueSource source, const std::vector<std::string>& global_args,
                           const std::vector<std::string>& arguments) {
                      lookups_.emplace_back(source, global_args);
                      arguments_.push_back(arguments);
                      if (source == ValueSource::Jobs)
                        return std::vector<std::string>{"bert", "mnist", "mnist-2"};
                      return std::vector<std::string>{"team-a", "team-b"};
                    });
  }

  static std::vector<std::string> values(const Completion& c) {
    std::vector<std::string> out;
    for (const auto& candidate : c.candidates)
      out.push_back(candidate.value);
    return out;
  }

  CLI::App app_{"test", "trainctl"};
  std::string s_;
  std::vector<std::string> v_;
  bool b_ = false;
  CommandDoc root_;
  std::vector<std::pair<ValueSource, std::vector<std::string>>> lookups_;
  std::vector<std::vector<std::string>> arguments_;  // of each lookup
};

TEST_F(CompleteTest, VerbsWithDescriptionsButNotHiddenOnes) {
  const Completion c = run({""});
  EXPECT_THAT(values(c), ElementsAre("get", "submit", "template"));
  EXPECT_EQ(c.candidates.front().description, "Show a job");
  EXPECT_EQ(c.directive, kCompleteNoFileComp);
  EXPECT_THAT(values(run({"su"})), ElementsAre("submit"));
  EXPECT_THAT(values(run({"template", ""})), ElementsAre("show"));
}

TEST_F(CompleteTest, FlagsOfTheCommandAndItsParents) {
  EXPECT_THAT(values(run({"get", "--o"})), ElementsAre("--output"));
  EXPECT_THAT(values(run({"get", "--con"})), ElementsAre("--context"));
  EXPECT_THAT(values(run({"submit", "tfjob", "-"})), Contains("-f"));
  EXPECT_THAT(values(run({"submit", "tfjob", "-"})), Contains("--queue"));
  EXPECT_THAT(values(run({"get", "-"})), Not(Contains("--queue")));
}

TEST_F(CompleteTest, EnumeratedValuesAfterTheFlagOrItsEqualsSign) {
  const Completion c = run({"get", "-o", ""});
  EXPECT_THAT(values(c), ElementsAre("json", "yaml", "wide"));
  EXPECT_EQ(c.directive, kCompleteNoFileComp);
  EXPECT_THAT(values(run({"get", "--output=y"})), ElementsAre("--output=yaml"));
  EXPECT_THAT(lookups_, IsEmpty());
}

TEST_F(CompleteTest, JobNamesHonourTheGlobalFlagsTyped) {
  EXPECT_THAT(values(run({"--context", "prod", "get", "-n", "team-a", "--watch", "mn"})),
              ElementsAre("mnist", "mnist-2"));
  ASSERT_EQ(lookups_.size(), 1u);
  EXPECT_EQ(lookups_[0].first, ValueSource::Jobs);
  EXPECT_THAT(lookups_[0].second, ElementsAre("--context", "prod", "-n", "team-a"));
  // One job argument: nothing after it.
  EXPECT_THAT(values(run({"get", "bert", ""})), IsEmpty());
}

TEST_F(CompleteTest, DynamicFlagValues) {
  EXPECT_THAT(values(run({"-n", "team-"})), ElementsAre("team-a", "team-b"));
  EXPECT_EQ(lookups_.back().first, ValueSource::Namespaces);
  EXPECT_THAT(lookups_.back().second, IsEmpty());  // the flag being completed is not passed on
  run({"submit", "tfjob", "--queue", ""});
  EXPECT_EQ(lookups_.back().first, ValueSource::Queues);
  run({"template", "show", ""});
  EXPECT_EQ(lookups_.back().first, ValueSource::Templates);
  EXPECT_THAT(values(run({"--context=t"})), ElementsAre("--context=team-a", "--context=team-b"));
  EXPECT_EQ(lookups_.back().first, ValueSource::Contexts);
}

TEST_F(CompleteTest, LookupsSeeTheArgumentsTypedBeforeTheFlag) {
  const Completion c = run({"-n", "team-a", "get", "mnist", "--replica", ""});
  EXPECT_EQ(c.directive, kCompleteNoFileComp);
  EXPECT_EQ(lookups_.back().first, ValueSource::Replicas);
  EXPECT_THAT(arguments_.back(), ElementsAre("mnist"));
  // No job yet: nothing to look up in, but still no file names.
  EXPECT_EQ(run({"get", "--replica", ""}).directive, kCompleteNoFileComp);
  EXPECT_THAT(arguments_.back(), IsEmpty());
}

TEST_F(CompleteTest, FileNamesWhereNothingBetterIsKnown) {
  EXPECT_EQ(run({"--kubeconfig", ""}).directive, kCompleteDefault);
  EXPECT_EQ(run({"submit", "-f", "jo"}).directive, kCompleteDefault);
  EXPECT_EQ(run({"submit", "tfjob", "--", "python", ""}).directive, kCompleteDefault);
  EXPECT_EQ(run({"submit", "tfjob", ""}).directive, kCompleteDefault);
  EXPECT_EQ(run({"template", ""}).directive, kCompleteNoFileComp);
}

TEST(FormatCompletionTest, OneCandidatePerLineThenTheDirective) {
  EXPECT_EQ(format_completion({{{"get", "Show a\tjob"}, {"json", ""}}, kCompleteNoFileComp}),
            "get\tShow a job\njson\n:4\n");
  EXPECT_EQ(format_completion({}), ":0\n");
}

TEST(CompletionScriptTest, EveryScriptCallsTheHiddenVerb) {
  for (const auto& [file, script] : completion_files())
    EXPECT_NE(script.find("__complete --"), std::string::npos) << file;
  EXPECT_NE(completion_script(Shell::Bash).find("complete -F __trainctl_complete trainctl"),
            std::string::npos);
}

}  // namespace
}  // namespace trainctl::cli
