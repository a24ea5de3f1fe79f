"""The rescue: what DaiFu saves of a run that it cannot repair, so that no trained work is lost.

When a crash is not repaired (no decision, a person quit, a deadline passed) or a preemption signal
arrives, DaiFu still holds the live state at that point. The rescue saves it before the exception
goes on, or before the signal has its effect, into `<workspace>/rescue/<name>/`:

- `collect.py`  what is saved: the trained state reachable from the frame (modules, optimizers, LR
                schedulers, grad scalers, generators), the RNG states, the loop position
- `devices.py`  which devices a crash left unusable (a CUDA error that poisons the context): their
                state is not read, and the manifest says so
- `save.py`     how: one folder written whole (temporary name, fsync, rename) with its manifest, in
                bounded time; each rank its own shard in a multi-rank job
- `signals.py`  when a signal asks for it (`rescue_on`): at the next statement of a vaccinated function
- `load.py`     `daifu.rescued(workspace)`: the newest rescue, for the program's restart code
"""
