#pragma once

// The SSH identity an MPIJob's launcher uses to reach its workers: one fresh key pair per job,
// as the MPI Operator makes it (ECDSA on P-521), stored in the job's `<job>-ssh` Secret.

#include <string>

namespace trainctl::controller {

/// A private key and the public key that matches it, in the forms sshd and ssh read.
struct SshKeyPair {
  /// SEC1 PEM ("-----BEGIN EC PRIVATE KEY-----"), which OpenSSH reads as an identity file.
  std::string private_key_pem;
  /// One authorized_keys line: `ecdsa-sha2-nistp521 <base64 blob>\n`.
  std::string public_key;
};

/// Generates a new ECDSA P-521 key pair with OpenSSL. Throws Error(Config) naming the OpenSSL
/// errors when the library fails.
SshKeyPair generate_ssh_key_pair();

}  // namespace trainctl::controller
