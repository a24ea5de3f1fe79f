"""Backends answer a crash report with a diagnosis and suggestions; the server picks one by name.

`rules` is embedded, offline and deterministic (`rules.py`); `openai` asks an OpenAI-compatible model
(`openai.py`) and adds the rules engine's suggestions to the model's, standing in for the model
entirely, and saying why, whenever it fails or answers nothing usable. `base.py` says what a backend
is and answers; `registry.py` lists them by name.
"""
