"""A pytest plugin (``-p amp_fault_health``) declaring ``amp_fault``'s device health to the
suite through ``pytest_amp_conformance_device_health``: its probe and its words.

With ``AMP_FAULT_PROBES=PATH`` it writes how many times the probe ran to PATH at the end of
the process, so a test can tell that a healthy run was probed and never stopped.
"""

import os


def pytest_amp_conformance_device_health(config, device):
    import amp_fault  # the backend (also --backend-module amp_fault): one module, one state

    return {"probe": amp_fault.probe, "patterns": [r"FAULT: device lost"]}


def pytest_unconfigure(config):
    path = os.environ.get("AMP_FAULT_PROBES")
    if path:
        import amp_fault

        worker = getattr(config, "workerinput", {}).get("workerid", "main")
        with open(path, "a", encoding="utf-8") as out:
            out.write(f"{worker} {amp_fault._STATE['probes']}\n")
