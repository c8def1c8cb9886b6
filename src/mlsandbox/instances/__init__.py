"""Generated instances of the catalogue's families, frozen suites with train/dev/test splits, and the
export of a suite as Harbor tasks."""
