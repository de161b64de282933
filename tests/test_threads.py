"""The threads family's checks (checks/threads) fail on autocast state or a cache clear
that does not respect threads, naming what broke, and pass on torch as it is; in-process,
with the selftest's mutants applied and undone."""

import torch

from amp_conformance.checks.threads import check as threads
from tests.mutants import CPU, FAKE_CUDA, fails, mutant


def test_thread_checks_catch_a_per_thread_clear():
    with mutant("cache-clear-per-thread"):
        fails(threads.check_clear_reaches_other_threads, CPU, torch.bfloat16, "bitwise",
              words=("pytorch#86136",))
    threads.check_clear_reaches_other_threads(CPU, torch.bfloat16, "bitwise")
    threads.check_ended_region_not_reused(CPU, torch.float16, "bitwise")


def test_new_thread_check_compares_with_the_default():
    threads.check_new_thread_state(CPU, torch.float16, torch.bfloat16)
    fails(threads.check_new_thread_state, CPU, torch.float16, torch.float16,
          words=("autocast state is per thread",))
    threads.check_new_thread_state(FAKE_CUDA, torch.bfloat16, torch.float16)


def test_backward_state_check_catches_a_default_dtype_backward():
    with mutant("backward-thread-default-dtype"):
        fails(threads.check_backward_thread_state, CPU, torch.float16, words=("pytorch#132715",))
    threads.check_backward_thread_state(CPU, torch.float16)
