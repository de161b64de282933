"""What a report judged: the suite, torch's build, the backend modules, the device, the host
and the environment variables that change their behaviour.

A verdict published for a device is about one implementation: the same torch with another
backend module, another CPU capability or another ``PJRT_DEVICE`` is another one. Read once
in the controller, kept in the report's ``judged`` object (docs/report-schema.md) and shown
at the top of the HTML and Markdown pages. Nothing here may fail a run: what cannot be read
is ``None``.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import torch

DISTRIBUTION = "amp-conformance"

#: Environment variables that change what torch, its backends or the suite do.
ENVIRONMENT = re.compile(
    r"^(ATEN_CPU_CAPABILITY|ONEDNN_\w+|DNNL_\w+|MKL_\w+|OMP_NUM_THREADS|CUBLAS_\w+|CUDNN_\w+"
    r"|CUDA_VISIBLE_DEVICES|CUDA_LAUNCH_BLOCKING|HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES"
    r"|ZE_AFFINITY_MASK|PJRT_\w+|XLA_\w+|TPU_\w+|PT_HPU_\w+|HABANA_\w+|IPEX_\w+|NEURON_\w+"
    r"|PYTORCH_\w+|TORCH_\w+|TORCHINDUCTOR_\w+|TORCHDYNAMO_\w+|AMP_\w+)$")


def judged(device: str, fake: bool, backend_modules: Iterable[str]) -> dict[str, Any]:
    """The ``judged`` object of a report of a run on ``device``."""
    return {
        "suite": suite(),
        "torch": torch_build(),
        "backends": [backend(name) for name in _backend_names(backend_modules)],
        "device": device_facts(device, fake),
        "host": host(),
        "environment": {k: v for k, v in sorted(os.environ.items()) if ENVIRONMENT.match(k)},
    }


def suite() -> dict[str, Any]:
    """The suite's version, and its commit where it is installed from a git checkout."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return {"version": None, "commit": None}
    return {"version": dist.version, "commit": _commit(dist)}


def _commit(dist: importlib.metadata.Distribution) -> str | None:
    try:
        url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
    except ValueError:
        return None
    parsed = urlparse(url)
    if parsed.scheme != "file" or not (Path(unquote(parsed.path)) / ".git").exists():
        return None
    root = unquote(parsed.path)
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty.strip() else "")


def torch_build() -> dict[str, Any]:
    """torch's version and build: what it was compiled for and the CPU kernels it dispatches to."""
    version = getattr(torch, "version", None)
    return {
        "version": torch.__version__,
        "git": getattr(version, "git_version", None),
        "cuda": getattr(version, "cuda", None),
        "hip": getattr(version, "hip", None),
        "xpu": getattr(version, "xpu", None),
        "debug": getattr(version, "debug", None),
        "cpu_capability": _read(torch.backends.cpu.get_cpu_capability),
    }


def _backend_names(named: Iterable[str]) -> list[str]:
    """The modules named by ``--amp-backend-module`` and those torch autoloads, loaded ones only."""
    names = list(dict.fromkeys(named))
    try:
        points = importlib.metadata.entry_points(group="torch.backends")
    except Exception:  # noqa: BLE001 - a broken distribution must not fail the report
        points = ()
    for point in points:
        module = point.value.split(":")[0].split(".")[0]
        if module in sys.modules and module not in names:
            names.append(module)
    return names


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def backend(module: str) -> dict[str, Any]:
    """A backend module and the distribution that installed it, with its version."""
    top = module.split(".")[0]
    dists = _distributions().get(top) or []
    name = dists[0] if dists else None
    version = None
    if name is not None:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return {"module": module, "distribution": name,
            "version": version or getattr(sys.modules.get(top), "__version__", None)}


def device_facts(device: str, fake: bool) -> dict[str, Any]:
    """The device's name and capability as its torch module reports them; none when faked."""
    facts: dict[str, Any] = {"type": device, "name": None, "capability": None}
    if fake:
        return facts
    if device == "cpu":
        facts["name"] = _cpu_model()
        facts["capability"] = _read(torch.backends.cpu.get_cpu_capability)
        return facts
    module = getattr(torch, device, None)
    if module is None:
        return facts
    for key, attr in (("name", "get_device_name"), ("capability", "get_device_capability")):
        read = getattr(module, attr, None)
        if callable(read):
            value = _read(read)
            facts[key] = ".".join(map(str, value)) if isinstance(value, tuple) else value
    return facts


def host() -> dict[str, Any]:
    return {"system": platform.system(), "machine": platform.machine(), "cpu": _cpu_model(),
            "cpus": os.cpu_count(), "python": platform.python_version()}


@functools.cache
def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _read(fn: Any) -> Any:
    try:
        return fn()
    except Exception:  # noqa: BLE001 - a fact that cannot be read is None, never a failed run
        return None


def line(data: dict[str, Any]) -> str:
    """One line naming what a report judged, for the top of its pages ('' for older reports)."""
    j = data.get("judged")
    if not isinstance(j, dict):
        return ""
    s, t, d, h = (j.get(k) or {} for k in ("suite", "torch", "device", "host"))
    head, _, dirty = (s.get("commit") or "").partition("+")
    commit = f" ({head[:12]}{'+' + dirty if dirty else ''})" if head else ""
    built = ", ".join(f"{k.upper()} {t[k]}" for k in ("cuda", "hip", "xpu") if t.get(k))
    parts = [f"amp-conformance {s.get('version') or '?'}{commit}",
             f"torch {t.get('version')}" + (f" ({built})" if built else "")
             + (f", CPU capability {t['cpu_capability']}" if t.get("cpu_capability") else "")]
    parts += [f"{b['module']} {b.get('version') or '?'}"
              + (f" ({b['distribution']})" if b.get("distribution") not in (None, b["module"]) else "")
              for b in j.get("backends") or []]
    if d.get("name"):
        parts.append(f"device {d['name']}" + (f" ({d['capability']})" if d.get("capability") else ""))
    parts.append(f"host {h.get('machine')} {h.get('cpu') or ''}".rstrip()
                 + (f", {h['cpus']} CPUs" if h.get("cpus") else ""))
    env = j.get("environment") or {}
    if env:
        parts.append(" ".join(f"{k}={v}" for k, v in env.items()))
    return " · ".join(parts)
