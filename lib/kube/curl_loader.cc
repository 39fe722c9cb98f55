// libcurl, loaded on first use (lazy_library.h): the libcurl functions trainctl calls, each
// forwarding to the library that dlopen finds under its SONAME. The binary does not list libcurl
// as needed, so a command that sends no request (render, completion, version --client, TAB
// completion) never loads libcurl and the ~30 libraries it depends on (GnuTLS, Kerberos, LDAP,
// SASL, libssh2...), whose loading and relocation took most of such a command's time.
#define CURL_DISABLE_TYPECHECK  // the typechecking macros would rename the definitions below
#include <curl/curl.h>

#include <cstdarg>

#include "lazy_library.h"

namespace {

constinit trainctl::LazyLibrary libcurl("libcurl.so.4", "every request needs");
constinit trainctl::LazyLibrary::Symbol easy_setopt(libcurl, "curl_easy_setopt");
constinit trainctl::LazyLibrary::Symbol easy_getinfo(libcurl, "curl_easy_getinfo");
constinit trainctl::LazyLibrary::Symbol multi_setopt(libcurl, "curl_multi_setopt");
[[maybe_unused]] const bool added =
    libcurl.add(easy_setopt) && libcurl.add(easy_getinfo) && libcurl.add(multi_setopt);

}  // namespace

extern "C" {

TRAINCTL_FORWARD1(libcurl, curl_global_init)
TRAINCTL_FORWARD0(libcurl, curl_global_cleanup)
TRAINCTL_FORWARD0(libcurl, curl_easy_init)
TRAINCTL_FORWARD1(libcurl, curl_easy_cleanup)
TRAINCTL_FORWARD1(libcurl, curl_easy_reset)
TRAINCTL_FORWARD1(libcurl, curl_easy_perform)
TRAINCTL_FORWARD4(libcurl, curl_easy_recv)
TRAINCTL_FORWARD4(libcurl, curl_easy_send)
TRAINCTL_FORWARD1(libcurl, curl_version_info)
TRAINCTL_FORWARD1(libcurl, curl_easy_strerror)
TRAINCTL_FORWARD2(libcurl, curl_slist_append)
TRAINCTL_FORWARD1(libcurl, curl_slist_free_all)
TRAINCTL_FORWARD0(libcurl, curl_multi_init)
TRAINCTL_FORWARD1(libcurl, curl_multi_cleanup)
TRAINCTL_FORWARD2(libcurl, curl_multi_add_handle)
TRAINCTL_FORWARD2(libcurl, curl_multi_remove_handle)
TRAINCTL_FORWARD2(libcurl, curl_multi_perform)
TRAINCTL_FORWARD5(libcurl, curl_multi_poll)
TRAINCTL_FORWARD1(libcurl, curl_multi_wakeup)
TRAINCTL_FORWARD2(libcurl, curl_multi_info_read)
TRAINCTL_FORWARD1(libcurl, curl_multi_strerror)

// The option's number says the type of its argument, as libcurl's own curl_easy_setopt reads it.
CURLcode curl_easy_setopt(CURL* curl, CURLoption option, ...) {
  auto* f = easy_setopt.get<CURLcode(CURL*, CURLoption, ...)>();
  va_list args;
  va_start(args, option);
  CURLcode result;
  if (option < CURLOPTTYPE_OBJECTPOINT)
    result = f(curl, option, va_arg(args, long));
  else if (option < CURLOPTTYPE_FUNCTIONPOINT || option >= CURLOPTTYPE_BLOB)
    result = f(curl, option, va_arg(args, void*));
  else if (option < CURLOPTTYPE_OFF_T)
    result = f(curl, option, va_arg(args, void (*)()));
  else
    result = f(curl, option, va_arg(args, curl_off_t));
  va_end(args);
  return result;
}

// Every CURLINFO is read through a pointer to where the value goes.
CURLcode curl_easy_getinfo(CURL* curl, CURLINFO info, ...) {
  auto* f = easy_getinfo.get<CURLcode(CURL*, CURLINFO, ...)>();
  va_list args;
  va_start(args, info);
  void* out = va_arg(args, void*);
  va_end(args);
  return f(curl, info, out);
}

// Every multi option trainctl sets takes a long.
CURLMcode curl_multi_setopt(CURLM* multi, CURLMoption option, ...) {
  auto* f = multi_setopt.get<CURLMcode(CURLM*, CURLMoption, ...)>();
  va_list args;
  va_start(args, option);
  const long value = va_arg(args, long);
  va_end(args);
  return f(multi, option, value);
}

}  // extern "C"
