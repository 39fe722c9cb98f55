// The command tree as data, and the man pages generated from it.
#include "docs.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <ranges>
#include <set>
#include <sstream>

#include "text.h"
#include "trainctl/version.h"

namespace trainctl::cli {
namespace {

constexpr std::string_view kOneOf = "one-of";
/// Where add_examples starts the examples in a footer.
constexpr std::string_view kExamplesMarker = "Examples:\n";
constexpr std::string_view kCompletesPrefix = "completes:";

constexpr std::array<std::pair<ValueSource, std::string_view>, 6> kSourceNames{{
    {ValueSource::Jobs, "jobs"},
    {ValueSource::Queues, "queues"},
    {ValueSource::Namespaces, "namespaces"},
    {ValueSource::Contexts, "contexts"},
    {ValueSource::Templates, "templates"},
    {ValueSource::Replicas, "replicas"},
}};

std::string validator_name(ValueSource source) {
  for (const auto& [s, name] : kSourceNames) {
    if (s == source)
      return fmt::format("{}{}", kCompletesPrefix, name);
  }
  return {};
}

/// An option's validators. CLI11 2.1 finds one by name only by throwing when it is absent, and
/// describing the tree asked six names of every option: thousands of throws, 3 ms of each TAB.
const std::vector<CLI::Validator>& validators(const CLI::Option& opt) {
  struct Access : CLI::Option {
    using CLI::Option::validators_;
  };
  return opt.*(&Access::validators_);
}

const CLI::Validator* find_validator(const CLI::Option& opt, std::string_view name) {
  const auto& all = validators(opt);
  const auto it = std::find_if(all.begin(), all.end(),
                               [name](const CLI::Validator& v) { return v.get_name() == name; });
  return it == all.end() ? nullptr : &*it;
}

/// The values one_of() recorded, from its "{a,b,c}" description.
std::vector<std::string> allowed_values(const CLI::Option& opt) {
  const CLI::Validator* v = find_validator(opt, kOneOf);
  if (v == nullptr)
    return {};
  std::string list = v->get_description();
  list = list.substr(1, list.size() - 2);
  std::vector<std::string> values;
  std::stringstream in(list);
  for (std::string value; std::getline(in, value, ',');)
    values.push_back(value);
  return values;
}

std::optional<ValueSource> value_source(const CLI::Option& opt) {
  for (const auto& [source, name] : kSourceNames) {
    if (find_validator(opt, validator_name(source)) != nullptr)
      return source;
  }
  return std::nullopt;
}

OptionDoc describe_option(CLI::Option& opt) {
  OptionDoc doc;
  doc.positional = !opt.nonpositional();
  if (doc.positional) {
    doc.names.push_back(opt.get_name(true));
  } else {
    for (const auto& s : opt.get_snames())
      doc.names.push_back("-" + s);
    for (const auto& l : opt.get_lnames())
      doc.names.push_back("--" + l);
  }
  if (opt.get_type_size_max() > 0)
    doc.value_name = base_type_name(opt);
  doc.value_optional = doc.takes_value() && opt.get_expected_min() == 0;
  (doc.value_optional ? doc.bare_value : doc.default_value) = opt.get_default_str();
  doc.description = opt.get_description();
  doc.values = allowed_values(opt);
  doc.source = value_source(opt);
  doc.group = opt.get_group();
  doc.required = opt.get_required();
  doc.repeatable = doc.takes_value() && opt.get_items_expected_max() > 1;
  return doc;
}

CommandDoc describe_command(CLI::App& app, std::vector<std::string> path, std::size_t levels) {
  CommandDoc doc;
  doc.path = std::move(path);
  doc.description = app.get_description();
  doc.footer = app.get_footer();
  doc.aliases = app.get_aliases();
  doc.needs_subcommand = app.get_require_subcommand_min() > 0;
  if (levels == 0)
    return doc;
  for (CLI::Option* opt : app.get_options()) {
    if (!opt->get_group().empty())
      doc.options.push_back(describe_option(*opt));
  }
  const auto visible = [](CLI::App* sub) {
    return !sub->get_name().empty() && !sub->get_group().empty();
  };
  for (CLI::App* sub : app.get_subcommands(visible)) {
    std::vector<std::string> sub_path = doc.path;
    sub_path.push_back(sub->get_name());
    doc.subcommands.push_back(describe_command(*sub, std::move(sub_path), levels - 1));
  }
  return doc;
}

// --- roff -----------------------------------------------------------------------------------

/// Text safe to put on a roff line: backslashes and hyphens escaped, no leading control dot.
std::string roff(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '\\')
      out += "\\e";
    else if (c == '-')
      out += "\\-";
    else
      out += c;
  }
  if (!out.empty() && (out.front() == '.' || out.front() == '\''))
    out.insert(0, "\\&");
  return out;
}

