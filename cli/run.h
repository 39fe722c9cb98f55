#pragma once

namespace trainctl::cli {

/// Parses the command line, runs the verb and returns the process's exit code (man trainctl:
/// 0 success, 1 job failed, 2 usage, 3 API, 4 timeout). Kept apart from app.h so that main.cc
/// compiles without CLI11.
int run(int argc, char** argv);

}  // namespace trainctl::cli
