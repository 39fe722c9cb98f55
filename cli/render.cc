// trainctl render tfjob|pytorchjob|mpijob [flags] [-o yaml|json] [-- COMMAND...]: the job
// `submit` would send, rendered and validated offline. Same flags and values give the same bytes.
#include <fmt/format.h>

#include <array>
#include <iostream>

#include "commands.h"
#include "docs.h"
#include "error.h"
#include "job_values.h"
#include "printer.h"

namespace trainctl::cli {
namespace {

struct RenderOptions {
  std::array<JobFlags, 3> kinds;  // one per `render KIND` subcommand
  std::array<CLI::App*, 3> kind_commands{};
  std::string output = "yaml";

  std::string ns_flag;  // -n/--namespace as given: rendering never reads a kubeconfig
  OutputFormat format = OutputFormat::Yaml;

  void Complete(const GlobalFlags& flags) {
    ns_flag = flags.overrides.namespace_;
    format = parse_output_format(output);
    for (std::size_t i = 0; i < kinds.size(); ++i) {
      if (kind_commands[i]->parsed())
        kinds[i].require_separator(flags.words_after_separator);
    }
  }

  void Validate() const {
    if (format != OutputFormat::Yaml && format != OutputFormat::Json)
      throw Error(ErrorKind::Usage, "render prints -o yaml (default) or json");
  }

  void Run() const {
    for (std::size_t i = 0; i < kinds.size(); ++i) {
      if (!kind_commands[i]->parsed())
        continue;
      const RenderedJob job = render_job(kinds[i], kinds[i].values(ns_flag));
      print_document(std::cout, job.object, format);
      return;
    }
  }
};

}  // namespace

void add_render_command(CLI::App& app, const GlobalFlags& flags, std::string_view kind) {
  auto opts = std::make_shared<RenderOptions>();
  auto* render = app.add_subcommand(
      "render", "Print the job a template and flags produce, validated, without a cluster");
  render->require_subcommand(1);
  const api::JobKind kinds[] = {api::JobKind::TFJob, api::JobKind::PyTorchJob,
                                api::JobKind::MPIJob};
  for (std::size_t i = 0; i < 3; ++i) {
    JobFlags& job = opts->kinds[i];
    job.kind = kinds[i];
    auto* cmd = render->add_subcommand(
        template_name(kinds[i]),
        fmt::format("Render a {} from the {} template", api::job_kind_info(kinds[i]).name,
                    template_name(kinds[i])));
    opts->kind_commands[i] = cmd;
    if (!kind.empty() && kind != template_name(kinds[i]))
      continue;
    add_job_flags(*cmd, job);
    cmd->add_option("-o,--output", opts->output, "yaml (default) or json")
        ->check(one_of({"yaml", "json"}));
    add_examples(*cmd, fmt::format("trainctl render {}", job_example(kinds[i])));
  }
  add_examples(*render, R"(# The PyTorchJob submit would create, without a cluster
trainctl render pytorchjob --name bert --image reg/pt:1 --workers 3 -- python train.py)");
  run_verb(*render, opts, flags);
}

}  // namespace trainctl::cli
