"""What every surface shares: where and who the target is, its configuration, secrets, HTTP transport."""
