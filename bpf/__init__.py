"""The BPF programs, installed as the package `npu_trace.bpf_programs` (pyproject.toml maps that name here).

This file exists so that this folder is a regular package: `importlib.resources.files()` cannot open a
namespace package on Python 3.9, and setuptools' editable installs only map a package with an `__init__.py`,
so an editable install reads these very files (edit them in place) and a wheel carries them as package data.
`npu_trace.bpf.files.program_dir()` finds them at run time. No Python code lives here.
"""
