"""What `the-loop --help` lists, as plain data: no click, nothing imported.

`main` builds the click group from it and `entry` prints the root help from it without
importing click, so the two can never disagree about what exists.
"""

from __future__ import annotations

ROOT_HELP = "the-loop: ticket activity into long-running coding-agent sessions."
CONFIG_HELP = "Config file (else $THE_LOOP_CONFIG, ./.the-loop/config.yaml, the user config dir)."
OUTPUTS = ("text", "json", "jsonl", "yaml", "slack")
OUTPUT_HELP = "Default output format of the command (each command lists its own)."
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_LEVEL_HELP = "Log level of a daemon command (poll start, gh-webhook start)."
VERSION_HELP = "Show the versions (the-loop's four packages, Python, tmux) and exit."
EPILOG = "Example: the-loop status -o json   (global options also work after the command)"

# name -> ("module:attr", short help). Modules are imported only when their command runs.
COMMANDS: dict[str, tuple[str, str]] = {
    "config": ("loop_cli.commands.config_cmd:config", "Validate and show the effective config."),
    "status": ("loop_cli.commands.status:status", "Services, sessions and the last poll cycle."),
    "sessions": (
        "loop_cli.commands.sessions:sessions",
        "List, start, stop, reset, attach, restart.",
    ),
    "item": ("loop_cli.commands.item:item", "Work items of the built-in local tracker."),
    "poll": ("loop_cli.commands.poll:poll", "Run the poller (forever, or --once)."),
    "dashboard": (
        "loop_cli.commands.dashboard:dashboard",
        "The URL of the poll daemon's read-only dashboard.",
    ),
    "events": ("loop_cli.commands.events:events", "Read and follow the event log."),
    "inbox": ("loop_cli.commands.inbox:inbox", "Accepted events not yet delivered: list, retry."),
    "demo": ("loop_cli.commands.demo:demo", "Watch the whole loop run once, on a private tmux."),
    "gh-webhook": ("loop_cli.commands.webhook:gh_webhook", "The GitHub webhook receiver."),
    "env": ("loop_cli.commands.env:env", "Where environment values live (env doctor)."),
    "workspace": ("loop_cli.commands.workspace:workspace", "Per-item git worktrees: list, gc."),
    "store": ("loop_cli.commands.store:store", "The state store: migrate to PostgreSQL."),
    "harness": ("loop_cli.commands.harness:harness", "Check the configured harness's setup."),
    "version": (
        "loop_cli.commands.version:version",
        "The versions of every part, for a bug report.",
    ),
    "completion": (
        "loop_cli.commands.completion:completion",
        "Print the shell completion script (bash, zsh, fish).",
    ),
}
