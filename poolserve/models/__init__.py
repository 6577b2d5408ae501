"""Loading pooling models: finding the directory (`resolve`), reading its layout (`layout`,
`kinds`), building the module (`loader`, `module`). Import the submodules: this package imports
nothing itself, so that the CLI can read `kinds` without importing torch."""
