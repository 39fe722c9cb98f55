#include "follow_output.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <iostream>

namespace trainctl::cli {

namespace {

/// A stable ANSI colour per replica name (FNV-1a over the name), so worker-1 keeps its colour
/// from one run to the next.
int color_of(std::string_view replica) {
  static constexpr std::array<int, 12> kPalette = {36, 33, 32, 35, 34, 31, 96, 93, 92, 95, 94, 91};
  std::uint32_t hash = 2166136261u;
  for (const char c : replica)
    hash = (hash ^ static_cast<unsigned char>(c)) * 16777619u;
  return kPalette[hash % kPalette.size()];
}

}  // namespace

bool is_terminal(int fd) {
  return ::isatty(fd) == 1;
}

bool color_allowed(int fd) {
  const char* no_color = std::getenv("NO_COLOR");
  return is_terminal(fd) && (no_color == nullptr || *no_color == '\0');
}

FollowOutput::FollowOutput(std::ostream& out, bool prefix, bool color, bool live)
    : out_(out), prefix_(prefix), color_(color), live_(live) {}

FollowOutput::~FollowOutput() {
  finish();
}

void FollowOutput::log_line(std::string_view replica, std::string_view text) {
  std::lock_guard lock(mu_);
  clear_status_locked();
  if (prefix_ && color_)
    out_ << fmt::format("\033[{}m[{}]\033[0m ", color_of(replica), replica);
  else if (prefix_)
    out_ << '[' << replica << "] ";
  out_ << text << '\n';
  draw_status_locked();
  out_.flush();
}

void FollowOutput::note(std::string_view text) {
  std::lock_guard lock(mu_);
  clear_status_locked();
  out_ << text << '\n';
  draw_status_locked();
  out_.flush();
}

void FollowOutput::status(std::string status) {
  if (!live_)
    return;
  std::lock_guard lock(mu_);
  clear_status_locked();
  status_ = std::move(status);
  draw_status_locked();
  out_.flush();
}

void FollowOutput::finish() {
  std::lock_guard lock(mu_);
  if (live_ && !status_.empty())
    out_ << '\n' << std::flush;
  status_.clear();
}

void FollowOutput::warning(std::string_view text) {
  std::lock_guard lock(mu_);
  if (!warned_.emplace(text).second)
    return;
  clear_status_locked();
  out_.flush();
  std::cerr << "trainctl: warning: " << text << '\n' << std::flush;
  draw_status_locked();
  out_.flush();
}

std::string logs_unavailable(std::string_view replica, std::string_view why) {
  return fmt::format("logs of {} unavailable: {}", replica, why);
}

void FollowOutput::clear_status_locked() {
  if (live_ && !status_.empty())
    out_ << "\r\033[K";
}

void FollowOutput::draw_status_locked() {
  if (live_ && !status_.empty())
    out_ << status_;
}

}  // namespace trainctl::cli
