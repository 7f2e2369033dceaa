"""Build and release tooling for the monorepo, run by nox (`build`, `release`, `changelog`).

Not a distribution: run from the repository root as `python -m tools.<module>`.
See docs/releasing.md.
"""
