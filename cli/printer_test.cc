#include "printer.h"

#include <gtest/gtest.h>

#include <sstream>

#include "error.h"

namespace trainctl::cli {
namespace {

TEST(PrinterTest, TableColumnsAlignWithThreeSpaces) {
  std::ostringstream out;
  print_table(out, {{"NAME", "STATUS"}, {{"mnist", "Running"}, {"a-much-longer-name", "Failed"}}});
  EXPECT_EQ(out.str(),
            "NAME                 STATUS\n"
            "mnist                Running\n"
            "a-much-longer-name   Failed\n");
}

TEST(PrinterTest, OutputFormatsParseAndRejectUnknown) {
  EXPECT_EQ(parse_output_format("json"), OutputFormat::Json);
  EXPECT_EQ(parse_output_format(""), OutputFormat::Table);
  try {
    parse_output_format("xml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(e.message().find("\"xml\""), std::string::npos);
  }
}

TEST(PrinterTest, NameAndDocuments) {
  std::ostringstream out;
  print_name(out, {{"metadata", {{"name", "mnist"}}}}, "tfjob.kubeflow.org");
  print_document(out, {{"a", 1}}, OutputFormat::Yaml);
  print_document(out, {{"a", 1}}, OutputFormat::Json);
  EXPECT_EQ(out.str(), "tfjob.kubeflow.org/mnist\na: 1\n{\n  \"a\": 1\n}\n");
  // Not named yet (`submit --dry-run=client -o name` of a generateName job): as kubectl prints.
  std::ostringstream unnamed;
  print_name(unnamed, {{"metadata", {{"generateName", "tfjob-"}}}}, "tfjob.kubeflow.org");
  EXPECT_EQ(unnamed.str(), "tfjob.kubeflow.org/<unknown>\n");
}

}  // namespace
}  // namespace trainctl::cli
