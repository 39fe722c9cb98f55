// trainctl completion bash|zsh|fish: the shell scripts; and the hidden verbs behind them:
// `__complete WORD...` (what the scripts ask) and `__docs` (writes man pages and scripts, to
// refresh the checked-in copies under man/ and completions/).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "app.h"
#include "commands.h"
#include "completer.h"
#include "docs.h"
#include "error.h"
#include "job_lookup.h"
#include "job_target.h"
#include "job_values.h"
#include "kube/kubeconfig.h"
#include "replicas.h"

namespace trainctl::cli {
namespace {

/// Completion must answer while the user waits at the prompt.
constexpr std::chrono::seconds kLookupTimeout{2};

std::vector<std::string> object_names(const nlohmann::json& list) {
  std::vector<std::string> names;
  for (const auto& item : list.value("items", nlohmann::json::array()))
    names.push_back(item["metadata"].value("name", ""));
  return names;
}

std::vector<std::string> cluster_values(ValueSource source, const GlobalFlags& flags,
                                        const std::vector<std::string>& arguments) {
  kube::RestConfig config = flags.rest_config();
  if (config.timeout.count() == 0 || config.timeout > kLookupTimeout)
    config.timeout = kLookupTimeout;
  kube::Client client(config);
  client.set_retry_policy({.max_retries = 0});
  switch (source) {
    case ValueSource::Jobs: {
      std::vector<std::string> names;
      for (const auto& job : list_jobs(client, config.default_namespace, "", std::nullopt))
        names.push_back(job.object["metadata"].value("name", ""));
      return names;
    }
    case ValueSource::Queues:
      return object_names(client.list_all(kube::resources::queues(), ""));
    case ValueSource::Namespaces:
      return object_names(client.list_all(kube::resources::namespaces(), ""));
    case ValueSource::Replicas: {
      if (arguments.empty())
        return {};
      const JobRef job = parse_job_ref(arguments.front(), std::nullopt);
      const auto pods = client.list_all(kube::resources::pods(), config.default_namespace,
                                        {.label_selector = replica_selector(job.name)});
      std::vector<std::string> names;
      for (const auto& pod : pods.value("items", nlohmann::json::array()))
        names.push_back(replica_display_name(pod));
      return names;
    }
    default:
      return {};
  }
}

/// Values from the kubeconfig, the template search path or the cluster, honouring the global
/// flags typed so far. Any failure means no candidates: completion never prints errors.
std::vector<std::string> lookup_values(ValueSource source,
                                       const std::vector<std::string>& global_args,
                                       const std::vector<std::string>& arguments) {
  try {
    GlobalFlags flags;
    CLI::App parser;
    add_global_flags(parser, flags);
    parser.allow_extras();
    std::vector<std::string> reversed(global_args.rbegin(), global_args.rend());
    parser.parse(reversed);
    std::vector<std::string> names;
    if (source == ValueSource::Contexts) {
      const auto config =
          kube::load_kubeconfig(flags.overrides, kube::ConfigEnvironment::from_process());
      for (const auto& [name, context] : config.contexts)
        names.push_back(name);
    } else if (source == ValueSource::Templates) {
      for (const auto& t : render::list_templates(template_search()))
        names.push_back(t.name);
    } else {
      names = cluster_values(source, flags, arguments);
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
  } catch (const std::exception&) {
    return {};
  }
}

void write_file(const std::filesystem::path& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  if (!out)
    throw Error(ErrorKind::Usage, fmt::format("cannot write {}", path.string()));
}

/// Writes every man page into `dir`, removing trainctl*.1 pages of commands that no longer exist.
void write_man_pages(CLI::App& app, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const auto pages = man_pages(describe(app));
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("trainctl") && name.ends_with(".1") && !pages.contains(name))
      std::filesystem::remove(entry.path());
  }
  for (const auto& [name, content] : pages)
    write_file(dir / name, content);
}

void write_completions(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  for (const auto& [name, content] : completion_files())
    write_file(dir / name, content);
}

struct CompletionOptions {
  std::string shell;

  void Run() const {
    static const std::map<std::string, Shell> kShells = {
        {"bash", Shell::Bash}, {"zsh", Shell::Zsh}, {"fish", Shell::Fish}};
    const auto it = kShells.find(shell);
    if (it == kShells.end())
      throw Error(ErrorKind::Usage,
                  fmt::format("completion: unknown shell {:?}: use bash, zsh or fish", shell));
    std::cout << completion_script(it->second);
  }
};

struct DocsOptions {
  std::filesystem::path man_dir;
  std::filesystem::path completion_dir;

  void Validate() const {
    if (man_dir.empty() && completion_dir.empty())
      throw Error(ErrorKind::Usage, "__docs: give --man-dir, --completion-dir or both");
  }

  void Run(CLI::App& app) const {
    if (!man_dir.empty())
      write_man_pages(app, man_dir);
    if (!completion_dir.empty())
      write_completions(completion_dir);
  }
};

}  // namespace

void add_completion_command(CLI::App& app, const GlobalFlags& flags) {
  auto completion = std::make_shared<CompletionOptions>();
  auto* cmd =
      app.add_subcommand("completion", "Print the shell completion script for bash, zsh or fish");
  cmd->footer(
      "Load it in the current shell with `source <(trainctl completion bash)` (zsh likewise; fish: "
      "`trainctl completion fish | source`). Packages install the scripts where each shell finds "
      "them. Job, queue, namespace, context, template and replica names are completed too.");
  cmd->add_option("shell", completion->shell, "The shell")
      ->required()
      ->check(one_of({"bash", "zsh", "fish"}));
  add_examples(*cmd, R"(source <(trainctl completion bash)
trainctl completion fish | source)");
  run_verb(*cmd, completion, flags);

  auto words = std::make_shared<std::vector<std::string>>();
  auto* complete_cmd = app.add_subcommand("__complete", "Complete the last word (for the scripts)");
  complete_cmd->group("");
  complete_cmd->add_option("words", *words, "The words after `trainctl`, the last one unfinished");
  complete_cmd->callback([words] {
    const Application tree = completion_tree(*words);
    // The verb under the cursor needs the verbs' names, not their flags and subcommands.
    const CommandDoc root = describe(*tree.app, words->size() > 1 ? SIZE_MAX : 1);
    std::cout << format_completion(complete(root, *words, lookup_values));
  });

  auto docs = std::make_shared<DocsOptions>();
  auto* docs_cmd = app.add_subcommand("__docs", "Write the man pages and completion scripts");
  docs_cmd->group("");
  docs_cmd->add_option("--man-dir", docs->man_dir, "Directory for trainctl*.1");
  docs_cmd->add_option("--completion-dir", docs->completion_dir,
                       "Directory for trainctl.bash, _trainctl and trainctl.fish");
  docs_cmd->callback([docs] {
    docs->Validate();
    docs->Run(*make_application().app);
  });
}

}  // namespace trainctl::cli
