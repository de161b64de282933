"""A compilation that XLA:CPU cannot finish kills the process with SIGSEGV instead of raising.
When the process has no memory mappings left (Linux's vm.max_map_count, 65530 by default),
LLVM cannot map the new executable's code ("LLVM compilation error: Cannot allocate memory"),
PjRtComputationClient::Compile throws a C++ exception, and the unwinder (libgcc's
_Unwind_Find_FDE) reads the exception-handling frame that the failed JIT registered for the
code it had already unmapped: SIGSEGV. An error a caller could catch becomes a crash.

A long run reaches that limit by itself: each executable torch_xla keeps (its compilation
cache holds XLA_COMPILATION_CACHE_SIZE of them) holds mappings for its JIT-compiled code,
about three per object. This is the SIGSEGV of the suite's serial XLA run in
test_gradscaler_training[xla-adamw-plain-two_optimizers] (see ../README.md). Here the child
process takes the mappings up front with small mmaps, then compiles small graphs.

    PJRT_DEVICE=CPU python failed_compile_sigsegv.py    # exit 1 while XLA departs

(exit 0: the failed compilation raised in the child, as a catchable error should; exit 2:
the child failed otherwise, its stderr printed.)
"""
import signal
import subprocess
import sys

CHILD = r"""
import mmap, resource
import torch, torch_xla

resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file of a 65k-mapping process

def mappings():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)

limit = int(open("/proc/sys/vm/max_map_count").read())
(torch.ones(3, device="xla") * 2).cpu()      # a first compilation: fine
held = []
while (left := limit - 30 - mappings()) > 0:   # leave 30 mappings (about ten executables)
    for _ in range(min(left, 2000)):
        held.append(mmap.mmap(-1, 4096, prot=mmap.PROT_READ | (mmap.PROT_WRITE * (len(held) % 2))))
print(f"{mappings()} of {limit} mappings used", flush=True)
for i in range(40):                            # new graphs until one cannot be compiled
    try:
        (torch.full((i + 2,), 1.0, device="xla") * 3 + i).cpu()
    except Exception as exc:
        print(f"graph {i}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}", flush=True)
        break
"""

child = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True)
how = (f"killed by {signal.Signals(-child.returncode).name}" if child.returncode < 0
       else f"exit status {child.returncode}")
print("xla:", " / ".join(line for line in child.stdout.splitlines() if line), "/", how)
for line in child.stderr.splitlines():
    if "LLVM" in line:
        print("xla stderr:", line.split("] ", 1)[-1])
if child.returncode > 0:  # neither the crash nor a clean error: say why, and decide nothing
    print(child.stderr[-2000:])
    sys.exit(2)
sys.exit(1 if child.returncode < 0 else 0)
