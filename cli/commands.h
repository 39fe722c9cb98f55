#pragma once

#include <CLI/CLI.hpp>

#include "api/job.h"
#include "global_flags.h"

namespace trainctl::cli {

/// Each verb registers itself on the app; the callback it installs runs the verb and may throw
/// trainctl::Error, which main() turns into a message and an exit code.
void add_version_command(CLI::App& app, const GlobalFlags& flags);
void add_config_command(CLI::App& app, const GlobalFlags& flags);
void add_sandbox_command(CLI::App& app, const GlobalFlags& flags);
void add_list_command(CLI::App& app, const GlobalFlags& flags);
void add_get_command(CLI::App& app, const GlobalFlags& flags);
void add_delete_command(CLI::App& app, const GlobalFlags& flags);  // delete, suspend, resume
void add_submit_command(CLI::App& app, const GlobalFlags& flags);
void add_render_command(CLI::App& app, const GlobalFlags& flags);
void add_template_command(CLI::App& app, const GlobalFlags& flags);

/// Job lookup shared by list, get and delete (get.cc): a kind's resource, the --kind flag
/// (tfjob|pytorchjob|mpijob, any case, plural too) and one job by name across the kinds.
struct FoundJob {
  api::JobKind kind;
  nlohmann::json object;
};
kube::Resource job_resource(api::JobKind kind);
api::JobKind parse_kind_flag(std::string_view value);
/// NotFound when no kind has it (with `trainctl install` advice when --kind names an unserved
/// kind), Usage when several kinds do.
FoundJob find_job(kube::Client& client, std::string_view ns, std::string_view name,
                  std::optional<api::JobKind> kind);
/// The jobs matching `label_selector` in `ns` ("" = all namespaces), sorted by namespace/name
/// (list.cc). Kinds the cluster does not serve are skipped unless `kind` names one: then NotFound
/// with `trainctl install` advice.
std::vector<FoundJob> list_jobs(kube::Client& client, std::string_view ns,
                                const std::string& label_selector,
                                std::optional<api::JobKind> kind);

}  // namespace trainctl::cli
