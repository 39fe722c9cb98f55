// trainctl: distributed training jobs on Kubernetes.
#include "run.h"

int main(int argc, char** argv) {
  return trainctl::cli::run(argc, argv);
}