/// A CLI11 description as a sentence: it ends with a full stop.
std::string sentence(std::string_view text) {
  std::string s(trim(text));
  if (!s.empty() && s.back() != '.')
    s += '.';
  return s;
}

std::string upper(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), ::toupper);
  return out;
}

/// `\fB\-o\fR, \fB\-\-output\fR=\fITEXT\fR`, or `\fIJOBS\fR...` for a positional.
std::string option_synopsis(const OptionDoc& o) {
  if (o.positional)
    return fmt::format("\\fI{}\\fR{}", roff(upper(o.names.front())), o.repeatable ? "..." : "");
  std::vector<std::string> names;
  for (const auto& n : o.names)
    names.push_back(fmt::format("\\fB{}\\fR", roff(n)));
  std::string text = fmt::format("{}", fmt::join(names, ", "));
  if (o.value_optional)
    text += fmt::format("[=\\fI{}\\fR]", roff(o.value_name));
  else if (o.takes_value())
    text += fmt::format("=\\fI{}\\fR", roff(o.value_name));
  return text;
}

std::string option_entry(const OptionDoc& o) {
  std::string text = fmt::format(".TP\n{}\n{}", option_synopsis(o), roff(sentence(o.description)));
  if (!o.values.empty())
    text += fmt::format(" One of: {}.", roff(fmt::format("{}", fmt::join(o.values, ", "))));
  if (!o.default_value.empty())
    text += fmt::format(" Default: {}.", roff(o.default_value));
  if (!o.bare_value.empty())
    text += fmt::format(" Given without a value: {}.", roff(o.bare_value));
  if (o.repeatable)
    text += " Repeatable.";
  if (o.required)
    text += " Required.";
  return text + '\n';
}

std::string title(std::string_view page, std::string_view name_line) {
  return fmt::format(".TH {} 1 \"\" \"trainctl {}\" \"User Commands\"\n.SH NAME\n{} \\- {}\n",
                     roff(upper(page)), kVersion, roff(page), roff(name_line));
}

/// `.SH heading` then the options, each group after the first under its own `.SS`.
std::string options_section(std::string_view heading, const std::vector<const OptionDoc*>& opts) {
  if (opts.empty())
    return {};
  std::vector<std::string> groups;
  for (const OptionDoc* o : opts) {
    if (std::find(groups.begin(), groups.end(), o->group) == groups.end())
      groups.push_back(o->group);
  }
  std::string text = fmt::format(".SH {}\n", heading);
  for (const auto& group : groups) {
    if (groups.size() > 1)
      text += fmt::format(".SS {}\n", roff(group));
    for (const OptionDoc* o : opts) {
      if (o->group == group)
        text += option_entry(*o);
    }
  }
  return text;
}

std::vector<const OptionDoc*> select(const CommandDoc& cmd, bool positional) {
  std::vector<const OptionDoc*> out;
  for (const auto& o : cmd.options) {
    if (o.positional == positional)
      out.push_back(&o);
  }
  return out;
}

/// Every command below `cmd`, depth first.
void collect(const CommandDoc& cmd, std::vector<const CommandDoc*>& out) {
  for (const auto& sub : cmd.subcommands) {
    out.push_back(&sub);
    collect(sub, out);
  }
}

std::string see_also(const std::vector<std::string>& pages) {
  std::vector<std::string> refs;
  for (const auto& p : pages)
    refs.push_back(fmt::format("\\fB{}\\fR(1)", roff(p)));
  return fmt::format(".SH SEE ALSO\n{}\n", fmt::join(refs, ",\n"));
}

std::string commands_section(const CommandDoc& cmd) {
  std::vector<const CommandDoc*> all;
  collect(cmd, all);
  if (all.empty())
    return {};
  std::string text = ".SH COMMANDS\n";
  for (const CommandDoc* sub : all) {
    text += fmt::format(".TP\n.B {}\n{} See \\fB{}\\fR(1).\n", roff(sub->command_line()),
                        roff(sentence(sub->description)), roff(sub->page_name()));
  }
  return text;
}

