"""A pane program for delivery tests: raw tty, bracketed paste on, stdin bytes to a file.

argv[1] is the recording file. After the terminal is set up it prints READY; tmux parses
pane output in order, so once READY is on screen bracketed-paste mode is on.
"""

import os
import sys
import tty

out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
tty.setraw(0)
os.write(1, b"\x1b[?2004hREADY\r\n")
while True:
    data = os.read(0, 65536)
    if not data:
        break
    os.write(out, data)
