"""The GitHub webhook receiver: signature checks, bounded bodies, fast 202s."""
