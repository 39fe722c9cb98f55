#include "app.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "completer.h"
#include "docs.h"

namespace trainctl::cli {
namespace {

/// `trainctl queue create`, as usage lines name a command.
std::string path_of(const CLI::App& cmd) {
  const CLI::App* parent = cmd.get_parent();
  return parent == nullptr ? cmd.get_name() : path_of(*parent) + " " + cmd.get_name();
}

/// What `--help` prints for every command below `cmd` (hidden ones too), by command path.
void collect_help(const CLI::App& cmd, std::map<std::string, std::string>& help) {
  const std::string path = path_of(cmd);
  help[path] = cmd.get_formatter()->make_help(&cmd, path, CLI::AppFormatMode::Normal);
  for (const CLI::App* sub : cmd.get_subcommands([](const CLI::App*) { return true; }))
    collect_help(*sub, help);
}

/// Every name and alias the root of the whole tree answers to.
std::vector<std::string> verb_words(const CLI::App& root) {
  std::vector<std::string> words;
  for (const CLI::App* verb : root.get_subcommands([](const CLI::App*) { return true; })) {
    words.push_back(verb->get_name());
    for (const auto& alias : verb->get_aliases())
      words.push_back(alias);
  }
  return words;
}

TEST(VerbApplicationTest, EachVerbAloneHasTheHelpAndPagesOfTheWholeTree) {
  Application whole = make_application();
  std::map<std::string, std::string> whole_help;
  collect_help(*whole.app, whole_help);
  const auto whole_pages = man_pages(describe(*whole.app));
  const std::vector<std::string> words = verb_words(*whole.app);
  ASSERT_GT(words.size(), 15u);
  for (const std::string& word : words) {
    std::optional<Application> alone = make_verb_application(word);
    ASSERT_TRUE(alone) << word << " has no registration of its own: it builds every verb";
    EXPECT_THAT(verb_words(*alone->app), ::testing::Contains(word));
    std::map<std::string, std::string> help;
    collect_help(*alone->app, help);
    help.erase("trainctl");  // the root lists the one verb
    for (const auto& [path, text] : help) {
      ASSERT_TRUE(whole_help.contains(path)) << path;
      EXPECT_EQ(text, whole_help.at(path)) << path;
    }
    auto pages = man_pages(describe(*alone->app));
    pages.erase("trainctl.1");
    for (const auto& [name, page] : pages)
      EXPECT_EQ(page, whole_pages.at(name)) << name;
  }
}

TEST(VerbApplicationTest, SubmitTfjobAloneListsTheFlagsOfTheWholeTree) {
  Application whole = make_application();
  std::optional<Application> alone = make_verb_application("submit");
  ASSERT_TRUE(alone);
  const CommandDoc whole_doc = describe(*whole.app);
  const CommandDoc alone_doc = describe(*alone->app);
  const CommandDoc* want = whole_doc.find_subcommand("submit")->find_subcommand("tfjob");
  const CommandDoc* got = alone_doc.find_subcommand("submit")->find_subcommand("tfjob");
  ASSERT_NE(got, nullptr);
  ASSERT_EQ(got->options.size(), want->options.size());
  for (std::size_t i = 0; i < got->options.size(); ++i)
    EXPECT_EQ(got->options[i].names, want->options[i].names);
  EXPECT_NE(got->find_option("--ps"), nullptr);
  EXPECT_NE(got->find_option("--worker-gpus"), nullptr);
}

// __complete describes only the verb once the cursor is past it.
TEST(VerbApplicationTest, PastTheVerbItAloneCompletesAsTheWholeTree) {
  Application whole = make_application();
  const CommandDoc whole_doc = describe(*whole.app);
  const ValueLookup lookup = [](ValueSource, const std::vector<std::string>&,
                                const std::vector<std::string>&) {
    return std::vector<std::string>{"a", "b"};
  };
  for (const std::string& word : verb_words(*whole.app)) {
    ASSERT_TRUE(make_verb_application(word)) << word;
    for (const auto& rest :
         std::vector<std::vector<std::string>>{{""},
                                               {"-"},
                                               {"--"},
                                               {"--o"},
                                               {"-n", ""},
                                               {"x", ""},
                                               {"--", "x", ""},
                                               {"tf"},
                                               {"tfjob"},
                                               {"tfjob", "--w"},
                                               {"mpijob", "--", ""},
                                               {"--namespace", "x", "tfjob", ""}}) {
      std::vector<std::string> words{word};
      words.insert(words.end(), rest.begin(), rest.end());
      const Application alone = completion_tree(words);
      EXPECT_EQ(format_completion(complete(describe(*alone.app), words, lookup)),
                format_completion(complete(whole_doc, words, lookup)))
          << word << " " << rest.front();
    }
  }
}

TEST(VerbApplicationTest, TheJobKindAfterSubmitOrRenderAloneGetsTheFlagsOfTheWholeTree) {
  Application whole = make_application();
  std::map<std::string, std::string> whole_help;
  collect_help(*whole.app, whole_help);
  const CommandDoc whole_doc = describe(*whole.app);
  const ValueLookup lookup = [](ValueSource, const std::vector<std::string>&,
                                const std::vector<std::string>&) {
    return std::vector<std::string>{"a"};
  };
  for (const std::string verb : {"submit", "render"}) {
    for (const std::string kind : {"tfjob", "pytorchjob", "mpijob"}) {
      std::optional<Application> alone = make_verb_application(verb, kind);
      ASSERT_TRUE(alone);
      const std::string path = "trainctl " + verb + " " + kind;
      std::map<std::string, std::string> help;
      collect_help(*alone->app, help);
      EXPECT_EQ(help.at(path), whole_help.at(path));
      const CLI::App* verb_cmd = alone->app->get_subcommand(verb);
      for (const CLI::App* other : verb_cmd->get_subcommands({})) {
        if (other->get_name() == kind)
          continue;
        // unreachable once `kind` is entered: no flags but --help
        EXPECT_EQ(other->get_options().size(), 1u) << path << ": " << other->get_name();
      }
      const CommandDoc alone_doc = describe(*alone->app);
      for (const char* typed : {"", "-", "--w", "--restart-policy="}) {
        const std::vector<std::string> words{verb, kind, typed};
        EXPECT_EQ(format_completion(complete(alone_doc, words, lookup)),
                  format_completion(complete(whole_doc, words, lookup)))
            << path << " " << typed;
      }
    }
  }
}

// __complete describes one level of the tree for the verb under the cursor.
TEST(VerbApplicationTest, OneLevelCompletesTheVerbUnderTheCursorAsTheWholeTree) {
  Application whole = make_application();
  const CommandDoc all = describe(*whole.app);
  const CommandDoc one_level = describe(*whole.app, 1);
  EXPECT_TRUE(one_level.find_subcommand("submit")->options.empty());
  const ValueLookup lookup = [](ValueSource, const std::vector<std::string>&,
                                const std::vector<std::string>&) {
    return std::vector<std::string>{"a"};
  };
  for (const char* typed : {"", "s", "submit", "ls", "-", "--", "--n", "--namespace="}) {
    EXPECT_EQ(format_completion(complete(one_level, {typed}, lookup)),
              format_completion(complete(all, {typed}, lookup)))
        << typed;
    // What __complete builds for the verb word: the verbs it may begin, no job kind's flags.
    const Application verbs = completion_tree({typed});
    EXPECT_EQ(format_completion(complete(describe(*verbs.app, 1), {typed}, lookup)),
              format_completion(complete(all, {typed}, lookup)))
        << typed;
    const std::string_view word = typed;
    const bool all_verbs = word.empty() || word.starts_with('-');
    if (all_verbs)
      EXPECT_EQ(verbs.app->get_subcommands({}).size(), whole.app->get_subcommands({}).size());
    else
      EXPECT_LT(verbs.app->get_subcommands({}).size(), whole.app->get_subcommands({}).size())
          << typed;
    if (word == "ls") {
      ASSERT_EQ(verbs.app->get_subcommands({}).size(), 1u);
      EXPECT_EQ(verbs.app->get_subcommands({})[0]->get_name(), "list");
    }
    if (all_verbs || word == "s" || word == "submit") {
      const CLI::App* submit = verbs.app->get_subcommand("submit");
      EXPECT_EQ(submit->get_subcommand("tfjob")->get_options().size(), 1u) << typed;  // --help
    }
  }
  // Global flags before the verb: the whole tree.
  const std::vector<std::string> words = {"-n", "x", "submit", "tfjob", "--w"};
  EXPECT_EQ(format_completion(complete(describe(*completion_tree(words).app), words, lookup)),
            format_completion(complete(all, words, lookup)));
}

// `logs JOB --replica <TAB>` offers that job's replicas, never file names.
TEST(VerbApplicationTest, LogsReplicaCompletesTheJobsReplicas) {
  const std::vector<std::string> words = {"logs", "mnist", "--replica", "w"};
  std::vector<std::pair<ValueSource, std::vector<std::string>>> lookups;
  const ValueLookup lookup = [&](ValueSource source, const std::vector<std::string>&,
                                 const std::vector<std::string>& arguments) {
    lookups.emplace_back(source, arguments);
    return std::vector<std::string>{"chief-0", "worker-0", "worker-1"};
  };
  const Completion c = complete(describe(*completion_tree(words).app), words, lookup);
  EXPECT_EQ(format_completion(c), "worker-0\nworker-1\n:4\n");
  ASSERT_EQ(lookups.size(), 1u);
  EXPECT_EQ(lookups[0].first, ValueSource::Replicas);
  EXPECT_EQ(lookups[0].second, std::vector<std::string>{"mnist"});
}

TEST(VerbApplicationTest, AWordThatIsNoVerbBuildsNoTree) {
  for (const char* word : {"", "sumbit", "-n", "--help", "tfjob", "create"})
    EXPECT_FALSE(make_verb_application(word)) << word;
}

}  // namespace
}  // namespace trainctl::cli
