"""Env rotation: start panes under the env-file launcher, find drift, roll sessions over.

The env file is the authority on what a session should hold; nothing here persists a
value or a fingerprint, because a recorded answer would be one more thing to go stale.
Every answer is a fresh comparison of the file with the running processes.
"""
