"""Optional packages that test modules need: a module that needs one is skipped, naming it, without it.

DaiFu's own code needs only the standard library; `pyproject.toml`'s extras add the rest. A test
module calls `pytest.importorskip` for each package it needs before importing anything that needs
them, so a machine without them skips it ("could not import 'httpx'") instead of failing at
collection.
"""

BOT = ("pydantic", "httpx", "fastapi", "uvicorn")
"""The repair bot's service and client (`daifu[bot]`)."""
