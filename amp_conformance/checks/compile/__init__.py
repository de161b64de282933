"""torch.compile and torch.export under autocast (issue #14).

- :mod:`.regions`: region semantics under compile, a table of scenarios (default run,
  cheap backends);
- :mod:`.per_entry`: every op-list entry's policy check compiled (opt-in, ``--amp-compile``);
- :mod:`.export`: torch.export keeps the regions and runs them as eager does;
- :mod:`.backends`: the backends, how their results compare, a clean dynamo per check;
- :mod:`.departures`: PyTorch's own defects met by the compiled tier (an entry's
  ``reference_defect`` error, its ``compiled_defect``), judged as the eager checks judge them;
- :mod:`.collect`: leaves the opt-in tier out of a run that did not ask for it.
"""
