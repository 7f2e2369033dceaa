"""loop_cli: the `the-loop` command and its daemons.

Kept import-free on purpose: `the-loop --version` and `python -m loop_cli.demo_agent`
must start fast, so nothing heavy is imported at package level.
"""

__version__ = "0.1.0"
