// fmt's compiled half, built once into trainctl_fmt when fmt is linked in (TRAINCTL_STATIC_CXX).
//
// Debian ships fmt as a shared library and headers only. Compiling it header-only
// (FMT_HEADER_ONLY) put all of format-inl.h into every translation unit that includes
// <fmt/format.h>: about 10 s of -O2 code generation per unity batch, over half of a clean
// build's compile time. Here its out-of-line functions are compiled once, and every other
// translation unit sees only their declarations, as with the shared library.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {

// The templates that <fmt/format.h> declares `extern` (or calls without defining) for the
// character types and floating-point types this project formats.
template auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;
template locale_ref::locale_ref(const std::locale& loc);
template auto locale_ref::get<std::locale>() const -> std::locale;
template auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template auto thousands_sep_impl(locale_ref) -> thousands_sep_result<wchar_t>;
template auto decimal_point_impl(locale_ref) -> char;
template auto decimal_point_impl(locale_ref) -> wchar_t;
template void buffer<char>::append(const char*, const char*);
template void vformat_to(buffer<char>&, string_view, basic_format_args<FMT_BUFFER_CONTEXT(char)>,
                         locale_ref);

}  // namespace detail
FMT_END_NAMESPACE
