#include "launch/commands.h"

int main(int argc, char** argv) {
  return loom::launch::run_cli(argc, argv);
}
