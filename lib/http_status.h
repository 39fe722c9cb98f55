#pragma once

// HTTP status codes' reason phrases (RFC 9110), shared by the sandbox's server, the client's
// request log and the test servers.

#include <string_view>

namespace trainctl {

/// "Not Found" for 404; "Unknown" for a code RFC 9110 does not name.
std::string_view reason_phrase(int status);

}  // namespace trainctl
