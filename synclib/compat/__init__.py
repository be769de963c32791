"""Private APIs of synclib's dependencies, one module per dependency, each use version-guarded."""
