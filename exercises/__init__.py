"""Your work: fill in the stubs in these modules, then run ``pytest``."""
