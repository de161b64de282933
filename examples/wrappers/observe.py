"""Enter each declared wrapper directly and say what it does, next to what it declares.

    PYTHONPATH=examples/wrappers python examples/wrappers/observe.py open_clip_decl
    python examples/wrappers/observe.py open_clip_decl --device cuda      # no GPU: what happens
    python examples/wrappers/observe.py open_clip_decl --json obs.json    # rows for the docs

This is not the wrapper tier (``--wrapper MODULE:NAME``, ``suite/test_wrappers.py``): it is
a small, independent look at a declaration module (importable, every ``make`` and
``decorate`` callable, and what the wrapper does on one device), whose rows
``python -m amp_conformance.tools.wrappers_table`` can put in docs/wrappers.md until the
tier's own reports replace them. A row's ``result`` is ``passed`` when the wrapper did what
its declaration says (and autocast's contract asks), ``failed`` otherwise, ``skipped`` where
the declaration claims nothing on the device.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import sys
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
# this folder and each library's (examples/wrappers/<library>/, its declaration module), so a
# declaration module is named here as its nox session names it
sys.path[:0] = [str(HERE), *(str(p.parent) for p in sorted(HERE.glob("*/integration.toml")))]

from amp_conformance.checks.wrappers import island, island_inputs  # noqa: E402
from amp_conformance.checks.wrappers.declare import (  # noqa: E402
    ERROR,
    FALLBACK,
    Float32Island,
    ForwardDecorator,
    RegionFactory,
    RegionRunner,
    validate,
)


class Boom(Exception):
    """Raised inside a region by the exception probe."""


def _state(device: str) -> tuple[bool, torch.dtype]:
    return torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


def _other(dtype: torch.dtype) -> torch.dtype:
    return torch.float16 if dtype == torch.bfloat16 else torch.bfloat16


def _recorder(name: str) -> tuple[list[dict], Callable[[str, bool | None, str], None]]:
    """The rows of one wrapper, and the function that adds one (None: skipped)."""
    rows: list[dict] = []

    def row(check: str, ok: bool | None, detail: str) -> None:
        result = "skipped" if ok is None else ("passed" if ok else "failed")
        rows.append({"wrapper": name, "check": check, "result": result, "detail": detail})

    return rows, row


def region_rows(w: RegionFactory, device: str) -> list[dict]:
    rows, row = _recorder(w.name)
    if device not in w.devices:
        row("devices", None, f"not claimed on {device} (claims {', '.join(w.devices)})")
        return rows
    before = _state(device)
    for name, dtype in w.precisions.items():
        # state inside, and restored after
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                with w.make(name, device):
                    inside = _state(device)
            after = _state(device)
            ok = inside == (True, dtype) and after == before
            said = "".join(f"; warned: {str(m.message).strip().splitlines()[0]}" for m in seen
                           if issubclass(m.category, UserWarning))
            row(f"state[{name}]", ok, f"inside: enabled={inside[0]} dtype={inside[1]}; "
                f"after: enabled={after[0]} dtype={after[1]}{said}")
        except Exception as exc:  # noqa: BLE001
            row(f"state[{name}]", False, f"entering raised {_first_line(exc)}")
            continue
        # nested in a torch.autocast region of the other dtype, and in itself
        outer_dtype = _other(dtype)
        try:
            with torch.autocast(device, dtype=outer_dtype):
                outer = _state(device)
                with w.make(name, device):
                    inner = _state(device)
                    with w.make(name, device):
                        innermost = _state(device)
                    back_in = _state(device)
                back = _state(device)
            ok = inner == innermost == back_in == (True, dtype) and back == outer
            row(f"nesting[{name}]", ok, f"inside torch.autocast({outer_dtype}): inner dtype="
                f"{inner[1]}, self-nested {innermost[1]}, after inner exit {back[1]}")
        except Exception as exc:  # noqa: BLE001
            row(f"nesting[{name}]", False, f"raised {_first_line(exc)}")
        # an exception inside propagates unchanged and the state is restored
        boom = Boom("inside")
        try:
            with w.make(name, device):
                raise boom
        except Boom as exc:
            after = _state(device)
            ok = exc is boom and after == before
            row(f"exception[{name}]", ok, f"propagated {'the same' if exc is boom else 'another'}"
                f" exception; after: enabled={after[0]} dtype={after[1]}")
        except Exception as exc:  # noqa: BLE001
            row(f"exception[{name}]", False, f"replaced by {_first_line(exc)}")
        # the cast cache is cleared at the outermost exit
        row(f"cache[{name}]", *_cache_probe(w, name, device))
        # use as a decorator
        def fn():
            return _state(device)
        try:
            seen = w.make(name, device)(fn)()
            works, detail = seen == (True, dtype), f"as a decorator: enabled={seen[0]} dtype={seen[1]}"
        except Exception as exc:  # noqa: BLE001
            works, detail = False, f"as a decorator: {_first_line(exc)}"
        row(f"decorator[{name}]", works if w.decorator else None,
            detail + ("" if w.decorator else " (not claimed)"))
    unclaimed = w.float32_unclaimed.get(device)
    declared = f"not claimed: {unclaimed}" if unclaimed else f"declared {w.float32}"
    for name in w.float32_names:
        try:
            with w.make(name, device):
                inside = _state(device)
            ok = inside[0] is False and w.float32 != ERROR
            row(f"float32[{name}]", None if unclaimed else ok,
                f"entered: enabled={inside[0]} dtype={inside[1]} ({declared})")
        except Exception as exc:  # noqa: BLE001
            row(f"float32[{name}]", None if unclaimed else w.float32 == ERROR,
                f"raised {_first_line(exc)} ({declared})")
    try:
        with w.make(w.unknown_probe, device):
            inside = _state(device)
        if w.unknown == FALLBACK:
            ok = inside == (True, w.fallback_dtype)
        else:
            ok = w.unknown != ERROR and inside[0] is False
        row("unknown", ok, f"{w.unknown_probe!r} entered: enabled={inside[0]} dtype={inside[1]}"
            f" (declared {w.unknown})")
    except Exception as exc:  # noqa: BLE001
        row("unknown", w.unknown == ERROR, f"{w.unknown_probe!r} raised {_first_line(exc)} "
            f"(declared {w.unknown})")
    return rows


def _cache_probe(w: RegionFactory, name: str, device: str) -> tuple[bool | None, str]:
    """The cast of a weight that requires grad is cached inside the region (kept alive by the
    cache alone once the output is gone) and freed at the outermost exit."""
    try:
        x = torch.randn(4, 4, device=device, requires_grad=True) * 1  # not a leaf: not cached
        weight = torch.randn(4, 4, device=device, requires_grad=True)
        with w.make(name, device):
            y = torch.mm(x, weight)
            saved = y.grad_fn._saved_mat2
            if saved.dtype == weight.dtype:
                return None, "mm did not cast the weight here: nothing to cache"
            ref = weakref.ref(saved)
            del y, saved
            gc.collect()
            cached = ref() is not None
        gc.collect()
        freed = ref() is None
    except Exception as exc:  # noqa: BLE001
        return False, f"raised {_first_line(exc)}"
    torch.clear_autocast_cache()
    if not cached:
        return None, "the cast weight was not cached inside: the probe sees nothing"
    state = "freed" if freed else "still cached"
    return freed == w.clears_cache, f"cast weight cached inside; after exit {state}"


def forward_rows(w: ForwardDecorator, device: str, amp_dtype: torch.dtype) -> list[dict]:
    rows, row = _recorder(w.name)
    if device not in w.devices:
        row("devices", None, f"not claimed on {device} (claims {', '.join(w.devices)})")
        return rows

    def fn(a, b=None):
        return (a.dtype, b.dtype if b is not None else None, *_state(device))

    decorated = w.decorate(fn)
    try:
        a = torch.ones(2, device=device, dtype=amp_dtype)
        # custom_fwd casts floating tensors of the device except float64: both inputs eligible
        b = torch.ones(2, device=device, dtype=amp_dtype)
    except Exception as exc:  # noqa: BLE001
        row("cast", False, f"no tensor on {device}: {_first_line(exc)}")
        return rows
    try:
        with torch.autocast(device, dtype=amp_dtype):
            da, db, enabled, _ = decorated(a, b=b)
    except Exception as exc:  # noqa: BLE001
        row("cast", False, f"inside torch.autocast({amp_dtype}): {_first_line(exc)}")
        return rows
    detail = (f"inside torch.autocast({amp_dtype}): positional {amp_dtype}->{da}, keyword "
              f"{amp_dtype}->{db}, autocast {'on' if enabled else 'off'} inside")
    if device in w.casts_on:
        row("cast", da == db == w.cast_dtype, detail)
        row("inside", enabled is (not w.disables_autocast), detail)
    else:
        row("no_cast", da == db == amp_dtype, detail + f" (casts only on "
            f"{', '.join(w.casts_on) or 'no device'})")
    da, db, enabled, _ = decorated(a, b=b)
    row("outside", da == db == amp_dtype and not enabled,
        f"outside autocast: positional {amp_dtype}->{da}, keyword {amp_dtype}->{db}")
    for key, value in w.extra_kwargs.items():
        try:
            with torch.autocast(device, dtype=amp_dtype):
                got = decorated(a, b=b, **{key: value})
            row(f"keyword[{key}]", True, f"{key}={value!r} accepted and consumed: positional "
                f"->{got[0]}, keyword ->{got[1]}, autocast {'on' if got[2] else 'off'} inside")
        except TypeError as exc:
            row(f"keyword[{key}]", False, f"{key}={value!r}: {_first_line(exc)}")
    return rows


def island_rows(w: Float32Island, device: str, amp_dtype: torch.dtype) -> list[dict]:
    """Inside torch.autocast(amp_dtype), inputs in amp_dtype: what the ops computed in."""
    rows, row = _recorder(w.name)
    if device not in w.devices:
        row("devices", None, f"not claimed on {device} (claims {', '.join(w.devices)})")
        return rows
    try:
        made = tuple(w.inputs(device))
        xs = island_inputs.by_hand(w.arguments or (None,) * len(made), made, amp_dtype)
        with torch.autocast(device, dtype=amp_dtype):
            trace, _ = island.run_traced(w.island(device), xs)
    except Exception as exc:  # noqa: BLE001 - e.g. no such device here
        row("float32", False, f"raised {_first_line(exc)}")
        return rows
    lower = trace.lower()
    row("float32", lower is None, lower or f"every op of {len(trace.ops)} computed in float32")
    return rows


def runner_rows(w: RegionRunner, device: str) -> list[dict]:
    """The state the body saw, per precision."""
    rows, row = _recorder(w.name)
    if device not in w.devices:
        row("devices", None, f"not claimed on {device} (claims {', '.join(w.devices)})")
        return rows
    for name, dtype in w.precisions.items():
        seen: list = []
        w.runs(lambda seen=seen: seen.append(_state(device)), name, device)
        row(f"state[{name}]", bool(seen) and seen[-1] == (True, dtype),
            f"the body saw {seen[-1] if seen else 'nothing (never called)'}")
    return rows


def observe(module_name: str, device: str, amp_dtype: torch.dtype) -> list[dict]:
    module = importlib.import_module(module_name)
    rows = []
    for wrapper in module.WRAPPERS:
        validate(wrapper)
        found = (region_rows(wrapper, device) if isinstance(wrapper, RegionFactory)
                 else island_rows(wrapper, device, amp_dtype)
                 if isinstance(wrapper, Float32Island)
                 else runner_rows(wrapper, device) if isinstance(wrapper, RegionRunner)
                 else forward_rows(wrapper, device, amp_dtype))
        for r in found:
            r.update(library=wrapper.library, version=wrapper.version, device=device)
        rows += found
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="+", help="declaration modules (open_clip_decl, ...)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--amp-dtype", default="bfloat16", choices=["bfloat16", "float16"],
                        help="the autocast dtype of the region a forward decorator is called in")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    rows = []
    for name in args.modules:
        rows += observe(name, args.device, getattr(torch, args.amp_dtype))
    for r in rows:
        print(f"{r['library']} {r['version']} | {r['wrapper']} | {r['check']} | {r['result']} | "
              f"{r['detail']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 1 if any(r["result"] == "failed" for r in rows) else 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        raise SystemExit(main())
