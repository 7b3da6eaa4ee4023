"""`parley eval`'s parts: the dataset, the assertions, the judge, running the cases as sessions
and the report (see docs/evals.md)."""