/// The prose of trainctl.1 that no flag carries: the sections after the options.
constexpr std::string_view kRootDescription = R"(.SH DESCRIPTION
trainctl submits and manages Kubeflow-compatible TFJobs, PyTorchJobs and MPIJobs through the
Kubernetes REST API, and runs the controller that reconciles them. It needs no kubectl, helm or Go
toolchain.
.PP
Every command takes the global flags below, before or after the command's name. Each command has
its own page, \fBtrainctl\-\fIcommand\fR(1), and prints its flags with \fB\-\-help\fR.
)";

constexpr std::string_view kRootTrailer = R"(.SH ENVIRONMENT
.TP
.B KUBECONFIG
Colon-separated kubeconfig files, merged: the first file to define a cluster, user or context
wins it, and the first current-context wins. Without it, \fI~/.kube/config\fR.
.TP
.B KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT, POD_NAMESPACE
In-cluster configuration, used when no kubeconfig file exists.
.TP
.B KUBECACHEDIR
The cache directory when \fB\-\-cache\-dir\fR is not given, as kubectl's; without it,
\fI~/.kube/cache\fR.
.TP
.B TRAINCTL_*
Template values: after TRAINCTL_, "__" separates levels and "_" words (camelCase), e.g.
TRAINCTL_PRIORITY_CLASS=high, TRAINCTL_WORKER__CPU=4. They override the repository's
\fI.trainctl.yaml\fR and the user's \fI~/.config/trainctl/config.yaml\fR, and are overridden by
\fB\-\-values\fR files, flags and \fB\-\-set\fR.
.TP
.B TRAINCTL_TEMPLATE_PATH
Colon-separated directories searched for job templates before \fI~/.config/trainctl/templates\fR
and the installed ones.
.TP
.B XDG_CONFIG_HOME, HOME
Where the user's configuration and templates are found.
.TP
.B NO_COLOR
When set, output is never coloured, even on a terminal.
.SH FILES
.TP
.I ~/.kube/config
The kubeconfig read when neither \fB\-\-kubeconfig\fR nor KUBECONFIG is given.
.TP
.I ~/.config/trainctl/config.yaml, .trainctl.yaml
User and repository defaults for template values.
.TP
.I ~/.kube/cache/trainctl/tls\-sessions
One TLS session per server, CA bundle and client certificate (mode 0600), so that the next
command resumes it instead of a full handshake; \fB\-\-cache\-dir ""\fR keeps none.
.TP
.I ~/.config/trainctl/templates, <prefix>/share/trainctl/templates
Job templates (NAME.yaml.mustache).
.TP
.I ~/.local/state/trainctl/sandbox
The sandbox's certificates, kubeconfig and log.
.SH EXIT STATUS
.TP
.B 0
Success; for commands that wait, the job Succeeded.
.TP
.B 1
The job Failed.
.TP
.B 2
Usage or validation error: bad flags, manifests, templates or kubeconfig.
.TP
.B 3
API or connection error: the server refused or could not be reached.
.TP
.B 4
Timeout while waiting.
)";

std::string root_page(const CommandDoc& root) {
  std::string text = title(root.path.front(), "distributed training jobs on Kubernetes");
  text += ".SH SYNOPSIS\n.B trainctl\n[\\fIglobal flags\\fR] \\fIcommand\\fR [\\fIflags\\fR]\n";
  text += kRootDescription;
  text += commands_section(root);
  text += options_section("GLOBAL FLAGS", select(root, false));
  text += kRootTrailer;
  std::vector<std::string> pages;
  std::vector<const CommandDoc*> all;
  collect(root, all);
  for (const CommandDoc* c : all)
    pages.push_back(c->page_name());
  pages.push_back("kubectl");
  return text + see_also(pages);
}

std::string synopsis(const CommandDoc& cmd) {
  std::string text = fmt::format(".SH SYNOPSIS\n.B {}\n", roff(cmd.command_line()));
  std::vector<std::string> parts;
  if (!select(cmd, false).empty())
    parts.push_back("[\\fIflags\\fR]");
  if (!cmd.subcommands.empty())
    parts.push_back(cmd.needs_subcommand ? "\\fIcommand\\fR" : "[\\fIcommand\\fR]");
  for (const OptionDoc* p : select(cmd, true)) {
    const std::string arg = option_synopsis(*p);
    parts.push_back(p->required ? arg : fmt::format("[{}]", arg));
  }
  return parts.empty() ? text : text + fmt::format("{}\n", fmt::join(parts, " "));
}

/// The EXAMPLES section: the lines add_examples put in the footer, verbatim.
std::string examples_section(std::string_view examples) {
  if (examples.empty())
    return {};
  std::string text = ".SH EXAMPLES\n.nf\n";
  for (const auto line : std::views::split(examples, '\n')) {
    const std::string_view l(line.begin(), line.end());
    text += fmt::format("{}\n", roff(l.starts_with("  ") ? l.substr(2) : l));
  }
  return text + ".fi\n";
}

