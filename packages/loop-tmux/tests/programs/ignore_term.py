"""A pane program that ignores SIGTERM and starts a child in its own (the pane's) process group."""

import signal
import subprocess
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen(["sleep", "300"])
with open(sys.argv[1], "w") as f:
    f.write(str(child.pid))
while True:
    time.sleep(1)
