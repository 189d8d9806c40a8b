"""The eval set's pure core: the case format, the judge and the leak search (SPEC E1)."""