std::string command_page(const CommandDoc& root, const CommandDoc& cmd) {
  std::string text = title(cmd.page_name(), cmd.description);
  text += synopsis(cmd);
  text += fmt::format(".SH DESCRIPTION\n{}\n", roff(sentence(cmd.description)));
  const std::size_t marker = cmd.footer.find(kExamplesMarker);
  std::string_view footer(cmd.footer);
  std::string_view examples;
  if (marker != std::string::npos) {
    examples = footer.substr(marker + kExamplesMarker.size());
    while (examples.ends_with('\n'))
      examples.remove_suffix(1);
    footer = trim(footer.substr(0, marker));
  }
  if (!footer.empty())
    text += fmt::format(".PP\n{}\n", roff(footer));
  if (!cmd.aliases.empty())
    text += fmt::format(".PP\nAlso called \\fB{}\\fR.\n",
                        roff(fmt::format("{}", fmt::join(cmd.aliases, ", "))));
  text += commands_section(cmd);
  text += options_section("ARGUMENTS", select(cmd, true));
  text += options_section("OPTIONS", select(cmd, false));
  std::vector<std::string> globals;
  for (const OptionDoc* o : select(root, false)) {
    if (o->names.back() != "--help")
      globals.push_back(o->names.back());
  }
  text += fmt::format(".SH GLOBAL FLAGS\n{}\nas described in \\fBtrainctl\\fR(1).\n",
                      roff(fmt::format("{}", fmt::join(globals, ", "))));
  text += examples_section(examples);
  text +=
      ".SH EXIT STATUS\n0 on success, 2 for usage and validation errors, 3 for API and "
      "connection errors; see \\fBtrainctl\\fR(1).\n";
  std::vector<std::string> pages{root.page_name()};
  const std::vector<std::string> parent_path(cmd.path.begin(), cmd.path.end() - 1);
  if (parent_path.size() > 1)
    pages.push_back(CommandDoc{.path = parent_path}.page_name());
  for (const auto& sub : cmd.subcommands)
    pages.push_back(sub.page_name());
  return text + see_also(pages);
}

}  // namespace

std::string base_type_name(const CLI::Option& opt) {
  const std::string full = opt.get_type_name();
  return full.substr(0, full.find(':'));
}

CLI::Validator one_of(const std::vector<std::string>& values) {
  return CLI::Validator([](std::string&) { return std::string(); },
                        fmt::format("{{{}}}", fmt::join(values, ",")), std::string(kOneOf));
}

void add_examples(CLI::App& cmd, std::string_view examples) {
  std::string footer = cmd.get_footer();
  if (!footer.empty())
    footer += "\n\n";
  std::string indented;
  for (const auto line : std::views::split(trim(examples), '\n'))
    indented += fmt::format("  {}\n", trim(std::string_view(line.begin(), line.end())));
  cmd.footer(footer + std::string(kExamplesMarker) + indented);
}

CLI::Validator completes(ValueSource source) {
  return CLI::Validator([](std::string&) { return std::string(); }, "", validator_name(source));
}

std::string CommandDoc::page_name() const {
  return fmt::format("{}", fmt::join(path, "-"));
}

std::string CommandDoc::command_line() const {
  return fmt::format("{}", fmt::join(path, " "));
}

const OptionDoc* CommandDoc::find_option(const std::string& name) const {
  for (const auto& o : options) {
    if (!o.positional && std::find(o.names.begin(), o.names.end(), name) != o.names.end())
      return &o;
  }
  return nullptr;
}

const CommandDoc* CommandDoc::find_subcommand(const std::string& name_or_alias) const {
  for (const auto& sub : subcommands) {
    if (sub.path.back() == name_or_alias ||
        std::find(sub.aliases.begin(), sub.aliases.end(), name_or_alias) != sub.aliases.end())
      return &sub;
  }
  return nullptr;
}

CommandDoc describe(CLI::App& app, std::size_t levels) {
  return describe_command(app, {app.get_name()}, levels);
}

std::map<std::string, std::string> man_pages(const CommandDoc& root) {
  std::map<std::string, std::string> pages;
  pages[root.page_name() + ".1"] = root_page(root);
  std::vector<const CommandDoc*> all;
  collect(root, all);
  for (const CommandDoc* cmd : all)
    pages[cmd->page_name() + ".1"] = command_page(root, *cmd);
  return pages;
}

}  // namespace trainctl::cli
