#include "launch/blas_environment.h"
#include "launch/commands.h"

int main(int argc, char** argv) {
  loom::launch::restart_with_short_blas_spin(argc, argv);
  return loom::launch::run_cli(argc, argv);
}
