"""DLFailureBenchmark: real crashing deep-learning programs, run on a CPU, and the harness measuring DaiFu on them.

`python -m DLFailureBenchmark` runs it; `cases/` holds the programs; see README.md.
"""
