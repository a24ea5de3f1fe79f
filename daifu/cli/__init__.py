"""The daifu command: run, replay, show, report, serve, demo."""
