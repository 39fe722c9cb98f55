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

void list_templates() {
  Table table{{"NAME", "SOURCE", "PATH"}, {}};
  for (const auto& t : render::list_templates(template_search())) {
    table.rows.push_back({t.name, std::string(render::to_string(t.source)), t.path.string()});
  }
  print_table(std::cout, table);
}

struct ExportOptions {
  std::string name;
  std::filesystem::path dir;
  bool force = false;

  void Run() const {
    const auto path = render::export_template(template_search(), name, dir, force);
    std::cout << fmt::format("template {} exported to {}\n", name, path.string());
  }
};

}  // namespace

void add_template_command(CLI::App& app, const GlobalFlags&) {
  auto* tpl = app.add_subcommand("template", "List, show and export job templates");
  tpl->require_subcommand(1);
  tpl->add_subcommand("list", "List the templates and where each is found")->callback([] {
    list_templates();
  });

  auto show_name = std::make_shared<std::string>();
  auto* show = tpl->add_subcommand("show", "Print a template");
  show->add_option("NAME", *show_name, "Template name (tfjob, pytorchjob, mpijob, ...)")
      ->required()
      ->check(completes(ValueSource::Templates));
  show->callback([show_name] {
    std::cout << render::read_template(render::find_template(template_search(), *show_name));
  });

  auto opts = std::make_shared<ExportOptions>();
  auto* exp = tpl->add_subcommand("export", "Copy a template into DIR to edit");
  exp->add_option("NAME", opts->name, "Template name")
      ->required()
      ->check(completes(ValueSource::Templates));
  exp->add_option("DIR", opts->dir, "Directory to write NAME.yaml.mustache into")->required();
  exp->add_flag("--force", opts->force, "Overwrite an existing file");
  exp->callback([opts] { opts->Run(); });
}

}  // namespace trainctl::cli
