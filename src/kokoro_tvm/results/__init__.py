"""Results a person can look at: one CPU's pipeline metrics kept as a committed file, and the
page, plots and README table rendered from every such file.

A ``dvc repro`` measures the CPU it runs on, so each CPU's numbers are collected into their own
file (``docs/results/<cpu>.json``, ``collect``); ``python -m kokoro_tvm.results`` (``make
results``) collects this machine's and renders ``docs/results.md``, its PNG plots and the
README's table from all of them (``tables``, ``figures``). Every number is shown with the CPU and
ISA that measured it (``machine``).
"""
