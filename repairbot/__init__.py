"""The DaiFu repair bot: a service that diagnoses a crash report and proposes repairs.

`repairbot.app:app` is the ASGI application; `repairbot.server` runs it.
"""
