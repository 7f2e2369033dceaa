"""loop-envstate: env files and process environments, compared by fingerprint only.

Importing this package is cheap on purpose (it is the launcher of every pane the-loop
starts): python-dotenv, hashlib and psutil are imported only when first used.
"""

from loop_envstate.compare import compare
from loop_envstate.envfile import MAX_FILE_BYTES, EnvFile, EnvFileError, declared, parse, parse_text
from loop_envstate.errors import EnvstateError
from loop_envstate.fingerprint import FINGERPRINT_LENGTH, fingerprint
from loop_envstate.launcher import launcher_argv
from loop_envstate.procenv import process_environ

# The package's one version string: hatch reads it at build time (docs/releasing.md).
__version__ = "0.1.0"

__all__ = [
    "FINGERPRINT_LENGTH",
    "MAX_FILE_BYTES",
    "EnvFile",
    "EnvFileError",
    "EnvstateError",
    "compare",
    "declared",
    "fingerprint",
    "launcher_argv",
    "parse",
    "parse_text",
    "process_environ",
]
