"""Facts and plumbing every stage shares: errors, output, paths, artifacts, versions, the host, GPUs, processes."""
