// libcurl, loaded on first use: the libcurl functions trainctl calls, each forwarding to the
// library that dlopen finds under its SONAME. The binary does not list libcurl as needed, so a
// command that sends no request (render, completion, version --client, TAB completion) never
// loads libcurl and the ~30 libraries it depends on (GnuTLS, Kerberos, LDAP, SASL, libssh2...),
// whose loading and relocation took most of such a command's time. Only the functions named
// here may be called; a new one needs its forwarder here (the link fails without it).
#define CURL_DISABLE_TYPECHECK  // the typechecking macros would rename the definitions below
#include <curl/curl.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdarg>
#include <mutex>

#include "error.h"

namespace trainctl::kube {
namespace {

/// The loaded library; a failure to load is an Error, thrown at the first libcurl call.
void* library() {
  static void* handle = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    handle = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      throw Error(ErrorKind::Connection,
                  fmt::format("cannot load libcurl (libcurl.so.4), which every request needs: {}",
                              dlerror()));
    }
  });
  return handle;
}

/// The library's own definition of `name`, looked up once per call site.
template <typename Function>
Function* resolve(const char* name) {
  void* symbol = dlsym(library(), name);
  if (symbol == nullptr) {
    throw Error(ErrorKind::Connection, fmt::format("libcurl.so.4 has no {}: {}", name, dlerror()));
  }
  return reinterpret_cast<Function*>(symbol);
}

}  // namespace
}  // namespace trainctl::kube

using trainctl::kube::resolve;

extern "C" {

CURLcode curl_global_init(long flags) {
  static auto* f = resolve<CURLcode(long)>("curl_global_init");
  return f(flags);
}

void curl_global_cleanup() {
  static auto* f = resolve<void()>("curl_global_cleanup");
  f();
}

CURL* curl_easy_init() {
  static auto* f = resolve<CURL*()>("curl_easy_init");
  return f();
}

void curl_easy_cleanup(CURL* curl) {
  static auto* f = resolve<void(CURL*)>("curl_easy_cleanup");
  f(curl);
}

void curl_easy_reset(CURL* curl) {
  static auto* f = resolve<void(CURL*)>("curl_easy_reset");
  f(curl);
}

CURLcode curl_easy_perform(CURL* curl) {
  static auto* f = resolve<CURLcode(CURL*)>("curl_easy_perform");
  return f(curl);
}

// The option's number says the type of its argument, as libcurl's own curl_easy_setopt reads it.
CURLcode curl_easy_setopt(CURL* curl, CURLoption option, ...) {
  static auto* f = resolve<CURLcode(CURL*, CURLoption, ...)>("curl_easy_setopt");
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
  static auto* f = resolve<CURLcode(CURL*, CURLINFO, ...)>("curl_easy_getinfo");
  va_list args;
  va_start(args, info);
  void* out = va_arg(args, void*);
  va_end(args);
  return f(curl, info, out);
}

CURLcode curl_easy_recv(CURL* curl, void* buffer, size_t length, size_t* n) {
  static auto* f = resolve<CURLcode(CURL*, void*, size_t, size_t*)>("curl_easy_recv");
  return f(curl, buffer, length, n);
}

CURLcode curl_easy_send(CURL* curl, const void* buffer, size_t length, size_t* n) {
  static auto* f = resolve<CURLcode(CURL*, const void*, size_t, size_t*)>("curl_easy_send");
  return f(curl, buffer, length, n);
}

curl_version_info_data* curl_version_info(CURLversion age) {
  static auto* f = resolve<curl_version_info_data*(CURLversion)>("curl_version_info");
  return f(age);
}

const char* curl_easy_strerror(CURLcode code) {
  static auto* f = resolve<const char*(CURLcode)>("curl_easy_strerror");
  return f(code);
}

curl_slist* curl_slist_append(curl_slist* list, const char* data) {
  static auto* f = resolve<curl_slist*(curl_slist*, const char*)>("curl_slist_append");
  return f(list, data);
}

void curl_slist_free_all(curl_slist* list) {
  static auto* f = resolve<void(curl_slist*)>("curl_slist_free_all");
  f(list);
}

CURLM* curl_multi_init() {
  static auto* f = resolve<CURLM*()>("curl_multi_init");
  return f();
}

CURLMcode curl_multi_cleanup(CURLM* multi) {
  static auto* f = resolve<CURLMcode(CURLM*)>("curl_multi_cleanup");
  return f(multi);
}

// Every multi option trainctl sets takes a long.
CURLMcode curl_multi_setopt(CURLM* multi, CURLMoption option, ...) {
  static auto* f = resolve<CURLMcode(CURLM*, CURLMoption, ...)>("curl_multi_setopt");
  va_list args;
  va_start(args, option);
  const long value = va_arg(args, long);
  va_end(args);
  return f(multi, option, value);
}

CURLMcode curl_multi_add_handle(CURLM* multi, CURL* curl) {
  static auto* f = resolve<CURLMcode(CURLM*, CURL*)>("curl_multi_add_handle");
  return f(multi, curl);
}

CURLMcode curl_multi_remove_handle(CURLM* multi, CURL* curl) {
  static auto* f = resolve<CURLMcode(CURLM*, CURL*)>("curl_multi_remove_handle");
  return f(multi, curl);
}

CURLMcode curl_multi_perform(CURLM* multi, int* running) {
  static auto* f = resolve<CURLMcode(CURLM*, int*)>("curl_multi_perform");
  return f(multi, running);
}

CURLMcode curl_multi_poll(CURLM* multi, curl_waitfd* extra, unsigned int extra_count,
                          int timeout_ms, int* ret) {
  static auto* f =
      resolve<CURLMcode(CURLM*, curl_waitfd*, unsigned int, int, int*)>("curl_multi_poll");
  return f(multi, extra, extra_count, timeout_ms, ret);
}

CURLMcode curl_multi_wakeup(CURLM* multi) {
  static auto* f = resolve<CURLMcode(CURLM*)>("curl_multi_wakeup");
  return f(multi);
}

CURLMsg* curl_multi_info_read(CURLM* multi, int* left) {
  static auto* f = resolve<CURLMsg*(CURLM*, int*)>("curl_multi_info_read");
  return f(multi, left);
}

const char* curl_multi_strerror(CURLMcode code) {
  static auto* f = resolve<const char*(CURLMcode)>("curl_multi_strerror");
  return f(code);
}

}  // extern "C"
