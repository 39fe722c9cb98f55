// trainctl template list | show NAME | export NAME DIR [--force]: the job templates trainctl
// renders, where each comes from, and a copy to edit (used with --template FILE or from
// $TRAINCTL_TEMPLATE_PATH / ~/.config/trainctl/templates).
#include <fmt/format.h>

#include <iostream>

#include "commands.h"
#include "docs.h"
#include "error.h"
#include "job_values.h"
#include "printer.h"

namespace trainctl::cli {
namespace {

struct TemplateListOptions {
  void Run() const {
    Table table{{"NAME", "SOURCE", "PATH"}, {}};
    for (const auto& t : render::list_templates(template_search()))
      table.rows.push_back({t.name, std::string(render::to_string(t.source)), t.path.string()});
    print_table(std::cout, table);
  }
};

struct TemplateShowOptions {
  std::string name;

  void Run() const {
    std::cout << render::read_template(render::find_template(template_search(), name));
  }
};

struct TemplateExportOptions {
  std::string name;
  std::filesystem::path dir;
  bool force = false;

  void Run() const {
    const auto path = render::export_template(template_search(), name, dir, force);
    std::cout << fmt::format("template {} exported to {}\n", name, path.string());
  }
};

}  // namespace

void add_template_command(CLI::App& app, const GlobalFlags& flags) {
  auto* tpl = app.add_subcommand("template", "List, show and export job templates");
  tpl->require_subcommand(1);
  auto* cmd = tpl->add_subcommand("list", "List the templates and where each is found");
  add_examples(*cmd, "trainctl template list");
  run_verb(*cmd, std::make_shared<TemplateListOptions>(), flags);

  auto show = std::make_shared<TemplateShowOptions>();
  cmd = tpl->add_subcommand("show", "Print a template");
  cmd->add_option("NAME", show->name, "Template name (tfjob, pytorchjob, mpijob, ...)")
      ->required()
      ->check(completes(ValueSource::Templates));
  add_examples(*cmd, "trainctl template show pytorchjob");
  run_verb(*cmd, show, flags);

  auto exp = std::make_shared<TemplateExportOptions>();
  cmd = tpl->add_subcommand("export", "Copy a template into DIR to edit");
  cmd->add_option("NAME", exp->name, "Template name")
      ->required()
      ->check(completes(ValueSource::Templates));
  cmd->add_option("DIR", exp->dir, "Directory to write NAME.yaml.mustache into")->required();
  cmd->add_flag("--force", exp->force, "Overwrite an existing file");
  add_examples(*cmd, R"(# Copy the PyTorchJob template to edit, then submit with it
trainctl template export pytorchjob ~/.config/trainctl/templates
trainctl submit pytorchjob --image reg/pt:1 -- python train.py)");
  run_verb(*cmd, exp, flags);
}

}  // namespace trainctl::cli
