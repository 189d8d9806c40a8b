"""The eval set's pure core (SPEC E1): plain values in, plain values out.

- ``cases``: the case format, its vocabulary and limits (``Case``, ``CaseError``);
- ``parsing``: ``case_parse``, the strict parser of a case file's JSON object, with the
  readers of one value each in ``values``;
- ``judge``: ``judge``, a run's ``Outcome`` held against its case;
- ``canaries``: the leak search (``canary_tokens``, ``strings_in``, ``leaks``).
"""
