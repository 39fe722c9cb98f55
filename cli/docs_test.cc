#include "docs.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "app.h"

namespace trainctl::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

/// A small tree with every kind of option the generators distinguish.
struct ToyApp {
  CLI::App app{"A toy", "toy"};
  std::string context, output, job, dry_run, timeout = "5m";
  std::vector<std::string> labels;
  bool all = false;

  ToyApp() {
    app.add_option("--context", context, "The context")
        ->group("Connection")
        ->check(completes(ValueSource::Contexts));
    auto* get = app.add_subcommand("get", "Show a job");
    get->alias("show");
    get->add_option("job", job, "The job")->required()->check(completes(ValueSource::Jobs));
    get->add_option("-o,--output", output, "Output format")->check(one_of({"json", "yaml"}));
    get->add_option("--label", labels, "A label (repeatable)");
    get->add_option("--dry-run", dry_run, "Dry run")->expected(0, 1)->default_str("client");
    get->add_option("--timeout", timeout, "How long")->capture_default_str();
    get->add_flag("--all", all, "Everything");
    auto* tpl = app.add_subcommand("template", "Templates");
    tpl->require_subcommand(1);
    tpl->add_subcommand("list", "List them");
    app.add_subcommand("__hidden", "Not for people")->group("");
  }
};

TEST(DescribeTest, ReadsNamesValuesSourcesAndDefaultsAndSkipsHiddenCommands) {
  ToyApp toy;
  const CommandDoc root = describe(toy.app);
  ASSERT_EQ(root.subcommands.size(), 2u);
  EXPECT_EQ(root.find_subcommand("__hidden"), nullptr);
  const CommandDoc* get = root.find_subcommand("show");
  ASSERT_NE(get, nullptr);
  EXPECT_EQ(get->command_line(), "toy get");
  EXPECT_EQ(get->page_name(), "toy-get");

  const OptionDoc* output = get->find_option("--output");
  ASSERT_NE(output, nullptr);
  EXPECT_THAT(output->names, ElementsAre("-o", "--output"));
  EXPECT_THAT(output->values, ElementsAre("json", "yaml"));
  EXPECT_EQ(output->value_name, "TEXT");
  EXPECT_EQ(get->options.front().names.front(), "-h");

  EXPECT_EQ(root.find_option("--context")->source, ValueSource::Contexts);
  EXPECT_EQ(root.find_option("--context")->group, "Connection");
  EXPECT_TRUE(get->find_option("--label")->repeatable);
  EXPECT_EQ(get->find_option("--timeout")->default_value, "5m");
  EXPECT_TRUE(get->find_option("--dry-run")->value_optional);
  EXPECT_EQ(get->find_option("--dry-run")->bare_value, "client");
  EXPECT_FALSE(get->find_option("--all")->takes_value());
  EXPECT_TRUE(root.find_subcommand("template")->needs_subcommand);

  const auto job = std::find_if(get->options.begin(), get->options.end(),
                                [](const OptionDoc& o) { return o.positional; });
  ASSERT_NE(job, get->options.end());
  EXPECT_THAT(job->names, ElementsAre("job"));
  EXPECT_EQ(job->source, ValueSource::Jobs);
  EXPECT_TRUE(job->required);
}

TEST(DescribeTest, AnnotationsDoNotRejectValues) {
  ToyApp toy;
  EXPECT_NO_THROW(toy.app.parse("get mnist -o other", false));
  EXPECT_EQ(toy.output, "other");
}

TEST(ManPagesTest, OnePagePerVisibleCommandWithEveryOption) {
  ToyApp toy;
  const auto pages = man_pages(describe(toy.app));
  std::vector<std::string> names;
  for (const auto& [name, page] : pages)
    names.push_back(name);
  EXPECT_THAT(names, ElementsAre("toy-get.1", "toy-template-list.1", "toy-template.1", "toy.1"));

  const std::string& get = pages.at("toy-get.1");
  EXPECT_THAT(get, HasSubstr(".TH TOY\\-GET 1"));
  EXPECT_THAT(get, HasSubstr("toy\\-get \\- Show a job\n"));
  EXPECT_THAT(get, HasSubstr(".B toy get\n[\\fIflags\\fR] \\fIJOB\\fR\n"));
  EXPECT_THAT(get, HasSubstr("\\fB\\-o\\fR, \\fB\\-\\-output\\fR=\\fITEXT\\fR\nOutput format. One "
                             "of: json, yaml.\n"));
  EXPECT_THAT(get, HasSubstr("How long. Default: 5m.\n"));
  EXPECT_THAT(get, HasSubstr("\\fB\\-\\-dry\\-run\\fR[=\\fITEXT\\fR]\nDry run. Given without a "
                             "value: client.\n"));
  EXPECT_THAT(get, HasSubstr("A label (repeatable). Repeatable.\n"));
  EXPECT_THAT(get, HasSubstr("Also called \\fBshow\\fR."));
  EXPECT_THAT(get, HasSubstr(".SH SEE ALSO\n\\fBtoy\\fR(1)\n"));

  const std::string& root = pages.at("toy.1");
  EXPECT_THAT(root,
              HasSubstr(".B toy template list\nList them. See \\fBtoy\\-template\\-list\\fR(1)."));
  EXPECT_THAT(root, HasSubstr(".SH EXIT STATUS"));
  EXPECT_THAT(root, Not(HasSubstr("hidden")));
}

TEST(ManPagesTest, TheRealTreeDocumentsEveryFlagOfEveryCommand) {
  Application application = make_application();
  const CommandDoc root = describe(*application.app);
  const auto pages = man_pages(root);
  ASSERT_TRUE(pages.contains("trainctl-submit-tfjob.1"));
  EXPECT_THAT(pages.at("trainctl.1"), HasSubstr("KUBECONFIG"));
  EXPECT_THAT(pages.at("trainctl.1"), HasSubstr("TRAINCTL_TEMPLATE_PATH"));
  std::vector<const CommandDoc*> todo{&root};
  while (!todo.empty()) {
    const CommandDoc* cmd = todo.back();
    todo.pop_back();
    const std::string& page = pages.at(cmd->page_name() + ".1");
    for (const auto& o : cmd->options) {
      std::string name = o.positional ? o.names.front() : o.names.back();
      if (o.positional)
        std::transform(name.begin(), name.end(), name.begin(), ::toupper);
      std::string escaped;
      for (char c : name)
        escaped += c == '-' ? std::string("\\-") : std::string(1, c);
      EXPECT_THAT(page, HasSubstr(escaped)) << cmd->page_name();
    }
    for (const auto& sub : cmd->subcommands)
      todo.push_back(&sub);
  }
}

}  // namespace
}  // namespace trainctl::cli
