"""Who decides what to do with a crash: the chain of decision sources, the bot client, replay, the allowlist, watches."""
