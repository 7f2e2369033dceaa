"""Click commands. Each module is imported only when its command runs (see `lazy.py`)."""
