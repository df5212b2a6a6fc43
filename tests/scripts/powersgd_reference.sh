#!/usr/bin/env bash
# loom's PowerSGD against PyTorch's own hook (torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook),
# step by step: 4 ranks reduce 8 steps of one bucket (matrices of several shapes, one 3-d, vectors
# between them) with PowerSGD at rank 1 (Gram-Schmidt) and 3 (QR) from the third step, error
# feedback and warm start on; the hook, in 4 gloo processes, replays the same gradients from
# loom's first Q. Each step's mean must agree within 1e-5 of max(1, |value|).
#   bash powersgd_reference.sh GRADIENT_SYNC_TESTS   (build/tests/loom_gradient_sync_tests)
source "$(dirname "$0")/common.sh"
TESTS="${1:?the loom_gradient_sync_tests binary}"
mpirun --oversubscribe -np 4 env LOOM_POWERSGD_DUMP="$WORK" "$TESTS" "[.powersgd_reference]" > "$WORK/loom.log" 2>&1 ||
  { cat "$WORK/loom.log"; fail "loom's PowerSGD steps did not run"; }
python3 "$SCRIPTS/powersgd_reference.py" "$WORK" 4 || fail "loom's PowerSGD differs from PyTorch's hook"
