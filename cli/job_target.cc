#include "job_target.h"

#include <fmt/format.h>

#include "docs.h"
#include "error.h"
#include "text.h"

namespace trainctl::cli {

std::optional<api::JobKind> kind_from_type(std::string_view type) {
  const std::string lower = to_lower(type);
  const std::size_t dot = lower.find('.');
  const std::string_view resource = std::string_view(lower).substr(0, dot);
  const std::string_view group =
      dot == std::string::npos ? std::string_view() : std::string_view(lower).substr(dot + 1);
  if (dot != std::string::npos && group.empty())
    return std::nullopt;  // "tfjob."
  for (const auto& info : api::job_kinds()) {
    const std::string_view kind_group = info.api_version.substr(0, info.api_version.find('/'));
    if (!group.empty() && group != kind_group)
      continue;
    if (resource == to_lower(info.name) || resource == info.plural)
      return info.kind;
  }
  return std::nullopt;
}

JobRef parse_job_ref(std::string_view arg, std::optional<api::JobKind> kind_flag) {
  const std::size_t slash = arg.find('/');
  if (slash == std::string_view::npos) {
    if (arg.empty())
      throw Error(ErrorKind::Usage, "a job name must not be empty");
    return {std::string(arg), kind_flag};
  }
  const std::string_view type = arg.substr(0, slash);
  const std::string_view name = arg.substr(slash + 1);
  const auto kind = kind_from_type(type);
  if (!kind) {
    throw Error(ErrorKind::Usage,
                fmt::format("{:?}: {:?} is not a job type: use tfjob, pytorchjob or mpijob (also "
                            "plural, or with .kubeflow.org), as in pytorchjob/NAME",
                            arg, type));
  }
  if (name.empty() || name.find('/') != std::string_view::npos)
    throw Error(ErrorKind::Usage, fmt::format("{:?}: give one job as TYPE/NAME", arg));
  if (kind_flag && *kind_flag != *kind) {
    throw Error(
        ErrorKind::Usage,
        fmt::format("{:?} names a {} but --kind is {}: give the type once", arg,
                    api::job_kind_info(*kind).name, to_lower(api::job_kind_info(*kind_flag).name)));
  }
  return {std::string(name), kind};
}

void JobTarget::add_to(CLI::App& cmd, Args args, std::string kind_help) {
  const bool several = args != Args::One;
  auto* positional = cmd.add_option(several ? "jobs" : "job", args_,
                                    several ? "Job names, or TYPE/NAME (e.g. pytorchjob/x)"
                                            : "The job's name, or TYPE/NAME (e.g. pytorchjob/x)")
                         ->check(completes(ValueSource::Jobs));
  if (args != Args::AnyNumber)
    positional->required();
  if (!several)
    positional->expected(1);
  cmd.add_option("--kind", kind_text_,
                 kind_help.empty() ? "Only look for this kind: tfjob, pytorchjob, mpijob"
                                   : std::move(kind_help))
      ->check(one_of({"tfjob", "pytorchjob", "mpijob"}));
}

void JobTarget::Complete(Connection& connection) {
  if (!kind_text_.empty())
    kind_ = parse_kind_flag(kind_text_);
  jobs_.clear();
  for (const auto& arg : args_)
    jobs_.push_back(parse_job_ref(arg, kind_));
  ns_ = connection.namespace_();
  ns_given_ = connection.namespace_given();
}

std::string JobTarget::suggest(std::string_view verb_and_args) const {
  if (ns_given_ || ns_ != "default")
    return fmt::format("trainctl {} -n {}", verb_and_args, ns_);
  return fmt::format("trainctl {}", verb_and_args);
}

FoundJob JobTarget::find(kube::Client& client, const JobRef& ref) const {
  return find_job(client, ns_, ref.name, ref.kind);
}

std::vector<FoundJob> JobTarget::find_all(kube::Client& client,
                                          std::vector<std::string>& missing) const {
  std::vector<FoundJob> found;
  for (const auto& ref : jobs_) {
    try {
      found.push_back(find(client, ref));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::NotFound)
        throw;
      missing.push_back(e.message());
    }
  }
  return found;
}

}  // namespace trainctl::cli
